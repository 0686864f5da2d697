"""`rt-runtime compile [--config C] [--mode M] [--build jit,aot] [--explain]`: each task's kernels and the
mode each runs (``exec/compile.py``), with the numbers the choice was made by.

Builds every task's graph as the config says, runs it on synthetic inputs (a warm-up) recording the kernels
it calls, then for each: the mode ``--mode`` asks (``auto``: the largest net benefit among the modes
bit-identical to eager, over the task's rate x ``--seconds``). ``--build`` measures and caches the modes
named (``exec/cache.py``: ``$RT_RUNTIME_CACHE``, default ``~/.cache/rt_runtime``), so that a later
replay's or live node's set-up only loads them; 4-50 s a kernel and mode on a 2-core machine.
Exit status: 0, 2 on invalid input.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import args as A


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
    """The table: task, kernel, mode (and with ``explain`` the numbers and why)."""
    lines = [f"{'task':<14} {'kernel':<44} {'mode':<5}" + ("  numbers" if explain else "")]
    for r in rows:
        line = f"{r['task']:<14} {r['kernel']:<44} {r['mode']:<5}"
        if explain:
            per = ", ".join(f"{m} {_us(t)} us (cost {r['cost'].get(m, 0):.1f} s, "
                            f"{'bit-identical' if r['bit_equal'].get(m) else 'bits differ'}, "
                            f"net {r['net'].get(m, float('nan')):+.2f} s)" for m, t in sorted(r["t"].items()))
            line += (f"  eager {_us(r['t_eager'])} us x {r['calls']:.0f} calls" + (f"; {per}" if per else "")
                     + f"; {r['why']}")
        lines.append(line)
    return "\n".join(lines)


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
    try:
        cfg = load_stack(path)
        names = {t.name for t in cfg.tasks}
        unknown = [t for t in args.task if t not in names]
        if unknown:   # before the graphs are built: a typo costs nothing
            print(f"rt-runtime compile: --task: no task {unknown[0]!r} in {path}; its tasks: "
                  f"{', '.join(sorted(names))}", file=sys.stderr)
            return 2
        bindings, initial = build_bindings(cfg)
    except ConfigError as e:
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
                prepare(seen, build, jobs, 2, stack.device.name)
            for c in compile_graph(ex, inputs, args.mode, jobs, runs=2):
                rows.append({"task": b.task.name, **asdict(c)})
    finally:
        stack.close()
    if args.json:
        print(json.dumps({"config": str(path), "mode": args.mode, "kernels": rows}, indent=2, default=str))
    else:
        print(render(rows, args.explain))
    return 0
