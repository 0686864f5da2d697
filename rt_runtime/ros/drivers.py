"""Who advances the runtime in a live node: the wall clock, or ``/clock`` under ``use_sim_time``.

Both drivers own one thread of their own; rclpy's executor (on the main thread) only decodes and
hands values over through ``push``, so no computation ever runs in a ROS callback.

* ``WallDriver``: the runtime on a ``WallClock`` in threaded mode (one thread per worker, a
  watchdog thread); the driver thread is its timekeeper, calling ``run_until`` in short steps so
  it can stop. ``Runtime.push`` is thread-safe there (it takes the scheduler's lock).
* ``SimDriver``: the runtime on a ``VirtualClock``, inline (thread-free) in the driver thread. It
  follows ``/clock``: each tick lets it run up to just before the new time, so a message received
  at that time is visible at that instant, as in a replay. Pushes queue up for the driver thread
  (a bounded backlog; overflow is counted). A clock that jumps backwards (a bag played in a loop)
  is counted and re-based, so logical time never goes back.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable

from ..sched import Runtime

Stats = dict[str, Any]


def degrade_fallback_tasks(rt: Runtime, t: int) -> list[str]:
    """Switch every task that has a fallback graph to it (the stack's degrade reaction)."""
    names = []
    for ts in rt.tasks.values():
        if ts.executors[1] is not None:
            rt.sched.watchdog.degrade(ts, t)
            names.append(ts.name)
    return names


def collect(rt: Runtime) -> Stats:
    """Everything diagnostics reports about the runtime, read at one moment."""
    return {"tasks": rt.stats(), "channels": rt.channel_stats(), "stalled": rt.stalled_workers,
            "deterministic": rt.deterministic, "why": rt.nondeterminism[:1], "errors": len(rt.errors)}


class WallDriver:
    """The runtime on the wall clock, with worker threads; this driver's thread is the timekeeper."""

    kind = "wall"

    def __init__(self, rt: Runtime, step_ns: int = 50_000_000) -> None:
        if not rt.threaded or rt.clock.virtual:
            raise ValueError("WallDriver needs a threaded runtime on a WallClock")
        self.rt = rt
        self.step_ns = step_ns
        self.ros_epoch_ns = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, ros_now_ns: Callable[[], int]) -> None:
        """Make logical time 0 now (``ros_now_ns()`` in ROS time) and start the timekeeper."""
        self.rt.clock.reset_epoch()
        self.ros_epoch_ns = ros_now_ns() - self.rt.clock.now()
        self._thread = threading.Thread(target=self._run, name="rt-timekeeper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.rt.run_until(self.rt.now + self.step_ns)
        except BaseException as e:  # noqa: BLE001 - reported by the node, which then stops
            self.error = e

    def now(self) -> int:
        """Logical time (ns since the start)."""
        return self.rt.clock.now()

    def push(self, channel: str, t_ns: int, data: Any, stamp_ns: int = -1) -> bool:
        """Ingress, from any thread (``stamp_ns``: the data's header stamp on the logical timeline)."""
        self.rt.push(channel, t_ns, data, stamp_ns)
        return True

    def stamp(self, t_ns: int) -> int:
        """ROS time (ns) of a logical instant."""
        return self.ros_epoch_ns + t_ns

    def to_logical(self, ros_ns: int) -> int:
        """The logical instant of a ROS time (a header stamp); never before the start."""
        return max(0, ros_ns - self.ros_epoch_ns)

    def call(self, fn: Callable[[int], Any]) -> None:
        """Run ``fn(now)`` on the scheduler, under its lock."""
        with self.rt.sched.lock:
            fn(self.rt.now)

    def stats(self) -> Stats:
        """Counters now."""
        return collect(self.rt)

    @property
    def alive(self) -> bool:
        """False once the timekeeper has died."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 2.0) -> list[int]:
        """Stop the timekeeper, then the workers; returns workers stuck in an op."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        return self.rt.close()


class SimDriver:
    """The runtime on a VirtualClock that follows ``/clock``; runs inline in this driver's thread."""

    kind = "sim"

    def __init__(self, rt: Runtime, max_backlog: int = 512) -> None:
        if rt.threaded or not rt.clock.virtual:
            raise ValueError("SimDriver needs an inline runtime on a VirtualClock")
        self.rt = rt
        self.max_backlog = max_backlog
        self.t0: int | None = None      # sim time (ns) at logical 0
        self.logical = 0                # logical time of the latest /clock
        self.jumps_back = 0
        self.error: BaseException | None = None
        self._cv = threading.Condition()
        self._inbox: deque[tuple[str, int, Any]] = deque()
        self._calls: deque[Callable[[int], Any]] = deque()
        self._stop = False
        self._snapshot: Stats = collect(rt)
        self._snap_at = 0.0
        self._thread: threading.Thread | None = None

    def start(self, ros_now_ns: Callable[[], int] | None = None) -> None:
        """Start the driver thread (time starts with the first ``/clock``)."""
        self._thread = threading.Thread(target=self._run, name="rt-sim-driver", daemon=True)
        self._thread.start()

    def on_clock(self, sim_ns: int) -> None:
        """A ``/clock`` tick (ROS time, ns)."""
        with self._cv:
            if self.t0 is None:
                self.t0 = sim_ns
            t = sim_ns - self.t0
            if t < self.logical:
                self.jumps_back += 1
                self.t0 = sim_ns - self.logical   # re-base: logical time goes on from where it was
                t = self.logical
            if t != self.logical:
                self.logical = t
                self._cv.notify()

    def now(self) -> int:
        """Logical time of the latest ``/clock``."""
        return self.logical

    def push(self, channel: str, t_ns: int, data: Any, stamp_ns: int = -1) -> bool:
        """Queue ingress for the driver thread; False when the backlog is full (the driver lags)."""
        with self._cv:
            if len(self._inbox) >= self.max_backlog:
                return False
            self._inbox.append((channel, t_ns, data, stamp_ns))
        return True

    def stamp(self, t_ns: int) -> int:
        """ROS (sim) time of a logical instant."""
        return (self.t0 or 0) + t_ns

    def to_logical(self, ros_ns: int) -> int:
        """The logical instant of a ROS (sim) time (a header stamp); never before the start."""
        return max(0, ros_ns - (self.t0 or 0))

    def call(self, fn: Callable[[int], Any]) -> None:
        """Run ``fn(now)`` on the driver thread, before its next step."""
        with self._cv:
            self._calls.append(fn)
            self._cv.notify()

    def stats(self) -> Stats:
        """Counters as of the driver's latest step."""
        return self._snapshot

    @property
    def alive(self) -> bool:
        """False once the driver thread has died."""
        return self._thread is not None and self._thread.is_alive()

    def _step(self, target: int) -> None:
        rt = self.rt
        with self._cv:
            items = list(self._inbox)
            self._inbox.clear()
            calls = list(self._calls)
            self._calls.clear()
        for channel, t, data, stamp in items:
            rt.push(channel, max(t, rt.now), data, stamp)
        for fn in calls:
            fn(rt.now)
        if target > rt.now:
            rt.run_until(target)
        now = time.monotonic()
        if now - self._snap_at > 0.1:
            self._snap_at = now
            self._snapshot = collect(rt)

    def _run(self) -> None:
        done = -1
        try:
            while True:
                with self._cv:
                    while not self._stop and self.logical - 1 <= done and not self._calls:
                        self._cv.wait(0.1)
                    if self._stop:
                        break
                    target = self.logical - 1   # up to just before the tick: its messages are due at it
                self._step(target)
                done = max(done, target)
            self._step(self.logical)   # everything due up to the last tick, nothing left behind
            self._snapshot = collect(self.rt)
        except BaseException as e:  # noqa: BLE001 - reported by the node, which then stops
            self.error = e

    def stop(self, timeout: float = 5.0) -> list[int]:
        """Finish the step in progress, run up to the last tick, stop."""
        with self._cv:
            self._stop = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(timeout)
        return self.rt.close()
