"""A rosbag2 player without ``ros2 bag``: a bag's messages on their topics, with their types and timing.

Messages go out as the raw CDR the bag holds (no decode, no re-encode), at their recorded pace
scaled by ``rate``; with ``clock`` a ``/clock`` (the bag's time) is published before every message
and at ``clock_hz`` in between, so nodes under ``use_sim_time`` see the recording's time. Topics
whose message package is not installed here (e.g. ``tf2_msgs``, the simulator's ground truth) are
skipped with one line naming them. Publishers are reliable keep-last, which both reliable and
best-effort readers match. Bag time comes from the playback core (``Player.control``, ``replay.control``):
the keys, the services (``player_services``) and Foxglove's playback bar (``live.playback``) pause, step,
seek and re-rate it, and the loop follows (docs/ROS.md, "Controlling playback").
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .env import prepare_environment

prepare_environment()   # before rclpy loads the RMW

from rclpy.node import Node  # noqa: E402

from ..bag import BagMessage, open_bag  # noqa: E402
from ..replay import control as C  # noqa: E402
from ..replay.controller import Controller  # noqa: E402
from .msgtypes import output_qos, ros_class  # noqa: E402


@dataclass
class PlayStats:
    """What a play did."""

    published: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    clock_ticks: int = 0
    loops: int = 0
    max_late_ms: float = 0.0
    wall_s: float = 0.0


class Player:
    """Publishes one bag on a node, in real time scaled by ``rate``, as ``control`` says (``paused``: from the
    start; ``period_s``: one period step)."""

    def __init__(self, node: Node, bag: str | Path, *, rate: float = 1.0, clock: bool = False, loop: bool = False,
                 topics: list[str] | None = None, clock_hz: float = 100.0, paused: bool = False,
                 period_s: float = 0.1) -> None:
        if not rate > 0:
            raise ValueError(f"--rate: expected a positive number, found {rate}")
        if clock_hz <= 0:
            raise ValueError(f"--clock-hz: expected a positive number, found {clock_hz}")
        self.node = node
        self.reader = open_bag(bag)
        self.loop, self.clock_period = loop, 1.0 / clock_hz
        self.stats = PlayStats()
        wanted = sorted(self.reader.topics) if not topics else topics
        unknown = sorted(set(wanted) - set(self.reader.topics))
        if unknown:
            raise ValueError(f"bag {bag} has no topic(s) {unknown}; it has {sorted(self.reader.topics)}")
        self.pubs = {}
        for topic in wanted:
            try:
                cls = ros_class(self.reader.topics[topic])
            except LookupError as e:
                self.stats.skipped[topic] = str(e)
                continue
            self.pubs[topic] = node.create_publisher(cls, topic, output_qos())
            self.stats.published[topic] = 0
        # What pause, step, seek and rate change (the keyboard, the services, Foxglove): one core for all.
        self.control = Controller(C.begin(self.reader.start_ns, self.reader.end_ns, time.monotonic_ns(), rate=rate,
                                          paused=paused, period_ns=int(period_s * 1e9)))
        self.clock_pub = None
        if clock:
            self._Clock, self._Time = ros_class("rosgraph_msgs/msg/Clock"), ros_class("builtin_interfaces/msg/Time")
            self.clock_pub = node.create_publisher(self._Clock, "/clock", output_qos(1))

    def _tick(self, t_ns: int) -> None:
        sec, nanosec = divmod(int(t_ns), 1_000_000_000)
        self.clock_pub.publish(self._Clock(clock=self._Time(sec=sec, nanosec=nanosec)))  # type: ignore[union-attr]
        self.stats.clock_ticks += 1

    def wait_for_subscriber(self, timeout: float, stop: threading.Event, settle: float = 0.5) -> bool:
        """Wait up to ``timeout`` s until some topic has a reader, then ``settle`` s for the rest to match."""
        end = time.monotonic() + timeout
        while not any(p.get_subscription_count() for p in self.pubs.values()):
            if stop.is_set() or time.monotonic() > end:
                return False
            time.sleep(0.05)
        time.sleep(settle)   # one participant's endpoints are matched together, give them a moment
        return True

    def _publish(self, msg: BagMessage) -> None:
        if self.clock_pub is not None:
            self._tick(msg.t_ns)
        raw = msg.raw_cdr
        self.pubs[msg.topic].publish(raw if isinstance(raw, bytes) else bytes(raw))
        self.stats.published[msg.topic] += 1

    def play(self, stop: threading.Event | None = None) -> PlayStats:
        """Publish the bag (again and again with ``loop``) until its end or ``stop``, as ``control`` says: bag
        time from wall time (paused: nothing goes out and ``/clock`` holds; a seek reads on from there and the
        clock jumps; a step publishes the next message at once)."""
        stop = stop or threading.Event()
        start = time.monotonic()
        ctl, topics = self.control, list(self.pubs)
        ctl.update(lambda pb, now: C.arrive(pb, now, pb.anchor_bag_ns))   # bag time starts now, not at set-up
        seeks, pending, messages = -1, None, iter(())
        period_ns = int((self.clock_period if self.clock_pub is not None else 0.1) * 1e9)
        while not stop.is_set() and topics:
            pb = ctl.state
            now = time.monotonic_ns()
            if pb.seeks != seeks:   # the start, a seek, a loop: read on from bag time
                seeks = pb.seeks
                messages = self.reader.messages(topics=topics, start_ns=C.position(pb, now))
                pending = next(messages, None)
                if self.clock_pub is not None:
                    self._tick(C.position(pb, now))   # the clock jumps, as rosbag2's
            if pending is None:
                self.stats.loops += 1
                if not self.loop:
                    break
                ctl.update(lambda pb, now: C.seek(pb, now, pb.start_ns))   # the clock jumps back
                continue
            if pb.paused:   # what lies up to the held instant goes out (a period step, a pause behind): no more
                if pending.t_ns <= pb.anchor_bag_ns or (pb.steps and ctl.take_step(pending.t_ns)):
                    self._publish(pending)
                    pending = next(messages, None)
                    continue
                wake = None
            elif pending.t_ns <= C.position(pb, now):
                late = (now - C.wall_at(pb, pending.t_ns)) / 1e6  # type: ignore[operator]
                if late > self.stats.max_late_ms:
                    self.stats.max_late_ms = late
                self._publish(pending)
                pending = next(messages, None)
                continue
            else:
                wake = C.wall_at(pb, pending.t_ns)
            if self.clock_pub is not None:
                self._tick(C.position(pb, now))   # held while paused
            ctl.wait(min(period_ns, period_ns if wake is None else wake - now) / 1e9)
        self.stats.wall_s = time.monotonic() - start
        self._drain()
        return self.stats

    def _drain(self, timeout_s: float = 1.0) -> None:
        """Leave reliable readers up to ``timeout_s`` to acknowledge what was published: a process that exits
        right after its last publish can take the last samples with it (a test lost the bag's last message in 1 run of 6)."""
        from rclpy.duration import Duration

        end = time.monotonic() + timeout_s
        for pub in self.pubs.values():
            left = end - time.monotonic()
            if left <= 0:
                break
            pub.wait_for_all_acked(Duration(nanoseconds=int(left * 1e9)))

    def close(self) -> None:
        """Release the bag."""
        self.reader.close()


def report(stats: PlayStats, bag: str | Path) -> str:
    """One summary line."""
    n = sum(stats.published.values())
    skipped = f"; skipped (type not installed): {', '.join(sorted(stats.skipped))}" if stats.skipped else ""
    clock = f", {stats.clock_ticks} /clock ticks" if stats.clock_ticks else ""
    return (f"rt-runtime play: {bag}: {n} messages on {len(stats.published)} topics in {stats.wall_s:.1f} s "
            f"({stats.loops} pass(es){clock}), at most {stats.max_late_ms:.1f} ms late{skipped}")

