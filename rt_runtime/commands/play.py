"""`rt-runtime play BAG`: publish a bag's messages on their topics with their timing (no `ros2 bag` needed)."""
from __future__ import annotations

import argparse
import signal
import sys
import threading


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register the subcommand."""
    from . import args as A

    p = sub.add_parser(name, help=help_text, description=help_text + ". Topics whose message package is not "
                       "installed are skipped (named once). SIGINT or SIGTERM stops.")
    p.add_argument("bag", help="rosbag2 folder, .mcap or .db3")
    p.add_argument("--rate", type=A.factor, default=1.0, help="playback speed factor, 0.001 to 1000 (default 1)")
    p.add_argument("--clock", action="store_true", help="publish /clock with the bag's time (for use_sim_time)")
    p.add_argument("--clock-hz", type=A.float_range(0.0, 10_000.0, low_open=True, what="a rate above 0 up to 10000 Hz"),
                   default=100.0, help="/clock ticks per wall second between messages")
    p.add_argument("--loop", action="store_true", help="start over at the end (the clock jumps back, as rosbag2's)")
    p.add_argument("--topics", nargs="+", metavar="TOPIC", help="only these topics (default: all)")
    p.add_argument("--wait-for-subscriber", type=A.nonneg_seconds, default=0.0, metavar="S",
                   help="first wait up to S seconds for a reader of one of the topics (a node still starting)")
    p.add_argument("--ros-args", nargs=argparse.REMAINDER, dest="ros_args", default=None,
                   help="everything after this goes to ROS")
    return p


def run(args: argparse.Namespace) -> int:
    """Play until the end of the bag (or forever with --loop) or a signal."""
    from ..cli import UsageError
    from ..ros import rclpy_missing

    missing = rclpy_missing()
    if missing:
        raise UsageError(missing)
    if not args.rate > 0:
        raise UsageError(f"--rate: expected a positive number, found {args.rate}")
    from ..ros.env import prepare_environment

    prepare_environment()   # before rclpy loads the RMW
    try:
        import rclpy
        from rclpy.signals import SignalHandlerOptions

        from ..bag import BagError
        from ..ros.player import Player, report
    except ImportError as e:
        raise UsageError(f"rclpy is installed but cannot be loaded ({e}); source the ROS 2 environment") from None
    stop = threading.Event()
    context = rclpy.Context()
    ros_args = [] if not args.ros_args else (args.ros_args if args.ros_args[0] == "--ros-args" else
                                             ["--ros-args", *args.ros_args])
    rclpy.init(args=["rt_runtime_player", *ros_args], context=context, signal_handler_options=SignalHandlerOptions.NO)
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    node = player = None
    try:
        node = rclpy.create_node("rt_runtime_player", context=context)
        try:
            player = Player(node, args.bag, rate=args.rate, clock=args.clock, loop=args.loop, topics=args.topics,
                            clock_hz=args.clock_hz)
        except (BagError, ValueError) as e:
            raise UsageError(str(e)) from None
        if player.stats.skipped:
            print(f"rt-runtime play: skipping {len(player.stats.skipped)} topic(s) whose message package is not "
                  f"installed: {', '.join(sorted(player.stats.skipped))}", file=sys.stderr)
        print(f"rt-runtime play: {args.bag}: {len(player.pubs)} topics, {player.reader.duration_ns / 1e9:.2f} s "
              f"at {args.rate:g}x{' with /clock' if args.clock else ''}", file=sys.stderr, flush=True)
        if args.wait_for_subscriber > 0 and not player.wait_for_subscriber(args.wait_for_subscriber, stop):
            print(f"rt-runtime play: no reader after {args.wait_for_subscriber:g} s; playing anyway", file=sys.stderr)
        stats = player.play(stop)
        print(report(stats, args.bag), file=sys.stderr, flush=True)
        return 0
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if player is not None:
            player.close()
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown(context=context)
