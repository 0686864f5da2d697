"""Clocks: wall time for live runs, virtual time for replays and the simulator oracle.

Both count integer nanoseconds from the runtime's epoch (logical time 0), so task releases at
``offset + k * period`` mean the same instants on either clock.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Protocol

_mono = time.monotonic_ns
_precise = threading.local()
_REALTIME = (getattr(os, "SCHED_FIFO", -1), getattr(os, "SCHED_RR", -1))


def set_timer_slack(ns: int) -> bool:
    """Ask Linux for ``ns`` of timer slack for the calling thread (default 50 us added to every
    sleep of a normal thread); False where that is not possible."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(29, ctypes.c_ulong(ns), 0, 0, 0) == 0   # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        return False


class Clock(Protocol):
    """What the scheduler needs from time."""

    virtual: bool

    def now(self) -> int:
        """Logical time in ns since the epoch."""

    def sleep_until(self, t_ns: int, wake: threading.Event | None = None) -> bool:
        """Block until ``t_ns`` (or until ``wake`` is set: returns True then)."""


class VirtualClock:
    """Jumps straight to the next event: a replay runs as fast as the CPU allows.

    Execution also advances it: after an op the dispatcher moves time by the op's cost as the
    runtime's cost model gives it (measured wall time, a declared synthetic cost, or zero).
    """

    virtual = True

    def __init__(self, start_ns: int = 0) -> None:
        self._t = int(start_ns)

    def now(self) -> int:
        """Current virtual time."""
        return self._t

    def sleep_until(self, t_ns: int, wake: threading.Event | None = None) -> bool:
        """Jump to ``t_ns`` at once (never backwards)."""
        if t_ns > self._t:
            self._t = t_ns
        return False

    def advance(self, dt_ns: int) -> None:
        """Move time forward by ``dt_ns``."""
        self._t += max(0, int(dt_ns))

    def __repr__(self) -> str:
        return f"VirtualClock(t={self._t}ns)"


class _Overshoot:
    """How late the OS wakes us: the spin margin covers the 90th percentile of recent wake-ups.

    A quantile, not the maximum: under a time-sharing scheduler a long spin makes the thread look
    like a CPU hog and gets it preempted, so the rare very late wake-up is not worth spinning for.
    """

    def __init__(self, initial_ns: int, floor_ns: int, ceil_ns: int, window: int = 32) -> None:
        self.recent = [int(initial_ns)] * window
        self.i = 0
        self.floor, self.ceil = floor_ns, ceil_ns
        self._margin = int(min(max(initial_ns, floor_ns), ceil_ns))

    def margin(self) -> int:
        return self._margin

    def observe(self, late_ns: int) -> None:
        r = self.recent
        r[self.i] = late_ns
        self.i = (self.i + 1) % len(r)
        q90 = sorted(r)[(9 * len(r)) // 10]
        self._margin = int(min(max(1.25 * q90, self.floor), self.ceil))

    def cap(self, ceil_ns: int) -> None:
        self.ceil = ceil_ns
        self._margin = min(self._margin, ceil_ns)


class WallClock:
    """Monotonic time; sleeps with the OS timer to just before the instant, then spins.

    The OS wakes a sleeping thread late (timer slack, scheduling: ~60-150 us on a VM). The clock
    measures that overshoot on every coarse sleep and keeps its spin margin just above most of it,
    so the wake-up lands within a microsecond or two of the instant while spinning only briefly.
    """

    virtual = False

    def __init__(self, *, epoch_ns: int | None = None, spin_ns: int = 200_000, max_spin_ns: int = 1_000_000,
                 rate: float = 1.0, shared_spin_ns: int = 150_000) -> None:
        if not rate > 0:
            raise ValueError(f"WallClock: rate must be positive, found {rate}")
        # rate > 1 runs logical time faster than the wall (a replay at X times real time).
        self.rate = float(rate)
        self.epoch_ns = _mono() if epoch_ns is None else int(epoch_ns)
        self.fixed_epoch = epoch_ns is not None   # else a runtime makes time 0 the start of its first run
        # A time-shared (SCHED_OTHER) thread that spins long looks like a CPU hog to the kernel and
        # gets preempted mid-spin, so it spins less; a SCHED_FIFO thread keeps its CPU.
        self.shared_spin_ns = shared_spin_ns
        self._sleep_late = _Overshoot(spin_ns, 30_000, max_spin_ns)
        self._wait_late = _Overshoot(spin_ns + 100_000, 30_000, max_spin_ns)

    def now(self) -> int:
        """Nanoseconds since the epoch (scaled by ``rate``)."""
        if self.rate == 1.0:
            return _mono() - self.epoch_ns
        return int((_mono() - self.epoch_ns) * self.rate)

    def to_logical(self, mono_ns: int) -> int:
        """A ``time.monotonic_ns()`` reading on this clock's time line."""
        if self.rate == 1.0:
            return mono_ns - self.epoch_ns
        return int((mono_ns - self.epoch_ns) * self.rate)

    def reset_epoch(self, epoch_ns: int | None = None) -> None:
        """Make logical time 0 now (or at the given monotonic instant)."""
        self.epoch_ns = _mono() if epoch_ns is None else int(epoch_ns)

    def retime(self, t_ns: int, rate: float) -> None:
        """Logical time is ``t_ns`` now and runs on at ``rate`` (a replay resumed after a pause, or at a new
        speed: replay.control). Only between the driver's calls: a sleep under way keeps its old target."""
        if not rate > 0:
            raise ValueError(f"WallClock: rate must be positive, found {rate}")
        self.rate = float(rate)
        self.epoch_ns = _mono() - (int(t_ns) if self.rate == 1.0 else int(t_ns / self.rate))

    @property
    def max_spin_ns(self) -> int:
        """The most the clock spins before an instant (it holds the GIL meanwhile)."""
        return self._sleep_late.ceil

    @max_spin_ns.setter
    def max_spin_ns(self, ns: int) -> None:
        self._sleep_late.cap(int(ns))
        self._wait_late.cap(int(ns))

    def spin_margin_ns(self, interruptible: bool = False) -> int:
        """How long before an instant the clock stops sleeping and starts spinning."""
        return (self._wait_late if interruptible else self._sleep_late).margin()

    def sleep_until(self, t_ns: int, wake: threading.Event | None = None) -> bool:
        """Sleep until logical ``t_ns``; return True early if ``wake`` gets set."""
        if not getattr(_precise, "on", False):   # once per thread that sleeps on this clock
            _precise.on = True
            set_timer_slack(1)
        target = (t_ns if self.rate == 1.0 else -int(-t_ns // self.rate)) + self.epoch_ns
        est = self._sleep_late if wake is None else self._wait_late
        margin = est.margin()
        if margin > self.shared_spin_ns and os.sched_getscheduler(0) not in _REALTIME:
            margin = self.shared_spin_ns
        coarse = target - margin
        now = _mono()
        if coarse > now:
            if wake is None:
                time.sleep((coarse - now) * 1e-9)
            elif wake.wait((coarse - now) * 1e-9):
                return True
            now = _mono()
            est.observe(now - coarse)
        if wake is None:
            while now < target:
                now = _mono()
        else:
            is_set = wake.is_set
            while now < target:
                if is_set():
                    return True
                now = _mono()
        return False

    def __repr__(self) -> str:
        return f"WallClock(t={self.now()}ns, spin={self.spin_margin_ns()}ns)"


def measure_overshoot(clock: WallClock, n: int = 50, ahead_ns: int = 2_000_000) -> list[int]:
    """Sleep ``n`` times to an instant ``ahead_ns`` away; return how late each wake-up was (ns)."""
    late = []
    for _ in range(n):
        t = clock.now() + ahead_ns
        clock.sleep_until(t)
        late.append(clock.now() - t)
    return late
