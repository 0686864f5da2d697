"""`rt-runtime sim OUT`: simulate a driving scenario and record every sensor to a rosbag2 bag."""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

from rt_runtime.cli import UsageError


def add_parser(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register the `sim` subcommand."""
    from rt_runtime.sim.scenarios import DEFAULT_SCENARIO, SCENARIOS

    from . import args as A

    p = subparsers.add_parser(name, help=help_text, description=help_text)
    p.add_argument("out", metavar="OUT", help="new bag directory to write")
    p.add_argument("--scenario", default=DEFAULT_SCENARIO,
                   help=f"one of {', '.join(sorted(SCENARIOS))} (default {DEFAULT_SCENARIO})")
    p.add_argument("--seconds", default="20", type=A.float_range(0.0, 3600.0, low_open=True,
                                                                what="a number of seconds above 0 up to 3600"),
                   help="simulated duration in seconds (default 20)")
    p.add_argument("--format", default="mcap", help="storage: mcap or sqlite3 (default mcap)")
    p.add_argument("--seed", default="0", type=A.int_range(0, 2**63 - 1, what="a seed from 0 to 2**63-1"), help="seed of traffic and sensor noise (default 0)")
    p.add_argument("--workers", default="auto",
                   type=lambda text: "auto" if text.strip() == "auto" else
                   A.int_range(1, 64, what="'auto' or a process count from 1 to 64")(text),
                   help="processes rendering sensor frames; 'auto' = CPU count up to 8 (output is identical)")
    p.add_argument("--camera", choices=("raw", "jpeg", "png"), default="raw",
                   help="camera as sensor_msgs/Image (raw, default) or as a CompressedImage on "
                        "/sensing/camera/image_raw/compressed (jpeg, png)")
    p.add_argument("--force", action="store_true", help="replace an existing OUT (otherwise refused)")
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
    from rt_runtime.outpaths import OutputPathError, check_output

    try:
        check_output(args.out, "OUT", force=bool(getattr(args, "force", False)), kind="bag")
    except OutputPathError as e:
        raise UsageError(str(e)) from None
    return args.scenario, seconds, args.format, seed, workers


def run(args: argparse.Namespace) -> int:
    """Simulate and write the bag; print one summary line (progress on stderr when it is a TTY).

    The bag is written beside OUT and renamed onto it when complete. SIGINT/SIGTERM (through
    ``rt_runtime.cli``) stop after the message being written: OUT is then a readable bag marked
    partial in its metadata, and the exit status is 130/143.
    """
    scenario, seconds, fmt, seed, workers = _parse(args)
    from rt_runtime.bag import BagError
    from rt_runtime.outpaths import EXIT_CODES, INTERRUPT, PartialStop, Staged
    from rt_runtime.sim import record
    from rt_runtime.sim.renderers import RenderError

    tty = sys.stderr.isatty()
    last = [0.0]

    def progress(t: float) -> None:
        """Called after each message is written: the place to stop at a signal, and the TTY's progress."""
        if INTERRUPT.signal:
            raise PartialStop(f"interrupted by {INTERRUPT.signal} at {t:.2f} s of {seconds:g} s simulated",
                              INTERRUPT.signal)
        now = time.monotonic()
        if tty and (now - last[0] > 0.2 or t >= seconds - 0.05):
            last[0] = now
            sys.stderr.write(f"\rsim {scenario}: {t:5.1f} / {seconds:.1f} s ({100 * t / seconds:3.0f}%)")
            sys.stderr.flush()
    try:
        staged = Staged(args.out, replace=bool(getattr(args, "force", False)))
    except OSError as e:
        raise UsageError(f"OUT {args.out}: cannot create: {e.strerror or e}") from None
    try:
        with staged as tmp:   # renamed onto OUT when complete (or cut short: PartialStop), else removed
            s = record(tmp, scenario, seconds, seed, fmt, progress=progress, workers=workers,
                       camera_format=getattr(args, "camera", "raw"))
    except PartialStop as e:
        if tty:
            sys.stderr.write("\n")
            tty = False
        print(f"rt-runtime sim: {e}; kept {args.out} (marked partial)", file=sys.stderr)
        return EXIT_CODES[e.signal or "SIGINT"]
    except BagError as e:
        raise UsageError(str(e)) from None
    except RenderError as e:   # not the input's fault: exit 1, and nothing is left at OUT
        print(f"rt-runtime sim: error: {e}", file=sys.stderr)
        return 1
    finally:
        if tty:
            sys.stderr.write("\n")
    met = sum(ok for _, _, ok in s.checks.values())
    print(f"wrote {args.out} ({fmt}): {scenario}, {seconds:g} s, seed {seed}, {s.messages} messages, "
          f"{s.bytes / 1e6:.1f} MB in {s.wall_s:.1f} s ({s.wall_s / seconds:.2f}x real time); "
          f"expected outcomes met: {met}/{len(s.checks)}")
    return 0
