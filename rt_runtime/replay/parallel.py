"""How many threads compute a replay's jobs (``sched.parallel``), and what to say where that is not asked-for."""
from __future__ import annotations

import os
from typing import Any, Sequence


def wanted_threads(parallel: int | None) -> int:
    """The threads ``parallel`` asks to compute jobs: None is one per core."""
    return parallel if parallel is not None else (os.cpu_count() or 1)


def parallel_threads(parallel: int | None, logical: bool, bindings: Sequence[Any], notes: list[str]) -> int:
    """Threads computing jobs (0: the serial driver) for ``parallel`` (None: one per core); a note where
    the request cannot be met."""
    if parallel is not None and parallel < 0:
        raise ValueError(f"--parallel: expected 1 or more threads, found {parallel}")
    want = wanted_threads(parallel)
    if want == 0:
        return 0
    if not logical:
        if parallel is not None and parallel > 1:
            notes.append(f"--parallel {parallel}: jobs compute in parallel under budget timing only (there the "
                         "schedule is known before any op runs); measured timing and the wall clock run each op "
                         "where it is scheduled (1 thread)")
        return 0
    spec = sorted(b.name for b in bindings if b.speculate is not None)
    if spec and want > 1:
        notes.append(f"--parallel {want}: task(s) {spec} speculate, and speculation reads outputs computed but not "
                     "yet published: every job is computed in the driver thread (1 thread)")
    return want
