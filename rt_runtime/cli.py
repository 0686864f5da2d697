"""`rt-runtime`: one command for everything (check, sim, replay, analyze, calibrate, run, play, faults).

Each subcommand lives in ``rt_runtime/commands/<name>.py`` with ``add_parser(subparsers)`` and
``run(args) -> int``; this module only wires them up, so a subcommand's imports (torch, rosbags,
rclpy) are paid only when it runs.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# name -> one-line help. Order is the order `--help` lists them.
COMMANDS = {
    "demo": "replay the built-in scenario through the reference stack and print its deadline report",
    "replay": "replay a recorded bag through the stack: outputs, deadline report, determinism digest",
    "check": "schedulability analysis of a configuration (exit 0 schedulable, 1 not, 2 invalid)",
    "sim": "simulate a driving scenario and record its sensors and ground truth as a rosbag2 bag",
    "analyze": "analyse a trace: deadline misses and their causes, response times, chains, observed schedulability",
    "calibrate": "measure execution times in a replay and write a copy of the config with budgets from their p99",
    "run": "run the stack as a live ROS 2 node: sensor topics in, trajectory, objects and diagnostics out",
    "play": "publish a bag's messages on their ROS 2 topics with their timing (and /clock), like `ros2 bag play`",
    "faults": "fault-injection campaign over the built-in scenario: detected, recovered, wrong outputs, crashes",
}


class UsageError(Exception):
    """Invalid input from the user: printed as one line, exit status 2, no traceback."""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="rt-runtime",
        description="Deterministic real-time runtime for perception, fusion and planning graphs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        module = importlib.import_module(f"rt_runtime.commands.{name}")
        p = module.add_parser(sub, name, help_text)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `rt-runtime` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_module", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args._module.run(args) or 0)
    except UsageError as e:
        print(f"rt-runtime {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    # Run the package's copy of this module, so commands raising rt_runtime.cli.UsageError match it.
    from rt_runtime.cli import main as _main

    sys.exit(_main())
