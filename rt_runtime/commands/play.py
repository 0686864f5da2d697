"""`rt-runtime play BAG`: publish a bag's messages on their topics with their timing (no `ros2 bag` needed)."""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..live.playback import FoxglovePlayback
    from ..replay.controller import Controller
    from ..replay.keyboard import Keyboard


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
    p.add_argument("--paused", action="store_true", help="start paused (resume with space, ~/resume or Foxglove)")
    p.add_argument("--step-period", type=A.float_range(0.0, 3600.0, low_open=True, what="seconds above 0 up to "
                                                                                     "3600"),
                   default=0.1, metavar="S", help="how far one period step (n, ~/play_period) moves bag time "
                   "(default 0.1 s)")
    p.add_argument("--foxglove", nargs="?", const="", metavar="[HOST:]PORT",
                   help="serve Foxglove's playback controls (play, pause, seek, speed) and the bag's time on a "
                        "websocket at 127.0.0.1:8765, or [HOST:]PORT (0: any free port)")
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

        from rclpy.executors import SingleThreadedExecutor

        from ..bag import BagError
        from ..ros.player import Player, report
        from ..ros.player_services import PlayerServices
    except ImportError as e:
        raise UsageError(f"rclpy is installed but cannot be loaded ({e}); source the ROS 2 environment") from None
    stop = threading.Event()
    context = rclpy.Context()
    ros_args = [] if not args.ros_args else (args.ros_args if args.ros_args[0] == "--ros-args" else
                                             ["--ros-args", *args.ros_args])
    rclpy.init(args=["rt_runtime_player", *ros_args], context=context, signal_handler_options=SignalHandlerOptions.NO)
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    node = player = executor = spinner = keys = fox = None
    try:
        node = rclpy.create_node("rt_runtime_player", context=context)
        try:
            player = Player(node, args.bag, rate=args.rate, clock=args.clock, loop=args.loop, topics=args.topics,
                            clock_hz=args.clock_hz, paused=args.paused, period_s=args.step_period)
        except (BagError, ValueError) as e:
            raise UsageError(str(e)) from None
        fox = _foxglove(args.foxglove, player.control)
        PlayerServices(node, player.control)
        executor = SingleThreadedExecutor(context=context)   # the services' callbacks, off the playing thread
        executor.add_node(node)
        spinner = threading.Thread(target=executor.spin, name="rt-player-services", daemon=True)
        spinner.start()
        keys = _keyboard(player.control)
        if player.stats.skipped:
            print(f"rt-runtime play: skipping {len(player.stats.skipped)} topic(s) whose message package is not "
                  f"installed: {', '.join(sorted(player.stats.skipped))}", file=sys.stderr)
        print(f"rt-runtime play: {args.bag}: {len(player.pubs)} topics, {player.reader.duration_ns / 1e9:.2f} s "
              f"at {args.rate:g}x{' with /clock' if args.clock else ''}", file=sys.stderr, flush=True)
        if args.wait_for_subscriber > 0 and not player.wait_for_subscriber(args.wait_for_subscriber, stop):
            print(f"rt-runtime play: no reader after {args.wait_for_subscriber:g} s; playing anyway", file=sys.stderr)
        stats = player.play(stop)
        if fox is not None:
            fox.end()
        print(report(stats, args.bag), file=sys.stderr, flush=True)
        return 0
    finally:
        if keys is not None:
            keys.close()   # the terminal as it was, whatever ended the play
        if fox is not None:
            fox.close()
        if executor is not None:
            executor.shutdown(2.0)
            if spinner is not None:
                spinner.join(2.0)   # its wait ends before the node and the context go (else: abort at exit)
        for s, h in old.items():
            signal.signal(s, h)
        if player is not None:
            player.close()
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown(context=context)


def _foxglove(endpoint: str | None, ctl: "Controller") -> "FoxglovePlayback | None":
    """``--foxglove``'s playback controls (None without the flag); a bad value or a busy port: one line."""
    if endpoint is None:
        return None
    from ..cli import UsageError
    from ..live.foxglove import LiveError
    from ..live.playback import start

    try:
        return start(endpoint or None, ctl)
    except LiveError as e:
        raise UsageError(str(e)) from None


def _keyboard(ctl: "Controller") -> "Keyboard | None":
    """The keys, when stdin is a terminal (their list on stderr)."""
    from ..replay.keyboard import HELP, keyboard

    def say(line: str) -> None:
        print(f"rt-runtime play: {line}", file=sys.stderr, flush=True)

    keys = keyboard(ctl.command, lambda: ctl.state, say)
    if keys is not None:
        say(HELP)
    return keys
