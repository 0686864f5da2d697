"""How many threads compute a replay's jobs (``sched.parallel``), and what to say where that is not asked-for.

Unasked, none: the serial driver runs each op where the virtual clock books it, the shortest path
from the bag reader to the writer. With eager kernels a second computing thread mostly trades the GIL
(the built-in bag on 2 cores: 3.70 s serial, 3.75 s at ``--parallel 2``, 88 MB more and 762 publishes on
a bet; docs/BENCHMARKS.md, "Parallel commit"), so parallel commit is what a user asks for, not the default."""
from __future__ import annotations

from typing import Any, Sequence


def wanted_threads(parallel: int | None) -> int:
    """The threads ``parallel`` asks to compute jobs: None (not asked) is 0, the serial driver."""
    return parallel if parallel is not None else 0


def parallel_threads(parallel: int | None, logical: bool, bindings: Sequence[Any], notes: list[str]) -> int:
    """Threads computing jobs (0: the serial driver) for ``parallel`` (None: 0); a note where
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
