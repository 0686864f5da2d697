"""`rt-runtime calibrate [BAG]`: budgets from the execution times measured in a replay.

BAG is replayed with measured timing (each op advances virtual time by the CPU time it used here);
each job's steps are read off the trace (``EventKind.MEASURED``). The copy of the config gets
``wcet`` = p99 of one run's execution time x margin and ``op_budgets`` = each op's p99 x margin,
rounded up to 10 us. Only those values change: ruamel.yaml's round-trip positions locate them and
the original text is edited in place, so comments, quoting and line breaks stay as they were.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import socket
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

STEP_NS = 10_000   # budgets are rounded up to 10 us
MAX_RUNS = 3       # time redundancy runs a graph at most three times per job
HEADER = "# Calibrated by `rt-runtime calibrate`"
HEADER_LINES = 4


@dataclass
class Budget:
    """One task's measurement and the budgets written for it."""

    name: str
    jobs: int = 0
    runs: int = 1                         # graph runs per job (time redundancy: 2 or 3)
    p99_ns: float = 0.0                   # one run
    op_p99_ns: dict[str, float] = field(default_factory=dict)
    old: str = ""                         # the config's wcet text (one run)
    new: str = ""
    ops: dict[str, str] = field(default_factory=dict)
    scaled: float | None = None           # factor the op budgets were scaled by to fit the wcet
    note: str = ""


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register the subcommand."""
    from . import args as A

    p = sub.add_parser(name, help=help_text, description=help_text + ". Exit 0 when the calibrated "
                       "config is schedulable, 1 when not, 2 on invalid input.")
    p.add_argument("bag", nargs="?", help="rosbag2 folder, .mcap or .db3 (default: the built-in scenario)")
    p.add_argument("--config", help="stack configuration (default: config/stack.yaml)")
    p.add_argument("--out", help="calibrated copy (default: <config stem>.calibrated.yaml here); never an input")
    p.add_argument("--margin", default="1.5", type=A.float_range(0.0, 100.0, low_open=True,
                                                                what="a margin above 0 up to 100"),
                   help="budget = p99 x margin (default 1.5)")
    p.add_argument("--trace", help="also keep the replay's trace here (for `rt-runtime analyze`)")
    p.add_argument("--force", action="store_true", help="replace an existing --out or --trace file (never an "
                   "input); without it an existing one is refused")
    p.add_argument("--json", action="store_true", help="print exactly one JSON document")
    return p


def measure(trace: str | Path, checked: Mapping[str, str] | None = None) -> dict[str, Budget]:
    """Per task, p99 of one run's execution time and of each primary-graph op, from MEASURED events.

    ``checked``: task -> ``"each"`` (output invariants: a check step after every run) or ``"last"``
    (dual/triple with checks: one after the vote); those steps are left out (their ``cost`` is declared)."""
    import numpy as np

    from ..sched.events import EventKind as K
    from ..trace import load_trace

    cols, meta = load_trace(trace)
    kind, task, job, a, b = (c.tolist() for c in (cols.kind, cols.task, cols.job, cols.a, cols.b))
    fallback = {(t, j) for k, t, j, v in zip(kind, task, job, b) if k == K.START and v == 1}
    finished = {(t, j) for k, t, j in zip(kind, task, job) if k == K.FINISH}
    steps: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for k, t, j, i, ns in zip(kind, task, job, a, b):
        if k == K.MEASURED and (t, j) in finished and (t, j) not in fallback:
            steps.setdefault((t, j), []).append((i, ns))
    per_run: dict[str, list[float]] = {}
    runs_of: dict[str, list[int]] = {}
    ops_of: dict[str, list[list[float]]] = {}
    for (t, _), mine in steps.items():
        name = cols.tasks[t]
        n = len(meta["ops"][name])
        how = (checked or {}).get(name)
        if how == "each":   # run r's op j is step r (n + 1) + j; step r (n + 1) + n is its check
            if (mine[-1][0] + 1) % (n + 1):
                continue
            mine = [(i // (n + 1) * n + i % (n + 1), ns) for i, ns in mine if i % (n + 1) != n]
        elif how == "last":
            mine = mine[:-1]
        if not mine:
            continue
        total = mine[-1][0] + 1   # steps of a redundant job count on: copy k's op i is step k * n + i
        if total % n or not 1 <= total // n <= MAX_RUNS:
            continue              # a job cut short or one that also ran its fallback: not a clean run
        per_op = ops_of.setdefault(name, [[] for _ in range(n)])
        prev = -1
        for i, ns in mine:        # a step may cover several ops: share its time evenly, as the cost models do
            for s in range(prev + 1, i + 1):
                per_op[s % n].append(ns / (i - prev))
            prev = i
        per_run.setdefault(name, []).append(sum(ns for _, ns in mine) / (total // n))
        runs_of.setdefault(name, []).append(total // n)
    return {name: Budget(name, len(v), max(runs_of[name]), float(np.percentile(v, 99)),
                         {op: float(np.percentile(s, 99)) for op, s in zip(meta["ops"][name], ops_of[name]) if s})
            for name, v in per_run.items()}


def checked_steps(cfg: Any) -> dict[str, str]:
    """Task -> where its jobs run declared output checks (``measure``'s ``checked``)."""
    from ..config.safety_keys import parse_redundancy

    out = {}
    for name, e in cfg.entries.items():
        spec = parse_redundancy(e.get("redundancy"))
        if spec is not None and spec.checks:
            out[name] = "each" if spec.mode == "invariants" else "last"
    return out


def fallback_shares(cfg: Any) -> dict[str, tuple[frozenset[str], int]]:
    """Task -> (the ops its fallback graph shares with its graph, ``fallback_wcet`` in ns), where it has one."""
    from ..config.stack import build_bindings

    bindings, _ = build_bindings(cfg, speculate=False)
    out = {}
    for b in bindings:
        if b.fallback is not None and b.fallback_wcet_ns is not None:
            out[b.name] = (frozenset(o.name for o in b.graph.ops) & frozenset(o.name for o in b.fallback.ops),
                           b.fallback_wcet_ns)
    return out


def round_up(ns: float) -> int:
    """Nanoseconds rounded up to the next 10 us (at least 10 us)."""
    return max(STEP_NS, math.ceil(round(ns / STEP_NS, 6)) * STEP_NS)


def fmt(ns: int) -> str:
    """A multiple of 10 us as a duration the config parser reads back exactly: "850us", "18.25ms"."""
    if ns < 1_000_000:
        return f"{ns // 1000}us"
    return f"{ns / 1e6:.2f}".rstrip("0").rstrip(".") + "ms"


def plan(b: Budget, margin: float, fallback: tuple[frozenset[str], int] | None = None) -> None:
    """Fill in the new wcet and op budgets; op budgets that add up to more than the wcet are scaled to fit.

    ``fallback``: the ops the task's fallback graph shares with its graph and the fallback's own budget
    (``fallback_wcet``): a budget is per op name, so those ops' budgets must fit it as well; where they
    do not, they are left out (the split rule shares the wcet among them) and the note says so."""
    wcet = round_up(b.p99_ns * margin)
    b.new = fmt(wcet)
    ops = {op: round_up(ns * margin) for op, ns in b.op_p99_ns.items()}
    b.note = f"calibrated: p99 {b.p99_ns / 1e6:.2f} ms" + (" per run" if b.runs > 1 else "") + \
        f" x {margin:g}, was {b.old}"
    if sum(ops.values()) > wcet:   # p99s do not add up: the sum of the ops' p99s exceeds the job's
        f = wcet / sum(ops.values())
        ops = {op: max(STEP_NS, math.floor(ns * f / STEP_NS) * STEP_NS) for op, ns in ops.items()}
        b.scaled = round(f, 3)
        b.note += f"; op budgets scaled by {f:.2f} to fit"
        if sum(ops.values()) > wcet:
            ops, b.note = {}, b.note + " (they cannot: left out)"
    if fallback is not None:
        shared, budget = fallback
        if sum(ns for op, ns in ops.items() if op in shared) > budget:
            left = sorted(op for op in ops if op in shared)
            ops = {op: ns for op, ns in ops.items() if op not in shared}
            b.note += (f"; op budgets of {left} left out: they also run in the fallback graph and would exceed its "
                       f"fallback_wcet of {fmt(round_up(budget))} (raise it to keep them)")
    b.ops = {op: fmt(ns) for op, ns in ops.items()}


def _scalar_end(line: str, col: int) -> int:
    """End column of the scalar starting at ``col`` (quoted, or plain up to a comma, brace or comment)."""
    if line[col] in "\"'":
        return line.index(line[col], col + 1) + 1
    m = re.compile(r"[^,}#\r\n]*").match(line, col)
    return col + len(m.group().rstrip()) if m else col


def rewrite(text: str, budgets: dict[str, Budget], header: list[str]) -> str:
    """The config's text with the tasks' wcet and op_budgets replaced; everything else kept byte for byte."""
    from ruamel.yaml import YAML, YAMLError

    try:
        doc = YAML().load(text)   # round-trip mode: every key and value with its line and column
    except YAMLError as e:
        raise ValueError(f"ruamel.yaml cannot read the config: {str(e).splitlines()[0]}") from None
    lines = text.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    edits: list[tuple[int, int, str]] = []   # (start offset, end offset, replacement)
    tasks = doc["tasks"]
    named = [(n, e, tasks.lc.key(n)[0]) for n, e in tasks.items()] if isinstance(tasks, dict) else \
        [(e["name"], e, tasks.lc.item(i)[0]) for i, e in enumerate(tasks)]
    for name, e, first in named:
        b = budgets.get(name)
        if b is None or not b.new:
            continue
        if "wcet" not in e.lc.data:
            raise ValueError(f"task '{name}': wcet comes from a merge key; calibrate edits a task's own wcet only")
        flow = e.fa.flow_style()
        vl, vc = e.lc.value("wcet")
        end = _scalar_end(lines[vl], vc)
        q = lines[vl][vc] if lines[vl][vc] in "\"'" else ""
        edits.append((starts[vl] + vc, starts[vl] + end, f"{q}{b.new}{q}"))
        ops = {**{k: str(v) for k, v in (e.get("op_budgets") or {}).items()}, **b.ops}
        flow_ops = "{" + ", ".join(f'{k}: "{v}"' for k, v in ops.items()) + "}"
        if "op_budgets" in e.lc.data and b.ops:
            kl, kc, ol, oc = e.lc.data["op_budgets"]
            cur = e["op_budgets"]
            if cur is None:                      # "op_budgets:" with no value
                at = starts[kl] + kc + len("op_budgets:")
                edits.append((at, at, f" {flow_ops}"))
            elif cur.fa.flow_style():
                at = starts[ol] + oc
                edits.append((at, text.index("}", at) + 1, flow_ops))
            else:                                # block style: rewrite its lines at the same indent
                last = max(v[2] for v in cur.lc.data.values())
                pad = " " * cur.lc.data[next(iter(cur))][1]
                edits.append((starts[ol], starts[last + 1], "".join(f'{pad}{k}: "{v}"\n' for k, v in ops.items())))
        elif b.ops:
            if flow:
                edits.append((starts[vl] + end, starts[vl] + end, f", op_budgets: {flow_ops}"))
            else:
                nl = "" if lines[vl].endswith("\n") else "\n"
                pad = " " * e.lc.key("wcet")[1]
                edits.append((starts[vl + 1], starts[vl + 1], f"{nl}{pad}op_budgets: {flow_ops}\n"))
        if flow:   # a comment cannot sit inside a flow mapping: it goes on a line of its own above
            prev = lines[first - 1].strip() if first > 0 else ""
            pad = re.match(r"\s*", lines[first]).group()
            lo = starts[first - 1] if prev.startswith(f"# {name}: calibrated:") else starts[first]
            edits.append((lo, starts[first], f"{pad}# {name}: {b.note}\n"))
        else:      # an end-of-line comment on the wcet line; a comment already there follows ours
            rest = lines[vl][end:].rstrip("\r\n")
            old = rest.strip().lstrip("#").strip() if rest.strip().startswith("#") else ""
            if old.startswith("calibrated:"):   # calibrated before: keep only what followed that note
                old = old.partition(" | ")[2]
            note = b.note + (f" | {old}" if old else "")
            edits.append((starts[vl] + end, starts[vl] + len(lines[vl].rstrip("\r\n")), f"   # {note}"))
    # From the end backwards, so earlier offsets stay valid; at one offset the later edit first, so
    # inserts there keep the order they were made in.
    for _, (s, t, new) in sorted(enumerate(edits), key=lambda x: (x[1][0], x[0]), reverse=True):
        text = text[:s] + new + text[t:]
    # An editor's schema line stays first (yaml-language-server reads only the top of the file).
    first, _, rest = text.partition("\n")
    lead = first + "\n" if first.startswith("# yaml-language-server:") else ""
    text = rest if lead else text
    if text.startswith(HEADER):   # a calibrated file calibrated again: replace its header
        text = "".join(text.splitlines(keepends=True)[HEADER_LINES:])
    return lead + "".join(f"# {h}\n" for h in header) + text


def machine() -> dict[str, Any]:
    """Host name, CPU model (/proc/cpuinfo) and core count, for the calibrated file's header."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    return {"host": socket.gethostname(), "cpu": cpu, "cores": os.cpu_count()}


def _check_rewrite(old: str, new: str, budgets: dict[str, Budget]) -> dict[str, Any]:
    """The new text parsed must equal the old one with exactly the planned values changed (guards ``rewrite``)."""
    import yaml

    want, got = yaml.safe_load(old), yaml.safe_load(new)
    tasks = want["tasks"]
    for name, e in (tasks.items() if isinstance(tasks, dict) else ((e["name"], e) for e in tasks)):
        b = budgets[name]
        if b.new:
            e["wcet"] = b.new
        if b.ops:
            e["op_budgets"] = {**(e.get("op_budgets") or {}), **b.ops}
    if got != want:
        raise RuntimeError("calibrate: the rewritten config differs from the planned one beyond wcet and op_budgets")
    return got


def run(args: argparse.Namespace) -> int:
    """Replay, measure, write the calibrated copy, analyse it: 0 schedulable, 1 not."""
    staged: list[Any] = []
    try:
        return _run(args, staged)
    finally:
        for st in staged:
            st.discard()   # a --trace not committed with --out (an error, an interrupt) is removed


def _run(args: argparse.Namespace, staged: list[Any]) -> int:
    from ..cli import UsageError
    from ..config import ConfigError
    from ..config.stack import load_stack, parse_stack
    from ..core.task import TaskError
    from ..core.units import parse_duration
    from ..outpaths import OutputPathError, Staged, bag_extent, check_distinct, check_output, write_atomic
    from ..replay import ReplayError, replay
    from ..replay.defaults import default_bag, default_config
    from ..trace import TraceFileError
    from .check import POLICY_NAMES, analyse_file

    try:
        margin = float(args.margin)
    except ValueError:
        margin = math.nan
    if not math.isfinite(margin) or margin <= 0:
        raise UsageError(f"--margin: expected a positive number such as 1.5, found {args.margin!r}")
    if margin < 1:
        print(f"rt-runtime calibrate: warning: --margin {margin:g} is below 1: budgets below the measured p99 "
              "will be overrun", file=sys.stderr)
    try:
        config = Path(args.config) if args.config else default_config()
        cfg = load_stack(config)
        text = config.read_text(encoding="utf-8")
        bag = Path(args.bag) if args.bag else default_bag(progress=sys.stderr.isatty())
    except (ConfigError, OSError) as e:
        raise UsageError(str(e)) from None
    out = Path(args.out) if args.out else Path.cwd() / f"{config.stem}.calibrated.yaml"
    inputs = {"config": config, "bag": bag_extent(bag)}
    try:   # never an input, never an existing file without --force
        check_output(out, "--out", inputs, force=args.force)
        if args.trace:
            check_output(args.trace, "--trace", inputs, force=args.force)
        check_distinct({"--out": out, "--trace": args.trace})
        if args.trace:   # written beside its path, renamed there with --out (removed if calibrate fails)
            staged.append(Staged(args.trace, replace=True))
    except OutputPathError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"--trace {args.trace}: cannot create: {e.strerror or e}") from None
    with tempfile.TemporaryDirectory(prefix="rt_calibrate_") as tmp:
        trace = staged[0].tmp if staged else Path(tmp) / "calibrate.rttrace"
        try:   # speculation off: the budgets are for the mandatory jobs
            replay(bag, cfg, speed="max", timing="measured", trace=trace, speculate=False,
                   progress=sys.stderr.isatty() and not args.json)
            budgets = measure(trace, checked_steps(cfg))
        except (ConfigError, ReplayError, TraceFileError, ValueError, OSError) as e:
            raise UsageError(str(e)) from None
    budgets = {name: budgets.get(name) or Budget(name, note="not measured (no complete job in the bag): kept")
               for name in cfg.entries}   # in the config's order
    shared = fallback_shares(cfg)
    for name, e in cfg.entries.items():
        b = budgets[name]
        b.old = str(e["wcet"])
        if b.jobs:
            plan(b, margin, shared.get(name))
    host = machine()
    header = [f"{HEADER[2:]} on {host['host']} ({host['cpu']}, {host['cores']} cores), "
              f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC: wcet = p99 of",
              f"each task's measured execution time x {margin:g}, op_budgets = each op's p99 x {margin:g}.",
              f"bag: {bag}", f"command: rt-runtime calibrate {bag} --config {config} --margin {margin:g} --out {out}"]
    header = [h.replace("\n", " ") for h in header]   # a newline in a path would end the comment
    try:
        new_text = rewrite(text, budgets, header)
        parse_stack(_check_rewrite(text, new_text, budgets), str(out))
        write_atomic(out, new_text, like=config)
        for st in staged:
            st.commit()
        report = analyse_file(str(out))   # the very analysis `rt-runtime check` runs on it
        policy = report.policy
    except (ConfigError, TaskError, ValueError, OSError) as e:
        raise UsageError(str(e)) from None
    how = f"{policy} ({POLICY_NAMES[policy]}), utilization {report.utilization:.3f}"
    missed = [t.name for t in report.tasks if not t.schedulable]
    verdict = f"fits: schedulable under {how}" if report.schedulable else \
        f"does not fit: not schedulable under {how}; can miss: {', '.join(missed)}"
    ms = lambda ns: round(ns / 1e6, 4)  # noqa: E731
    if args.json:
        print(json.dumps({
            "config": str(config), "bag": str(bag), "out": str(out), "margin": margin, "machine": host,
            "policy": policy, "schedulable": report.schedulable, "verdict": verdict,
            "tasks": [{"name": b.name, "jobs": b.jobs, "runs": b.runs, "p99_ms": ms(b.p99_ns),
                       "old_wcet_ms": ms(parse_duration(b.old)), "new_wcet_ms": ms(parse_duration(b.new or b.old)),
                       "op_p99_ms": {k: ms(v) for k, v in b.op_p99_ns.items()},
                       "op_budgets_ms": {k: ms(parse_duration(v)) for k, v in b.ops.items()},
                       "op_budgets_scaled": b.scaled, "note": b.note} for b in budgets.values()]}))
        return 0 if report.schedulable else 1
    print(f"measured on {host['host']} ({host['cpu']}, {host['cores']} cores): {bag}, margin {margin:g}")
    print(f"{'task':<22} {'jobs':>5} {'p99 ms':>8} {'old wcet':>9} {'new wcet':>9}  op budgets")
    for b in budgets.values():
        ops = ", ".join(f"{k} {v}" for k, v in b.ops.items()) + (f" (scaled x{b.scaled:g})" if b.scaled else "")
        print(f"{b.name:<22} {b.jobs:>5} {b.p99_ns / 1e6:>8.2f} {b.old:>9} {b.new or '(kept)':>9}  {ops or b.note}")
    print(f"wrote {out}")
    print(verdict)
    return 0 if report.schedulable else 1
