"""The stack file's ``realtime:`` key: how the runtime's threads run on the wall clock, said explicitly.

    realtime: {enabled: true, priority: 50, cpus: [2, 3]}

``enabled``: SCHED_FIFO and pinning where the OS permits (one warning where it does not);
``priority``: the workers' SCHED_FIFO priority (1..98; the timekeeper runs one above);
``cpus``: the CPUs the workers are pinned to, in turn (default: every CPU the process may use; with
one worker in the calling thread, the first). Absent: enabled for a replay on the wall clock, as
the live node's ``realtime`` parameter says for the node. The replay and the node print one line
at start saying what it does (``Runtime.describe_realtime``). The virtual clock ignores it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from ..core.units import clip
from .basetypes import REALTIME_KEYS

KEYS = REALTIME_KEYS   # the schema's model is the one list


@dataclass(frozen=True)
class RealtimeSpec:
    """SCHED_FIFO on or off, at which priority, pinned to which CPUs (None: the process's)."""

    enabled: bool = True
    priority: int = 50
    cpus: tuple[int, ...] | None = None


def parse_realtime(value: object, fail: Callable[[str], Exception]) -> RealtimeSpec | None:
    """The ``realtime:`` value (a bool or a mapping) as a spec; None when absent."""
    if value is None:
        return None
    if isinstance(value, bool):
        return RealtimeSpec(enabled=value)
    if not isinstance(value, dict):
        raise fail(f"expected true, false or {{enabled, priority, cpus}}, found {clip(value)}")
    unknown = [k for k in value if k not in KEYS]
    if unknown:
        raise fail(f"unknown key {clip(unknown[0])}; expected {', '.join(KEYS)}")
    enabled, prio, cpus = value.get("enabled", True), value.get("priority", 50), value.get("cpus")
    if not isinstance(enabled, bool):
        raise fail(f"enabled: expected true or false, found {clip(enabled)}")
    if isinstance(prio, bool) or not isinstance(prio, int) or not 1 <= prio <= 98:
        raise fail(f"priority: expected an integer from 1 to 98, found {clip(prio)}")
    if cpus is not None:
        usable = sorted(os.sched_getaffinity(0))
        if not isinstance(cpus, list) or not cpus or not all(isinstance(c, int) and not isinstance(c, bool)
                                                            for c in cpus):
            raise fail(f"cpus: expected a list of CPU numbers, found {clip(cpus)}")
        if not set(cpus) <= set(usable):
            raise fail(f"cpus: {sorted(set(cpus) - set(usable))} are not CPUs this process may use ({usable})")
    return RealtimeSpec(enabled, prio, tuple(cpus) if cpus is not None else None)


def runtime_kwargs(spec: RealtimeSpec | None, default: bool) -> dict[str, Any]:
    """``Runtime`` arguments for a spec (``default``: on or off when the file says nothing)."""
    if spec is None:
        return {"realtime": default}
    return {"realtime": spec.enabled, "rt_priority": spec.priority,
            **({"cpus": list(spec.cpus)} if spec.cpus is not None else {})}
