"""The scheduler's timeline entries: typed records, compared as the plain tuples they are.

An ``Entry`` is a NamedTuple, so the heap orders entries as it ordered ``(t, phase, name, index, ...)``:
by instant, then phase (publishes, then ingress, then releases), then task or channel name, then
index; the four are unique, so the payload is never compared (docs/CYCLE.md, "One instant").
"""
from __future__ import annotations

import functools
from enum import IntEnum
from typing import Any, Callable, NamedTuple


class Phase(IntEnum):
    """What happens at an entry's instant, in the order things happen at one instant."""

    PUBLISH = 0   # a job's deadline: publish its outputs (LET write) or declare a miss; payload: the RunJob
    INGRESS = 1   # a message becomes visible on its channel; name: the channel, payload: the data
    RELEASE = 2   # a job's release, or a chain member's timeout (index < 0); payload: the TaskState


PUBLISH, INGRESS, RELEASE = Phase.PUBLISH, Phase.INGRESS, Phase.RELEASE


class Entry(NamedTuple):
    """One instant at which something happens: ``t``, its ``phase``, the task or channel ``name``, the job
    index (an ingress: its sequence number; a chain member's timeout: a unique negative number), what
    it is about (``payload``) and, for ingress, the instant the data describe (``stamp``, -1: ``t``)."""

    t: int
    phase: Phase
    name: str
    index: int
    payload: Any
    stamp: int = -1


# ``Entry(...)`` runs the NamedTuple's Python-level ``__new__``; the per-job paths (a release, a deadline,
# an ingress message) build entries through this C-level call instead, from all six fields:
# ``new_entry((t, phase, name, index, payload, stamp))``.
new_entry: Callable[[tuple], Entry] = functools.partial(tuple.__new__, Entry)
