"""`rt-runtime`: one command for everything (the subcommands and their one-line help: ``COMMANDS``).

Each subcommand lives in ``rt_runtime/commands/<name>.py`` with ``add_parser(subparsers)`` and
``run(args) -> int``; this module only wires them up, so a subcommand's imports (torch, rosbags,
rclpy) are paid only when it runs.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Callable

# name -> one-line help. Order is the order `--help` lists them.
COMMANDS = {
    "demo": "replay the built-in scenario through the reference stack and print its deadline report",
    "replay": "replay a recorded bag through the stack: outputs, deadline report, determinism digest",
    "batch": "replay many bags on Dask (embedded or --cluster): results store, gates (--expect), JUnit, fleet report",
    "check": "schedulability analysis of a configuration (exit 0 schedulable, 1 not, 2 invalid)",
    "sim": "simulate a driving scenario and record its sensors and ground truth as a rosbag2 bag",
    "inspect": "what a bag holds (topics, rates, sizes, codecs, calibration); --config-out writes a stack config for it",
    "analyze": "analyse a trace: deadline misses and their causes, response times, chains, observed schedulability",
    "calibrate": "measure execution times in a replay and write a copy of the config with budgets from their p99",
    "run": "run the stack as a live ROS 2 node: sensor topics in, trajectory, objects and diagnostics out",
    "play": "publish a bag's messages on their ROS 2 topics with their timing (and /clock), like `ros2 bag play`",
    "faults": "fault-injection campaign over the built-in scenario: detected, recovered, wrong outputs, crashes",
    "schema": "print the JSON Schema of a stack file, for editors to complete and check it (--out FILE writes it)",
    "compile": "each task's kernels and the mode each runs (eager, jit, aot), chosen by measured net benefit; --build caches",
}


# Signals: these commands poll a flag between messages and keep what they wrote, closed and marked
# partial (exit 130 on SIGINT, 143 on SIGTERM); those stop at once, SIGTERM raising like SIGINT, and
# remove their unfinished outputs. Other commands keep Python's (or their own) handling.
POLLING = {"replay", "sim", "demo", "batch"}
STAGING = {"analyze", "calibrate"}


class UsageError(Exception):
    """Invalid input from the user: printed as one line, exit status 2, no traceback."""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    from .commands.args import OneLineParser   # errors in one line naming the flag, exit 2 (subparsers inherit it)

    parser = OneLineParser(
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
    try:
        parser = build_parser()   # imports every subcommand's module: a Ctrl-C may land here
        args = parser.parse_args(argv)
    except SystemExit as e:   # --help (0), or a bad flag: one line printed, status 2 (commands/args.py)
        return e.code if isinstance(e.code, int) else 2
    except KeyboardInterrupt:
        print("rt-runtime: interrupted by SIGINT while starting", file=sys.stderr)
        return 130
    if getattr(args, "_module", None) is None:
        parser.print_help()
        return 2
    restore = _signals(args.command)
    try:
        status = int(args._module.run(args) or 0)
        sys.stdout.flush()   # a reader that went away (`| head`) shows here, inside the handler below
        return status
    except BrokenPipeError:
        return _stdout_closed()
    except UsageError as e:
        print(f"rt-runtime {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:   # SIGINT, or outpaths.Interrupted (SIGTERM, a second signal)
        name = getattr(e, "signal", "SIGINT")
        done = "; unfinished outputs were removed" if args.command in POLLING | STAGING else ""
        print(f"rt-runtime {args.command}: interrupted by {name}{done}", file=sys.stderr)
        return 143 if name == "SIGTERM" else 130
    finally:
        restore()


def _stdout_closed() -> int:
    """Exit quietly when stdout's reader has gone (``rt-runtime check FILE | head``): status 141.

    141 is 128 + SIGPIPE, what a shell reports for ``cat`` or ``grep`` ended by a closed pipe; no
    traceback and no "Exception ignored" at exit: the rest of the output goes to /dev/null. A
    BrokenPipeError that is not stdout's (a worker process's pipe) is re-raised.
    """
    if not _stdout_is_broken():
        raise   # noqa: PLE0704 - called only from the BrokenPipeError handler in main
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141


def _stdout_is_broken() -> bool:
    """Whether stdout is a pipe whose reading end is closed (poll reports an error on it)."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):   # no poll (Windows), or stdout replaced in-process
        return False


def _signals(command: str) -> Callable[[], None]:
    """Install the command's signal handling (see POLLING, STAGING); returns what puts it back."""
    if command not in POLLING | STAGING:
        return lambda: None
    from .outpaths import INTERRUPT, raise_on_sigterm

    if command in POLLING:
        INTERRUPT.install()
        return INTERRUPT.restore
    return raise_on_sigterm()


if __name__ == "__main__":
    # Run the package's copy of this module, so commands raising rt_runtime.cli.UsageError match it.
    from rt_runtime.cli import main as _main

    sys.exit(_main())
