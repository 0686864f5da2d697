"""`rt-runtime batch BAGS...`: many bags replayed on Dask, one results store, gates, one report."""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from typing import Any


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register the subcommand."""
    from . import args as A

    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("bags", nargs="+", metavar="BAGS", help="bags (rosbag2 folders, .mcap or .db3 files), "
                   "folders holding bags (searched at any depth), or globs")
    p.add_argument("--config", help="stack configuration (default: config/stack.yaml)")
    p.add_argument("--cluster", metavar="ADDRESS", help="a running Dask scheduler, e.g. tcp://10.0.0.5:8786 "
                   "(default: an embedded cluster of process workers on 127.0.0.1)")
    p.add_argument("--workers", type=A.workers, help="embedded cluster: worker processes (default: one per core); "
                   "with --cluster: wait until this many workers are connected (default 1)")
    p.add_argument("--results", metavar="DIR", help="results store (Parquet, a row per bag): bags whose row for "
                   "the same bag, config and code exists are not replayed again")
    p.add_argument("--expect", metavar="FILE", help="gates: YAML of dotted paths into the replay JSON and their "
                   "bounds, e.g. 'misses: {max: 0}'; a bag that breaks one fails the batch (exit 1)")
    p.add_argument("--junit", metavar="FILE", help="write JUnit XML: a testcase per bag, a failure per broken bound")
    p.add_argument("--html", metavar="FILE", help="write a self-contained fleet report (HTML)")
    p.add_argument("--force", action="store_true", help="replace an existing --junit or --html file (never an input)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON document")
    return p


def run(args: argparse.Namespace) -> int:
    """Replay every bag (0: all passed; 1: a bag failed its gates or could not be replayed; 130/143: interrupted)."""
    from ..bag import BagError
    from ..cli import UsageError
    from ..config import ConfigError
    from ..config.stack import load_stack
    from ..fleet.bags import BagSelectionError, find_bags
    from ..fleet.cluster import ClusterError, open_client, quiet_dask, run_jobs
    from ..fleet.gates import load_expect
    from ..fleet.runner import make_jobs, run_batch
    from ..fleet.store import ResultsStore, StoreError
    from ..outpaths import EXIT_CODES, INTERRUPT, bag_extent, check_distinct, check_output
    from ..replay.defaults import default_config

    t0 = time.perf_counter()
    missing = [m for m in ("distributed", "pyarrow", "tqdm") if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"needs {', '.join(missing)}, not installed here: pip install -r requirements.txt, "
                         "or pip install .[fleet]")
    try:
        config = args.config or str(default_config())
        bags = find_bags(args.bags)
        inputs: dict[str, Any] = {"config": config, "expect file": args.expect}
        inputs.update({f"bag {b}": bag_extent(b) for b in bags})
        for flag, kind in (("--junit", "file"), ("--html", "file"), ("--results", "dir")):
            path = getattr(args, flag[2:])
            if path:   # the store is meant to exist already (resume): it is checked, never replaced
                check_output(path, flag, inputs, force=args.force or flag == "--results", kind=kind)
        check_distinct({"--junit": args.junit, "--html": args.html, "--results": args.results})
        if args.results:
            ResultsStore.check_folder(args.results)
        bounds = load_expect(args.expect) if args.expect else []
        load_stack(config, {})   # a bad config is one line here, not an error row per bag
        jobs = make_jobs(bags, config, stop=INTERRUPT)
    except (BagSelectionError, ConfigError, StoreError, BagError, ValueError, OSError) as e:
        raise UsageError(str(e)) from None
    store = ResultsStore(args.results)
    cluster: dict[str, Any] | None = None

    def replay_on_dask(todo: list, on_row: Any) -> str | None:
        nonlocal cluster
        with open_client(args.cluster, args.workers) as (client, info):
            cluster = info.to_json()
            return run_jobs(client, todo, on_row, stop=INTERRUPT)

    bar = _progress(len(jobs))
    try:
        with quiet_dask():
            outcomes, interrupted = run_batch(jobs, store, bounds, replay_on_dask, progress=bar)
    except (ClusterError, StoreError) as e:
        raise UsageError(str(e)) from None
    finally:
        if bar is not None:
            bar.close()
    interrupted = interrupted or INTERRUPT()
    other = [o.bag for o in outcomes if jobs and o.row.get("code_version") != jobs[0].code_version]
    if other:
        print(f"rt-runtime batch: warning: {len(other)} bag(s) ran on other code than this client's "
              f"({jobs[0].code_version}), e.g. {other[0]}: the code changed during the batch, or a worker "
              "has other code; those rows are replayed again next time", file=sys.stderr)
    wall = time.perf_counter() - t0
    _write_reports(args, outcomes, wall, cluster, interrupted, len(jobs))
    _print(args, outcomes, wall, cluster, interrupted)
    if interrupted:
        print(f"rt-runtime batch: interrupted by {interrupted}: {len(outcomes)} of {len(jobs)} bags done"
              + (f", their rows kept in {args.results}; run the same command again to go on"
                 if args.results else " (no --results: nothing to resume from)"), file=sys.stderr)
        return EXIT_CODES[interrupted]
    return 0 if all(o.passed for o in outcomes) else 1


def _progress(total: int) -> Any:
    """A progress bar over bags with its ETA on stderr (tqdm), only on a terminal."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="bag", desc="batch", file=sys.stderr, dynamic_ncols=True)


def _write_reports(args: argparse.Namespace, outcomes: list, wall: float, cluster: dict[str, Any] | None,
                   interrupted: str | None, total: int) -> None:
    """--junit and --html, atomically; an interrupted batch's say so (the bags done only)."""
    from ..fleet.report import junit_xml, render_html
    from ..outpaths import write_atomic

    cut = f"interrupted by {interrupted} after {len(outcomes)} of {total} bags" if interrupted else None
    if args.junit:
        write_atomic(args.junit, junit_xml(outcomes, wall, partial=cut))
    if args.html:
        page = render_html(outcomes, wall, cluster, partial=cut)
        write_atomic(args.html, page)


def _print(args: argparse.Namespace, outcomes: list, wall: float, cluster: dict[str, Any] | None,
           interrupted: str | None) -> None:
    """One JSON document, or the per-bag summary and the table of failures."""
    from ..fleet.report import batch_json, failure_lines, summary_lines

    if args.json:
        doc = batch_json(outcomes, wall, cluster)
        if interrupted:
            doc.update(interrupted=interrupted, partial=True)
        print(json.dumps(doc))
        return
    for line in summary_lines(outcomes, wall, cluster):
        print(line)
    fails = failure_lines(outcomes)
    if fails:
        print("\nfailures:")
        for line in fails:
            print(line)

