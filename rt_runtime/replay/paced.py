"""Playback control of a replay on the wall clock (``--speed X``): the core (``replay.control``) gates the feed.

The replay's driver asks ``Paced.before(t)`` before it runs the runtime on to the next message at logical
``t``. Playing, it returns at once (a new rate re-times the ``WallClock`` there, logical time continuous).
Paused, the runtime stands still: the driver calls nothing, no job is released, and logical time resumes
where it stopped (the clock re-timed to it), so a pause costs no job a deadline. A step (one message)
feeds the next message, the runtime running at the rate up to it; a period step runs the runtime one
period on (the messages in it fed), then it stands again. A seek raises ``Seek``: the replay starts
again at that instant, as a fresh start there would (``engine.replay``; docs/ROS.md). The core's time
is the bag's, from its start; a run started ``origin_ns`` into the bag has its logical 0 there. The
virtual clock has none of this.
"""
from __future__ import annotations

from typing import Callable

from ..sched.clock import WallClock
from . import control as C
from .controller import Controller

POLL_S = 0.1   # how often a paused driver looks at its stop flag (a signal)


class Seek(Exception):
    """The playback core jumped: the replay restarts at ``target_ns`` (from the bag's start); ``seeks``: the
    core's count of jumps then (the next run acts on any later one, made while it was being built)."""

    def __init__(self, target_ns: int, seeks: int) -> None:
        super().__init__(f"seek to {target_ns / 1e9:.3f} s")
        self.target_ns, self.seeks = target_ns, seeks


NOT_STARTED_NS = 1 << 62   # a wall instant never reached: ``position`` holds before it


def replay_controller(duration_ns: int, speed: float, period_ns: int, paused: bool = False) -> Controller:
    """The core of a replay of ``duration_ns`` at ``speed``: the bag's time [0, duration], held at 0 until the
    feed's first message anchors it (the stack's set-up takes about a second: /clock and the playback bar wait)."""
    return Controller(C.begin(0, duration_ns, NOT_STARTED_NS, rate=speed, paused=paused, period_ns=period_ns))


class Paced:
    """Gates one replay's feed: ``advance(t)`` runs its runtime to logical ``t``; ``stop()`` names a signal."""

    def __init__(self, ctl: Controller, clock: WallClock, advance: Callable[[int], None],
                 stop: Callable[[], str | None] | None, origin_ns: int = 0, seeks: int | None = None) -> None:
        self.ctl, self.clock, self.advance, self.stop = ctl, clock, advance, stop
        self.origin = origin_ns   # the core's time of logical 0
        self.seeks = ctl.state.seeks if seeks is None else seeks   # a jump after this count: ``Seek``
        self.seen = -1          # the state version acted on (-1: none yet, the first message looks)
        self.blocked: int | None = None   # logical time where the runtime stands, while it does
        self.ran = 0            # how far ``before`` itself ran the runtime (a period step)

    def start(self) -> None:
        """The feed starts now at logical 0: the core's bag time with it."""
        # Not over a jump made while this run was built: the first ``before`` raises it, with its target.
        self.ctl.update(lambda pb, now: pb if pb.seeks != self.seeks else C.arrive(pb, now, self.origin))

    def _go(self, rate: float) -> None:
        """The runtime moves again: the clock on from where it stood (or from now, at a new rate); playing, the
        core's bag time is set to the runtime's (what Foxglove is told)."""
        if self.blocked is None and rate == self.clock.rate:
            return
        t = self.blocked if self.blocked is not None else self.clock.now()
        self.blocked = None
        self.clock.retime(t, rate)
        self.seen = self.ctl.update(lambda p, now: p if p.paused else C.arrive(p, now, t + self.origin)).version

    def before(self, t_next: int, t_prev: int) -> None:
        """Return when the message at ``t_next`` may be fed (the runtime is at ``t_prev`` or beyond)."""
        ctl = self.ctl
        pb = ctl.state
        if pb.version == self.seen and not pb.paused:
            return   # the fast path: one comparison a message
        o = self.origin
        while True:
            pb = ctl.state
            self.seen = pb.version
            if pb.seeks != self.seeks:
                raise Seek(pb.anchor_bag_ns, pb.seeks)
            if not pb.paused or t_next + o <= pb.anchor_bag_ns:   # playing, or within a step
                self._go(pb.rate)
                return
            if pb.steps and ctl.take_step(t_next + o):
                continue
            held = pb.anchor_bag_ns - o
            if held > max(t_prev, self.ran, self.blocked or 0):   # a period step: the runtime runs up to it
                self._go(pb.rate)
                self.advance(held)
                self.ran = held
                continue
            if self.blocked is None:   # it stands here; bag time for the core too (never back for the runtime)
                self.blocked = max(self.clock.now(), held)
                blocked = self.blocked
                ctl.update(lambda p, now: C.arrive(p, now, blocked + o) if p.paused else p)
                continue
            if self.stop is not None and self.stop():
                return   # a signal: the feed ends at its next check
            ctl.wait(POLL_S)
