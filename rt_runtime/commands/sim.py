"""`rt-runtime sim OUT`: simulate a driving scenario and record every sensor to a rosbag2 bag."""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

from rt_runtime.cli import UsageError


def add_parser(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register the `sim` subcommand."""
    from rt_runtime.sim.scenarios import DEFAULT_SCENARIO, SCENARIOS

    p = subparsers.add_parser(name, help=help_text, description=help_text)
    p.add_argument("out", metavar="OUT", help="new bag directory to write")
    p.add_argument("--scenario", default=DEFAULT_SCENARIO,
                   help=f"one of {', '.join(sorted(SCENARIOS))} (default {DEFAULT_SCENARIO})")
    p.add_argument("--seconds", default="20", help="simulated duration in seconds (default 20)")
    p.add_argument("--format", default="mcap", help="storage: mcap or sqlite3 (default mcap)")
    p.add_argument("--seed", default="0", help="seed of traffic and sensor noise (default 0)")
    p.add_argument("--workers", default="auto",
                   help="processes rendering sensor frames; 'auto' = CPU count up to 8 (output is identical)")
    return p


def _parse(args: argparse.Namespace) -> tuple[str, float, str, int, int]:
    from rt_runtime.sim.scenarios import SCENARIOS

    if args.scenario not in SCENARIOS:
        raise UsageError(f"unknown scenario {args.scenario!r}; choose one of {', '.join(sorted(SCENARIOS))}")
    try:
        seconds = float(args.seconds)
    except ValueError:
        raise UsageError(f"--seconds: expected a number of seconds, found {args.seconds!r}") from None
    if not math.isfinite(seconds) or not 0 < seconds <= 3600:
        raise UsageError(f"--seconds: expected 0 < S <= 3600, found {args.seconds}")
    if args.format not in ("mcap", "sqlite3"):
        raise UsageError(f"--format: expected mcap or sqlite3, found {args.format!r}")
    try:
        seed = int(args.seed)
    except ValueError:
        raise UsageError(f"--seed: expected an integer, found {args.seed!r}") from None
    if seed < 0:
        raise UsageError(f"--seed: expected a non-negative integer, found {seed}")
    if args.workers == "auto":
        workers = min(8, os.cpu_count() or 1)
    else:
        try:
            workers = int(args.workers)
        except ValueError:
            raise UsageError(f"--workers: expected 'auto' or a positive integer, found {args.workers!r}") from None
        if workers < 1:
            raise UsageError(f"--workers: expected a positive integer, found {workers}")
    if Path(args.out).exists():
        raise UsageError(f"{args.out} exists already; give a new path for the bag")
    return args.scenario, seconds, args.format, seed, workers


def run(args: argparse.Namespace) -> int:
    """Simulate and write the bag; print one summary line (progress on stderr when it is a TTY)."""
    scenario, seconds, fmt, seed, workers = _parse(args)
    from rt_runtime.bag import BagError
    from rt_runtime.sim import record

    progress = None
    if sys.stderr.isatty():
        last = [0.0]

        def progress(t: float) -> None:
            now = time.monotonic()
            if now - last[0] > 0.2 or t >= seconds - 0.05:
                last[0] = now
                sys.stderr.write(f"\rsim {scenario}: {t:5.1f} / {seconds:.1f} s ({100 * t / seconds:3.0f}%)")
                sys.stderr.flush()
    try:
        s = record(args.out, scenario, seconds, seed, fmt, progress=progress, workers=workers)
    except BagError as e:
        raise UsageError(str(e)) from None
    finally:
        if progress is not None:
            sys.stderr.write("\n")
    met = sum(ok for _, _, ok in s.checks.values())
    print(f"wrote {s.path} ({fmt}): {scenario}, {seconds:g} s, seed {seed}, {s.messages} messages, "
          f"{s.bytes / 1e6:.1f} MB in {s.wall_s:.1f} s ({s.wall_s / seconds:.2f}x real time); "
          f"expected outcomes met: {met}/{len(s.checks)}")
    return 0
