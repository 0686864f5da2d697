"""`rt-runtime analyze TRACE`: which job missed its deadline, by how much, and why.

A thin adapter: read the trace (and the configuration it names, for chains, wiring and
priorities), call ``rt_runtime.analysis.trace_report.analyze_trace``, and print text or JSON;
plots, HTML and the Perfetto export on request.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register the subcommand."""
    from . import args as A

    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("trace", help="trace file written by `rt-runtime replay --trace` (or `run --trace`)")
    p.add_argument("--config", help="configuration for chains, task wiring and priorities "
                                    "(default: the one the trace names, if it can be read)")
    p.add_argument("--html", metavar="OUT.html", help="write one self-contained HTML report (tables and plots)")
    p.add_argument("--plots", metavar="DIR", help="write the plots as PNG files into DIR")
    p.add_argument("--perfetto", metavar="OUT.json", help="write the trace as Chrome/Perfetto JSON")
    p.add_argument("--force", action="store_true", help="replace existing --html/--perfetto files and plots "
                   "(never an input); without it an existing one is refused")
    p.add_argument("--json", action="store_true", help="print exactly one JSON document")
    p.add_argument("--limit", type=A.nonneg_int, default=20, help="missed jobs listed in the text report (default 20)")
    return p


def load_config(path: str, explicit: bool) -> dict[str, Any]:
    """Tasks, chains, wiring, policy and what releases each task (as `check` reads them) of a config file;
    {} when an implicit one cannot be read."""
    from ..analysis.trace_rta import SystemModel
    from ..cli import UsageError
    from ..config.taskset import ConfigError, load_taskset, load_yaml, task_releases

    try:
        policy, tasks, chains = load_taskset(path)
        doc = load_yaml(path)
        acts, on_finish, explicit, _ = task_releases(path)
    except (ConfigError, ValueError, OSError) as e:
        if explicit:
            raise UsageError(str(e)) from None
        print(f"rt-runtime analyze: warning: the trace's configuration is not used ({e})", file=sys.stderr)
        return {}
    raw = doc.get("tasks") or []
    entries = {e["name"]: e for e in raw if isinstance(e, dict) and "name" in e} if isinstance(raw, list) else \
        {n: {"name": n, **(f or {})} for n, f in raw.items()}
    return {"tasks": tasks, "chains": chains, "wiring": entries, "policy": policy,
            "system": SystemModel(acts, on_finish, explicit, steal=doc.get("steal") is True)}


def run(args: argparse.Namespace) -> int:
    """Analyse and report."""
    from ..analysis.trace_report import analyze_trace
    from ..analysis.trace_text import format_report
    from ..cli import UsageError
    from ..outpaths import OutputPathError, Staged, check_distinct, check_output
    from ..trace import TraceFileError, load_trace, write_perfetto

    try:
        cols, meta = load_trace(args.trace)
    except TraceFileError as e:
        raise UsageError(str(e)) from None
    cfg_path = args.config or meta.get("config")
    outputs = {"--plots": args.plots, "--html": args.html, "--perfetto": args.perfetto}
    inputs = {"trace": args.trace, "config": cfg_path}
    try:   # before any work: an output is never an input, never an existing file without --force
        for flag, path in outputs.items():
            if path:
                check_output(path, flag, inputs, force=args.force, kind="dir" if flag == "--plots" else "file")
        check_distinct(outputs)
    except OutputPathError as e:
        raise UsageError(str(e)) from None
    cfg: dict[str, Any] = {}
    if cfg_path and (args.config or Path(cfg_path).is_file()):
        cfg = load_config(cfg_path, bool(args.config))
    elif cfg_path:
        print(f"rt-runtime analyze: note: the trace's configuration {cfg_path} is not found from here; chains "
              f"and priorities come from the trace alone (pass --config FILE)", file=sys.stderr)
    try:
        rep = analyze_trace(cols, meta, tasks=cfg.get("tasks"), chains=cfg.get("chains") or None,
                            wiring=cfg.get("wiring"), policy=cfg.get("policy"), system=cfg.get("system"))
    except (ValueError, KeyError, IndexError) as e:   # a well-formed file whose contents make no sense
        raise UsageError(f"{args.trace}: cannot analyse this trace ({type(e).__name__}: {e})") from None
    written: list[str] = []
    staged: list[Staged] = []   # each output is written beside its path and renamed once all are written
    try:
        if args.plots:
            from ..analysis.plots import write_plots
            staged.append(Staged(args.plots, replace=True, merge=True))   # an existing folder keeps its other files
            written += [str(Path(args.plots) / p.name) for p in write_plots(rep, staged[-1].tmp)]
        if args.html:
            from ..analysis.html import write_html
            staged.append(Staged(args.html, replace=True))
            write_html(rep, staged[-1].tmp, source=args.trace)
            written.append(str(args.html))
        if args.perfetto:
            staged.append(Staged(args.perfetto, replace=True))
            write_perfetto(staged[-1].tmp, cols, meta)
            written.append(str(args.perfetto))
        for st in staged:
            st.commit()
    except OSError as e:
        raise UsageError(f"cannot write output: {e}") from None
    finally:
        for st in staged:
            st.discard()   # what was not committed (an error, an interrupt) is removed
    if args.json:
        doc = rep.to_json()
        doc["written"] = written
        print(json.dumps(doc, allow_nan=False, default=_jsonable))
    else:
        print(format_report(rep, args.trace, args.limit))
        for w in written:
            print(f"wrote {w}")
    return 0


def _jsonable(v: Any) -> Any:
    """numpy scalars in the report become plain numbers."""
    if hasattr(v, "item"):
        return v.item()
    raise TypeError(f"not JSON serializable: {type(v).__name__}")
