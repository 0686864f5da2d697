"""`rt-runtime run`: the stack as a live ROS 2 node (topics in, trajectory, objects and diagnostics out)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register the subcommand."""
    from . import args as A

    p = sub.add_parser(name, help=help_text, description=help_text + ". Stops cleanly on SIGINT or SIGTERM "
                       "(released jobs publish, outputs and the trace are flushed). See docs/ROS.md.")
    p.add_argument("--config", help="stack configuration (default: config/stack.yaml)")
    p.add_argument("--trace", help="write a trace file for `rt-runtime analyze` when the node stops")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override a config value, e.g. tasks.planning.wcet=5ms (repeatable)")
    p.add_argument("--remap", action="append", default=[], metavar="FROM=TO", help="rename a topic the config uses")
    p.add_argument("--use-sim-time", action="store_true", help="follow /clock (a bag played with --clock)")
    p.add_argument("--params-file", help="ROS parameters file (e.g. config/ros_params.yaml)")
    p.add_argument("--workers", type=A.workers, help="worker count, 1 or more (default: the config's)")
    p.add_argument("--device", type=A.device, help="cpu, cpu-async, cuda or cuda:N (default: the config's; "
                   "the same as --set device=...)")
    p.add_argument("--realtime", action="store_true", help="pin workers and use SCHED_FIFO where permitted")
    p.add_argument("--speculate", action="store_true",
                   help="turn on the config's speculate: keys (the planner plans ahead in slack; docs/SAFETY.md)")
    p.add_argument("--stale-after", metavar="DURATION", type=A.duration_text, help="an input silent this long is stale (default 500ms)")
    p.add_argument("--degrade-on-stale", action="append", default=[], metavar="TOPIC",
                   help="while this input is stale, run every task that has one on its fallback graph")
    p.add_argument("--foxglove", nargs="?", const="", metavar="[HOST:]PORT",
                   help="serve the runtime's state live (jobs, per-task response and slack, safety level, degraded "
                        "tasks, chain latencies, speculation, trajectory and objects) on a Foxglove websocket at "
                        "127.0.0.1:8765, or [HOST:]PORT (0: any free port); docs/ROS.md, Live view")
    from .replay import add_live_flags

    add_live_flags(p)
    p.add_argument("--ros-args", nargs=argparse.REMAINDER, dest="ros_args", default=None,
                   help="everything after this goes to ROS (remapping -r, parameters -p, ...)")
    return p


def _parameters(args: argparse.Namespace) -> list[Any]:
    from rclpy.parameter import Parameter

    from ..live.foxglove import parse_endpoint

    out = []
    for name, value in (("config", args.config), ("trace", args.trace), ("stale_after", args.stale_after)):
        if value:
            out.append(Parameter(name, Parameter.Type.STRING, str(value)))
    overrides = list(args.overrides) + ([f"device={args.device}"] if args.device else [])
    arrays = (("overrides", overrides), ("remap", args.remap), ("degrade_on_stale", args.degrade_on_stale))
    for name, value in arrays:
        if value:
            out.append(Parameter(name, Parameter.Type.STRING_ARRAY, list(value)))
    if args.foxglove is not None:   # checked by ``run``: HOST:PORT
        host, port = parse_endpoint(args.foxglove or None)
        out.append(Parameter("foxglove", Parameter.Type.STRING, f"[{host}]:{port}" if ":" in host else f"{host}:{port}"))
    if args.foxglove_mcap:
        out.append(Parameter("foxglove_mcap", Parameter.Type.STRING, str(args.foxglove_mcap)))
    if args.foxglove_hz != 10.0:
        out.append(Parameter("foxglove_hz", Parameter.Type.DOUBLE, float(args.foxglove_hz)))
    if args.workers is not None:
        out.append(Parameter("workers", Parameter.Type.INTEGER, int(args.workers)))
    if args.realtime:
        out.append(Parameter("realtime", Parameter.Type.BOOL, True))
    if args.speculate:
        out.append(Parameter("speculate", Parameter.Type.BOOL, True))
    if args.use_sim_time:
        out.append(Parameter("use_sim_time", Parameter.Type.BOOL, True))
    return out


def run(args: argparse.Namespace) -> int:
    """Start the node and spin until stopped."""
    from ..cli import UsageError
    from ..config.stack import parse_remap
    from ..ros import rclpy_missing

    missing = rclpy_missing()
    if missing:
        raise UsageError(missing)
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers: expected a positive integer, found {args.workers}")
    try:
        parse_remap(args.remap)
    except ValueError as e:
        raise UsageError(str(e)) from None
    for path, what in ((args.config, "--config"), (args.params_file, "--params-file")):
        if path and not Path(path).is_file():
            raise UsageError(f"{what}: {path}: no such file")
    if args.foxglove is not None or args.foxglove_mcap:
        from ..live.foxglove import LiveError, parse_endpoint
        from ..outpaths import OutputPathError, check_output
        from ..replay.defaults import default_config

        try:
            if args.foxglove is not None:
                parse_endpoint(args.foxglove or None)
            if args.foxglove_mcap:
                check_output(args.foxglove_mcap, "--foxglove-mcap", {"config": args.config or default_config(), "trace": args.trace,
                                                                     "params file": args.params_file})
        except (LiveError, OutputPathError) as e:
            raise UsageError(str(e)) from None
    try:
        from ..ros.node import run_node
    except ImportError as e:
        raise UsageError(f"rclpy is installed but cannot be loaded ({e}); source the ROS 2 environment") from None
    ros_args = ["--ros-args", "--params-file", args.params_file] if args.params_file else []
    if args.ros_args:
        extra = args.ros_args[1:] if args.ros_args[0] == "--ros-args" else args.ros_args
        ros_args = (ros_args or ["--ros-args"]) + extra
    return run_node(ros_args, _parameters(args))
