"""`rt-runtime compile [--config C] [--bag BAG | --no-bag] [--mode M] [--build jit,aot] [--explain]`: each task's
kernels and the mode each runs (``exec/compile.py``), with the numbers the choice was made by.

Replays the first ``--bag-seconds`` of BAG (default: the built-in bag) with eager kernels, keeping copies of
each kernel's first ``--samples`` calls after the warm-up (``exec/sample.py``: real arguments, where the
warm-up's zeros at up to 256 rows make data-dependent kernels 10-200x slower than a real call). Then builds
every task's graph as the config says (calibrated from BAG, as `replay` does), runs it on synthetic inputs
(a warm-up) recording the kernels it calls, and for each: the mode ``--mode`` asks (``auto``: the largest net
benefit among the modes bit-identical to eager, over the task's rate x ``--seconds``, on the bag's arguments
where measured, else on the zeros, which ``--explain`` says). ``--build`` measures and caches the modes
named (``exec/cache.py``: ``$RT_RUNTIME_CACHE``, default ``~/.cache/rt_runtime``), so that a later
replay's or live node's set-up only loads them; 4-50 s a kernel and mode on a 2-core machine.
Exit status: 0, 2 on invalid input (a missing bag, one without the config's topics: one line, as `replay`).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import args as A

ZEROS = "the warm-up's zeros"   # exec.compile.ZEROS, here without importing torch for --help


def _modes(text: str) -> tuple[str, ...]:
    modes = tuple(m for m in text.split(",") if m)
    bad = [m for m in modes if m not in ("jit", "aot")]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of jit, aot; found {text!r}")
    return modes


def add_parser(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register `compile` with its arguments."""
    from ..exec.kernel import REQUESTS   # not exec.compile: that imports torch, for every command's --help

    p = subparsers.add_parser(
        name, help=help_text, description="Record the kernels each task's graph calls (a warm-up on synthetic "
        "inputs) and choose each one's mode: eager (the Python body), jit (torch.compile) or aot (torch.export + "
        "AOTInductor). auto takes the largest net benefit = (t_eager - t_compiled) x expected calls - cost, "
        "among the modes whose output was bit-identical to eager's. --build measures and caches modes ahead.")
    p.add_argument("--config", help="stack configuration (default: config/stack.yaml)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--bag", help="measure each kernel on the arguments it gets in this bag's first seconds "
                     "(default: the built-in bag)")
    src.add_argument("--no-bag", action="store_true", help="measure on the warm-up's zeros only (no replay)")
    p.add_argument("--bag-seconds", type=A.seconds, default=3.0, help="how much of the bag to replay (default 3)")
    p.add_argument("--samples", type=int, default=8, help="calls recorded per kernel (default 8)")
    p.add_argument("--mode", choices=REQUESTS, default="auto", help="what every task asks (default auto)")
    p.add_argument("--build", type=_modes, default=(), metavar="MODES",
                   help="measure and cache these modes (jit, aot, or jit,aot) where not cached yet")
    p.add_argument("--task", action="append", default=[], help="only this task (repeatable)")
    p.add_argument("--seconds", type=A.seconds, default=600.0,
                   help="how long the stack is expected to run: the task's rate x this is its expected jobs "
                   "(default 600)")
    p.add_argument("--explain", action="store_true", help="every kernel's numbers: per-call times, costs, "
                   "bit-identity, net benefit")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    return p


def _us(t: float | None) -> str:
    return "-" if t is None else f"{t * 1e6:.1f}"


def render(rows: list[dict[str, Any]], explain: bool) -> str:
    """The table: task, kernel, mode (and with ``explain`` where the numbers come from, the numbers and why)."""
    lines = [f"{'task':<14} {'kernel':<44} {'mode':<5}" + ("  numbers" if explain else "")]
    for r in rows:
        line = f"{r['task']:<14} {r['kernel']:<44} {r['mode']:<5}"
        if explain:
            per = ", ".join(f"{m} {_us(t)} us (cost {r['cost'].get(m, 0):.1f} s, "
                            f"{'bit-identical' if r['bit_equal'].get(m) else 'bits differ'}, "
                            f"net {r['net'].get(m, float('nan')):+.2f} s)" for m, t in sorted(r["t"].items()))
            line += (f"  on {r.get('inputs', ZEROS)}: eager {_us(r['t_eager'])} us x {r['calls']:.0f} calls"
                     + (f"; {per}" if per else "") + f"; {r['why']}")
            z = r.get("probe")
            if z:   # the zeros' figures, shown so the gap is seen, never chosen by
                zper = "".join(f", {m} {_us(t)} us ({'bit-identical' if z['bit_equal'].get(m) else 'bits differ'})"
                               for m, t in sorted(z["t"].items()))
                line += f" | on {ZEROS} (not used): eager {_us(z['t_eager'])} us{zper}, auto there: {z['mode']}"
        lines.append(line)
    return "\n".join(lines)


def record_bag(config: str, bag: str | None, seconds: float, keep: int) -> tuple[Any, Any]:
    """The stack calibrated from ``bag`` (default: the built-in one), and its kernels' first ``keep`` calls in
    its first ``seconds`` (``exec.sample.Samples``); a bag that does not open or fit raises ``ReplayError``."""
    from pathlib import Path

    from ..config.calibration import calibrate_from_bag
    from ..config.stack import load_stack
    from ..exec.sample import sampling
    from ..replay import replay
    from ..replay.defaults import default_bag

    bag = bag or str(default_bag(progress=sys.stderr.isatty()))
    cfg, notes = calibrate_from_bag(load_stack(config), bag)
    for line in notes:
        print(f"rt-runtime compile: note: {line}", file=sys.stderr)
    with sampling(keep, f"{keep} calls a kernel recorded from {Path(bag).name} (its first {seconds:g} s)") as s:
        replay(bag, cfg, until_s=seconds, hardware=False, reader="thread")
    return cfg, s


def run(args: argparse.Namespace) -> int:
    """Choose (and with --build measure) every task's kernels; print the table or JSON; 2 on invalid input."""
    from dataclasses import asdict

    from ..config import ConfigError
    from ..config.build import build_bindings
    from ..config.stack import load_stack
    from ..drive import open_stack
    from ..exec.compile import compile_graph, prepare
    from ..exec.kernel import recording
    from ..exec.warmup import synthetic_inputs
    from ..sched.clock import VirtualClock

    path = args.config or "config/stack.yaml"
    real = None
    try:
        cfg = load_stack(path)
        names = {t.name for t in cfg.tasks}
        unknown = [t for t in args.task if t not in names]
        if unknown:   # before the graphs are built: a typo costs nothing
            print(f"rt-runtime compile: --task: no task {unknown[0]!r} in {path}; its tasks: "
                  f"{', '.join(sorted(names))}", file=sys.stderr)
            return 2
        if args.samples < 1:
            print(f"rt-runtime compile: --samples: expected a positive count, found {args.samples}", file=sys.stderr)
            return 2
        if not args.no_bag:
            cfg, real = record_bag(path, args.bag, args.bag_seconds, args.samples)
        bindings, initial = build_bindings(cfg)
    except (ConfigError, ValueError, FileNotFoundError) as e:   # ReplayError and BagError are ValueErrors
        print(f"rt-runtime compile: {e}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    stack = open_stack(cfg, bindings, initial, clock=VirtualClock())   # the executors replay and the node run
    try:
        for b in bindings:
            if b.graph is None or (args.task and b.task.name not in args.task):
                continue
            ex = stack.rt.sched.tasks[b.task.name].executors[0]
            jobs = args.seconds * 1e9 / b.task.period_ns
            inputs = synthetic_inputs(b.graph, stack.tensors)
            for build in args.build:   # measured and cached first, then chosen from the records
                with recording() as seen:
                    for _ in range(2):
                        ex.run(inputs)
                prepare(seen, build, jobs, 2, stack.device.name, real=real)
            for c in compile_graph(ex, inputs, args.mode, jobs, runs=2, real=real):
                rows.append({"task": b.task.name, **asdict(c)})
    finally:
        stack.close()
    if args.json:
        print(json.dumps({"config": str(path), "mode": args.mode, "inputs": real.source if real else ZEROS,
                          "kernels": rows}, indent=2, default=str))
    else:
        print(render(rows, args.explain))
    return 0
