"""Ingress from ROS: raw CDR in, the stack's ingress codecs, ``push`` into channels; every fault counted.

Subscriptions are raw (CDR bytes) and decoded with ``rosbags``: a 2.9 MB PointCloud2 (120k points)
deserializes in ~0.01 ms that way (numpy views into the bytes), against ~3 ms for rclpy's own
deserialization, which copies into ``array('B')`` (~30 ms on the first message); the codec then
dominates (``bench/bench_ros_latency.py``). The channel copies the views into its slot when the
message becomes visible.

A message is pushed at the instant its decoded value is handed to the runtime (after decoding, on
the runtime's clock): no job released before that instant could have read it, so LET holds.

Bad input never stops the node: undecodable messages (fields past ``point_step``, no x/y/z, an
unsupported encoding, truncated CDR), NaN points (dropped by the codec), header stamps going
backwards and silence are counted per topic and reported in diagnostics. Everything here runs on
the executor thread, so the counters need no lock.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from ..bag import from_cdr
from ..bag.types import stamp_ns
from ..config.stack import IngressRoute
from ..io import INGRESS_CODECS
from ..io.ingress import EgoMotion, decode

CLOUD_CODECS = ("lidar_points", "lidar_points_deskewed", "radar_points")
STALE_PERIODS = 3          # silent for this many of its own periods (and at least stale_after): stale
MAX_RX_LATENCY_NS = 10_000_000_000   # header stamps further off are another time base (a bag's)


class Driver(Protocol):
    """What ingress needs from a runtime driver (``drivers.WallDriver`` / ``SimDriver``)."""

    def now(self) -> int:
        """Logical time on the runtime's clock."""

    def push(self, channel: str, t_ns: int, data: Any, stamp_ns: int = -1) -> bool:
        """Hand a value to the runtime (``stamp_ns``: its header stamp on the logical timeline, -1: none);
        False if it was dropped (backlog full)."""

    def to_logical(self, ros_ns: int) -> int:
        """The logical instant of a ROS time (a header stamp)."""

    def call(self, fn: Callable[[int], Any]) -> None:
        """Run ``fn(now)`` on the scheduler (under its lock, or on its thread)."""


@dataclass
class TopicHealth:
    """Counters and timing of one input topic."""

    topic: str
    codec: str
    received: int = 0
    bad: int = 0
    nan_points: int = 0
    stamp_back: int = 0
    dropped: int = 0
    stale: bool = False
    stale_events: int = 0
    last_error: str = ""
    last_rx: int | None = None          # logical receive time
    last_stamp: int | None = None
    period_ns: float | None = None      # smoothed inter-arrival time
    decode_ns: int = 0
    decode_max_ns: int = 0
    lat_ns: int = 0
    lat_n: int = 0
    lat_max_ns: int = 0
    warned: bool = field(default=False, repr=False)

    def values(self, now: int) -> dict[str, Any]:
        """Plain values for diagnostics."""
        ok = max(1, self.received - self.bad)
        out: dict[str, Any] = {
            "received": self.received, "bad": self.bad, "nan_points": self.nan_points,
            "stamp_backwards": self.stamp_back, "dropped": self.dropped, "stale": self.stale,
            "stale_events": self.stale_events, "decode_ms_mean": round(self.decode_ns / ok / 1e6, 3),
            "decode_ms_max": round(self.decode_max_ns / 1e6, 3)}
        if self.last_rx is not None:
            out["silent_ms"] = round((now - self.last_rx) / 1e6, 1)
        if self.period_ns:
            out["period_ms"] = round(self.period_ns / 1e6, 2)
        if self.lat_n:
            out["rx_latency_ms_mean"] = round(self.lat_ns / self.lat_n / 1e6, 3)
            out["rx_latency_ms_max"] = round(self.lat_max_ns / 1e6, 3)
        if self.last_error:
            out["last_error"] = self.last_error
        return out


class Ingress:
    """One raw-CDR callback per route, and the health of every input topic."""

    def __init__(self, routes: list[IngressRoute], driver: Driver, convert: Callable[[np.ndarray], Any],
                 *, stale_after_ns: int = 500_000_000, monitor: Any = None) -> None:
        self.routes = routes
        self.monitor = monitor   # a SafetyMonitor: told of arrivals (with their latency) and rejections
        self.driver = driver
        self.convert = convert
        self.stale_after_ns = stale_after_ns
        self.health = {r.topic: TopicHealth(r.topic, r.codec) for r in routes}
        # The ego's motion for codecs that compensate it (deskew), updated by each odometry message as it
        # arrives; mounts (the lever arm) are not read live: /tf_static is a bag's, here the sensor frame is
        # taken as base_link (docs/SENSORS.md).
        moving = any(INGRESS_CODECS[r.codec].uses_motion for r in routes)
        self.motion: EgoMotion | None = EgoMotion() if moving else None

    def callback(self, route: IngressRoute) -> Callable[[bytes], None]:
        """The subscription callback for ``route``: decode, push, count."""
        codec = INGRESS_CODECS[route.codec]
        msgtype = codec.msgtypes[0]
        h = self.health[route.topic]
        topic = route.topic
        cloud = route.codec in CLOUD_CODECS
        channels = list(route.channels.items())
        driver, convert, monitor, motion = self.driver, self.convert, self.monitor, self.motion
        odometry = motion is not None and route.codec == "odometry"
        perf, wall = time.perf_counter_ns, time.time_ns
        chans = [ch for _, ch in channels]

        def tell_monitor(t: int, latency: int) -> None:
            def arrived(_: int) -> None:
                for ch in chans:
                    monitor.arrived(ch, t, t - latency)
            driver.call(arrived)

        def on_message(raw: bytes) -> None:
            rx_wall = wall()
            t0 = perf()
            h.received += 1
            try:
                msg = from_cdr(raw, msgtype)
                value = decode(codec, msg, topic, motion)
                if odometry:
                    motion.update(value["value"])   # type: ignore[union-attr]
                tensors = [(ch, convert(value[role])) for role, ch in channels]
            except Exception as e:  # noqa: BLE001 - a bad message is counted, never fatal
                h.bad += 1
                h.last_error = str(e)[:200]
                if not h.warned:
                    h.warned = True
                    print(f"rt-runtime run: warning: {e} (further bad messages on {topic} are only counted)",
                          file=sys.stderr)
                if monitor is not None:
                    driver.call(lambda now: monitor.rejected(chans[0], now))
                return
            t = driver.now()
            head = getattr(msg, "header", None)
            stamp = stamp_ns(head.stamp) if head is not None else None
            at = driver.to_logical(stamp) if stamp is not None else -1
            for ch, data in tensors:
                if not driver.push(ch, t, data, at):
                    h.dropped += 1
                    break
            dt = perf() - t0
            h.decode_ns += dt
            if dt > h.decode_max_ns:
                h.decode_max_ns = dt
            if cloud:
                h.nan_points += int(msg.width) * int(msg.height) - len(value["value"])
            lat = 0
            if stamp is not None:
                if h.last_stamp is not None and stamp < h.last_stamp:
                    h.stamp_back += 1
                h.last_stamp = stamp
                lat = rx_wall - stamp
                if 0 <= lat < MAX_RX_LATENCY_NS:
                    h.lat_ns += lat
                    h.lat_n += 1
                    if lat > h.lat_max_ns:
                        h.lat_max_ns = lat
            if h.last_rx is not None and t > h.last_rx:
                gap = t - h.last_rx
                h.period_ns = gap if h.period_ns is None else 0.9 * h.period_ns + 0.1 * gap
            h.last_rx = t
            if h.stale:
                h.stale = False
            if monitor is not None:
                tell_monitor(t, lat if 0 <= lat < MAX_RX_LATENCY_NS else 0)
        return on_message

    def check_stale(self, now: int) -> list[str]:
        """Mark topics silent for too long (after a first message); returns the ones that just went stale."""
        newly = []
        for h in self.health.values():
            if h.last_rx is None or h.stale:
                continue
            # One message tells nothing of a topic's rate (a route comes once a second): wait longer.
            period = h.period_ns if h.period_ns is not None else self.stale_after_ns
            limit = max(self.stale_after_ns, STALE_PERIODS * period)
            if now - h.last_rx > limit:
                h.stale = True
                h.stale_events += 1
                newly.append(h.topic)
        return newly

    def stale_topics(self) -> list[str]:
        """Topics silent now."""
        return sorted(h.topic for h in self.health.values() if h.stale)
