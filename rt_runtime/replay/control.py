"""Playback control, the pure core: pause, resume, step, seek and rate over a bag's time line.

A ``Playback`` is plain, immutable data: where bag time was at one wall instant (the anchor), the
rate, and whether it is paused. Bag time at any wall instant follows from it (``position``): a pause
holds it, a rate change re-anchors so it stays continuous, a seek jumps it. Every command is a
function from one state to the next (``apply``); the adapters (the player's loop, the keyboard, the
ROS services, Foxglove's playback controls) only translate into ``Command``s and read the state.
Times are integer nanoseconds: wall time on any monotonic clock, bag time on the bag's time line.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

RATE_MIN, RATE_MAX = 0.001, 1000.0   # as `play --rate` and `replay --speed` accept
NAMES = ("pause", "resume", "toggle", "step", "period", "seek", "seek_by", "rate")


class ControlError(ValueError):
    """A command that cannot apply (a rate or seek out of range, a step while playing): one line."""


@dataclass(frozen=True)
class Command:
    """One control command: ``name`` in ``NAMES``; ``value`` for seek (bag ns), seek_by (ns), rate (factor)."""

    name: str
    value: float | int | None = None


@dataclass(frozen=True)
class Playback:
    """Where playback stands: bag time ``anchor_bag_ns`` at wall ``anchor_wall_ns``, advancing at ``rate``
    unless ``paused``; ``steps`` messages to release while paused; ``seeks`` counts the jumps (a reader
    repositions when it changes); ``version`` counts every change (an adapter compares one integer)."""

    start_ns: int
    end_ns: int
    anchor_wall_ns: int
    anchor_bag_ns: int
    rate: float = 1.0
    paused: bool = False
    period_ns: int = 100_000_000
    steps: int = 0
    seeks: int = 0
    version: int = 0


def begin(start_ns: int, end_ns: int, wall_ns: int, *, rate: float = 1.0, paused: bool = False,
          period_ns: int = 100_000_000) -> Playback:
    """A playback at the start of ``[start_ns, end_ns]`` from wall instant ``wall_ns``."""
    if end_ns < start_ns:
        raise ControlError(f"playback: the time range ends ({end_ns}) before it starts ({start_ns})")
    if period_ns <= 0:
        raise ControlError(f"playback: expected a positive step period, found {period_ns} ns")
    return Playback(int(start_ns), int(end_ns), int(wall_ns), int(start_ns), checked_rate(rate), bool(paused),
                    int(period_ns))


def checked_rate(rate: float) -> float:
    """``rate`` as a float if it lies in [RATE_MIN, RATE_MAX], else ControlError."""
    try:
        r = float(rate)
    except (TypeError, ValueError):
        raise ControlError(f"rate: expected a number from {RATE_MIN:g} to {RATE_MAX:g}, found {rate!r}") from None
    if not RATE_MIN <= r <= RATE_MAX:   # also NaN
        raise ControlError(f"rate: expected a number from {RATE_MIN:g} to {RATE_MAX:g}, found {rate!r}")
    return r


def _clamp(pb: Playback, t_ns: int) -> int:
    return pb.start_ns if t_ns < pb.start_ns else pb.end_ns if t_ns > pb.end_ns else t_ns


def position(pb: Playback, wall_ns: int) -> int:
    """Bag time at wall instant ``wall_ns`` (held while paused; never outside the range)."""
    if pb.paused or wall_ns <= pb.anchor_wall_ns:
        return pb.anchor_bag_ns
    return _clamp(pb, pb.anchor_bag_ns + int((wall_ns - pb.anchor_wall_ns) * pb.rate))


def wall_at(pb: Playback, bag_ns: int) -> int | None:
    """The wall instant at which bag time reaches ``bag_ns`` (None while paused; the anchor if already past)."""
    if pb.paused:
        return None
    if bag_ns <= pb.anchor_bag_ns:
        return pb.anchor_wall_ns
    return pb.anchor_wall_ns + -int(-(bag_ns - pb.anchor_bag_ns) // pb.rate)   # ceil: never early


def _at(pb: Playback, wall_ns: int, **changes: object) -> Playback:
    """Re-anchored at ``wall_ns`` (bag time continuous there), with ``changes``."""
    changes.setdefault("anchor_bag_ns", position(pb, wall_ns))
    return replace(pb, anchor_wall_ns=int(wall_ns), version=pb.version + 1, **changes)


def pause(pb: Playback, wall_ns: int) -> Playback:
    """Bag time stops where it is (pending steps are dropped: they apply to one pause)."""
    return pb if pb.paused else _at(pb, wall_ns, paused=True, steps=0)


def resume(pb: Playback, wall_ns: int) -> Playback:
    """Bag time runs again from where it was held."""
    return _at(pb, wall_ns, paused=False, steps=0) if pb.paused else pb


def toggle(pb: Playback, wall_ns: int) -> Playback:
    """Pause if playing, resume if paused."""
    return resume(pb, wall_ns) if pb.paused else pause(pb, wall_ns)


def set_rate(pb: Playback, wall_ns: int, rate: float) -> Playback:
    """A new rate from ``wall_ns`` on; bag time continues from where it is (no jump)."""
    r = checked_rate(rate)
    return pb if r == pb.rate else _at(pb, wall_ns, rate=r)


def seek(pb: Playback, wall_ns: int, t_ns: int) -> Playback:
    """Bag time jumps to ``t_ns`` (in the range, else ControlError); paused stays paused."""
    if isinstance(t_ns, bool) or not isinstance(t_ns, int):
        raise ControlError(f"seek: expected a time in ns (an integer), found {t_ns!r}")
    if not pb.start_ns <= t_ns <= pb.end_ns:
        raise ControlError(f"seek: expected a time from {pb.start_ns} to {pb.end_ns} ns (the bag's range, "
                           f"{(pb.end_ns - pb.start_ns) / 1e9:.3f} s), found {t_ns} "
                           f"({(t_ns - pb.start_ns) / 1e9:+.3f} s from its start)")
    return _at(pb, wall_ns, anchor_bag_ns=int(t_ns), seeks=pb.seeks + 1, steps=0)


def seek_by(pb: Playback, wall_ns: int, dt_ns: int) -> Playback:
    """Bag time jumps by ``dt_ns`` from where it is, stopping at either end of the range (a key held)."""
    return seek(pb, wall_ns, _clamp(pb, position(pb, wall_ns) + int(dt_ns)))


def step(pb: Playback) -> Playback:
    """One more message to release while paused (ControlError while playing, as rosbag2's play_next)."""
    if not pb.paused:
        raise ControlError("play_next: playback is not paused (pause first)")
    return replace(pb, steps=pb.steps + 1, version=pb.version + 1)


def period(pb: Playback, wall_ns: int) -> Playback:
    """While paused, bag time moves on by one period (what falls in it is released)."""
    if not pb.paused:
        raise ControlError("play_period: playback is not paused (pause first)")
    return _at(pb, wall_ns, anchor_bag_ns=_clamp(pb, pb.anchor_bag_ns + pb.period_ns))


def took_step(pb: Playback, wall_ns: int, bag_ns: int) -> Playback:
    """A step released the message at ``bag_ns``: one step fewer, bag time held there."""
    return _at(pb, wall_ns, anchor_bag_ns=_clamp(pb, max(int(bag_ns), pb.anchor_bag_ns)), steps=max(0, pb.steps - 1))


def arrive(pb: Playback, wall_ns: int, bag_ns: int) -> Playback:
    """Re-anchor at (``wall_ns``, ``bag_ns``): the consumer is at ``bag_ns`` then (a replay's runtime that ran
    on to the next message before it saw a pause: bag time never goes back for it)."""
    return _at(pb, wall_ns, anchor_bag_ns=_clamp(pb, int(bag_ns)))


def apply(pb: Playback, cmd: Command, wall_ns: int) -> Playback:
    """The state after ``cmd`` at ``wall_ns`` (ControlError for a bad one)."""
    name, v = cmd.name, cmd.value
    if name == "pause":
        return pause(pb, wall_ns)
    if name == "resume":
        return resume(pb, wall_ns)
    if name == "toggle":
        return toggle(pb, wall_ns)
    if name == "step":
        return step(pb)
    if name == "period":
        return period(pb, wall_ns)
    if name == "rate":
        return set_rate(pb, wall_ns, v)  # type: ignore[arg-type]
    if name in ("seek", "seek_by"):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        return seek(pb, wall_ns, v) if name == "seek" else seek_by(pb, wall_ns, int(v or 0))  # type: ignore[arg-type]
    raise ControlError(f"playback: expected a command in {', '.join(NAMES)}, found {name!r}")
