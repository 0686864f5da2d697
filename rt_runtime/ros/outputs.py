"""Egress to ROS: the runtime's LET publications, grouped per instant, encoded and published off its threads.

The runtime calls ``on_publish`` (under its lock, on its timekeeper or driver thread) for every
channel a job publishes. The pump keeps a host copy; once every channel of an egress route has a
value for the same instant (a route's channels come from one job, published together), the group
goes onto a queue. The pump's own thread encodes it with the same codec as the replay
(``rt_runtime.io.egress``), serializes with ``to_cdr`` and hands the bytes to ``publish``: the
scheduler never waits for encoding or DDS. Closing drains the queue first (nothing lost).
"""
from __future__ import annotations

import queue
import sys
import threading
import time
from collections import defaultdict
from typing import Any, Callable, Iterable

import numpy as np

from ..bag import to_cdr
from ..config.stack import EgressRoute
from ..drive import host_copy
from ..io import EGRESS_CODECS

KEEP_NS = 2_000_000_000   # an instant still incomplete after this long never will be


class EgressPump:
    """Groups LET publications per route and instant; a thread encodes and publishes them."""

    def __init__(self, routes: list[EgressRoute], frame: str, stamp: Callable[[int], int],
                 publish: Callable[[str, bytes], None], watch: Iterable[str] = ()) -> None:
        self.routes = sorted(routes, key=lambda r: r.topic)
        self.frame = frame
        self.stamp = stamp
        self.publish = publish
        self.watch = set(watch)
        self.by_channel: dict[str, list[EgressRoute]] = defaultdict(list)
        for r in self.routes:
            for channel in r.channels.values():
                self.by_channel[channel].append(r)
        self.latest: dict[str, tuple[int, Any]] = {}     # watched channel -> (t, value)
        self.counts: dict[str, int] = dict.fromkeys((r.topic for r in self.routes), 0)
        self.errors: dict[str, int] = {}
        self.encode_ns = 0
        self.encode_max_ns = 0
        self._pending: dict[int, dict[str, np.ndarray]] = {}
        self._q: queue.SimpleQueue[tuple[EgressRoute, int, dict[str, np.ndarray]] | None] = queue.SimpleQueue()
        # observers' egress taps (the live view): each egress channel's copy below, as published
        self.taps: list[Callable[[str, int, np.ndarray], None]] = []
        self._thread = threading.Thread(target=self._run, name="rt-egress", daemon=True)
        self._thread.start()

    def on_publish(self, channel: str, t_ns: int, seq: int, data: Any) -> None:
        """The runtime's egress hook."""
        if channel in self.watch:
            v = host_copy(data)
            self.latest[channel] = (t_ns, v.reshape(-1)[0].item() if v.size == 1 else v)
        routes = self.by_channel.get(channel)
        if not routes:
            return
        values = self._pending.setdefault(t_ns, {})
        values[channel] = value = host_copy(data)
        for tap in self.taps:
            tap(channel, t_ns, value)
        for r in routes:
            chans = r.channels
            if all(c in values for c in chans.values()):
                self._q.put((r, t_ns, {role: values[c] for role, c in chans.items()}))
        if len(self._pending) > 8:
            for t in [t for t in self._pending if t < t_ns - KEEP_NS]:
                del self._pending[t]
        # Drop this instant once every route through its channels has gone out.
        if all(all(c in values for c in r.channels.values()) for c in values for r in self.by_channel[c]):
            self._pending.pop(t_ns, None)

    def _run(self) -> None:
        perf = time.perf_counter_ns
        while True:
            item = self._q.get()
            if item is None:
                return
            route, t, group = item
            t0 = perf()
            try:
                codec = EGRESS_CODECS[route.codec]
                cdr = to_cdr(codec.encode(group, self.stamp(t), self.frame))
                dt = perf() - t0
                self.encode_ns += dt
                self.encode_max_ns = max(self.encode_max_ns, dt)
                self.publish(route.topic, cdr)
                self.counts[route.topic] += 1
            except Exception as e:  # noqa: BLE001 - one bad output must not stop the others
                n = self.errors.get(route.topic, 0)
                self.errors[route.topic] = n + 1
                if n == 0:
                    print(f"rt-runtime run: warning: cannot publish {route.topic}: {e!r} "
                          "(further failures are only counted)", file=sys.stderr)

    def close(self, timeout: float = 5.0) -> None:
        """Publish everything queued, then stop the thread."""
        self._q.put(None)
        self._thread.join(timeout)
