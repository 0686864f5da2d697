"""Static memory planning: give every buffer an offset in one arena, reusing memory across lifetimes.

Each buffer lives over an inclusive range of execution steps. Two buffers *conflict* when those
ranges overlap, and conflicting buffers must not overlap in memory. Everything else may share.

The planner is "greedy by size" with best-fit placement (TFLite's arena planner, XLA's
GlobalDecreasingSizeBestFitHeap): take buffers largest first; for each one look at the
already-placed buffers it conflicts with, ordered by offset, and put it in the smallest gap between
them that fits, or past the last of them. A second visiting order (largest size x lifetime first)
is tried too and the smaller arena kept, unless the first already meets the lower bound.

Sizes are rounded up to `alignment` before planning, so every offset and the arena size are
multiples of it and the ratio against the lower bound is honest (both use the same sizes).

Declared in-place ops are expressed with `Buffer.alias_of`: the alias shares its target's offset,
and the target's lifetime is stretched to cover the alias (chains are followed to the root).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence, Union

import numpy as np


@dataclass(frozen=True)
class Buffer:
    """A named block of `size` bytes live from step `first` to step `last`, both inclusive."""

    name: str
    size: int
    first: int
    last: int
    alias_of: str | None = None


@dataclass
class MemoryPlan:
    """Offsets for every buffer, the arena size, and the yardsticks to judge it by."""

    offsets: dict[str, int]
    total_bytes: int  # arena size: max over buffers of offset + aligned size
    lower_bound: int  # max over steps of the aligned bytes live at that step; no plan can beat it
    naive_bytes: int  # one private block per allocation (aliases share), i.e. no reuse at all
    alignment: int
    strategy: str = "size"  # which visiting order produced the offsets

    @property
    def ratio(self) -> float:
        """total_bytes / lower_bound; 1.0 is optimal."""
        return self.total_bytes / self.lower_bound if self.lower_bound else 1.0

    def summary(self) -> str:
        """One line for logs: arena size against the lower bound and against no reuse."""
        saved = 1.0 - self.total_bytes / self.naive_bytes if self.naive_bytes else 0.0
        return (
            f"{len(self.offsets)} buffers in {self.total_bytes} B "
            f"(lower bound {self.lower_bound} B, ratio {self.ratio:.3f}; "
            f"naive {self.naive_bytes} B, {saved:.1%} saved; "
            f"align {self.alignment}, by {self.strategy})"
        )


BufferLike = Union[Buffer, Sequence]


def plan_offsets(buffers: Iterable[BufferLike], alignment: int = 64) -> MemoryPlan:
    """Plan `(name, size_bytes, first_step, last_step)` tuples (or Buffers) into one arena."""
    return plan_buffers([_as_buffer(b) for b in buffers], alignment)


def plan_buffers(buffers: Iterable[Buffer], alignment: int = 64) -> MemoryPlan:
    """Plan Buffers, honouring `alias_of`, into one arena with offsets aligned to `alignment`."""
    alignment = _checked_alignment(alignment)
    bufs = _validated(buffers)
    root_of, span = _alias_roots(bufs)

    # Only roots take space; zero-size roots take none and conflict with nothing.
    roots = [name for name, (size, _, _) in span.items() if size > 0]
    sizes = np.array([_align_up(span[r][0], alignment) for r in roots], dtype=np.int64)
    firsts = np.array([span[r][1] for r in roots], dtype=np.int64)
    lasts = np.array([span[r][2] for r in roots], dtype=np.int64)
    lower = _lower_bound(sizes, firsts, lasts)

    best: tuple[int, str, np.ndarray] | None = None  # (arena size, strategy, offsets)
    for strategy, order in _orders(roots, sizes, firsts, lasts):
        offsets, total = _best_fit(sizes, firsts, lasts, order)
        if best is None or total < best[0]:
            best = (total, strategy, offsets)
        if best[0] <= lower:  # optimal: no other order can do better
            break
    assert best is not None
    total, strategy, offsets = best

    root_offset = dict(zip(roots, offsets.tolist()))
    return MemoryPlan(
        offsets={b.name: root_offset.get(root_of[b.name], 0) for b in bufs},
        total_bytes=total,
        lower_bound=lower,
        naive_bytes=int(sizes.sum()),
        alignment=alignment,
        strategy=strategy,
    )


# ---------------------------------------------------------------------------------------------
# Input checking and aliases


def _as_buffer(item: BufferLike) -> Buffer:
    if isinstance(item, Buffer):
        return item
    if isinstance(item, (str, bytes)) or not isinstance(item, Sequence) or len(item) not in (4, 5):
        raise ValueError(
            f"expected a Buffer or a (name, size_bytes, first_step, last_step) tuple, got {item!r}"
        )
    return Buffer(*item)


def _checked_alignment(alignment: object) -> int:
    try:
        a = operator.index(alignment)  # type: ignore[arg-type]
    except TypeError:
        a = 0
    if isinstance(alignment, bool) or a <= 0 or a & (a - 1):
        raise ValueError(f"alignment must be a positive power of two, got {alignment!r}")
    return int(a)


def _validated(buffers: Iterable[Buffer]) -> list[Buffer]:
    out: list[Buffer] = []
    seen: set[str] = set()
    for b in buffers:
        if not isinstance(b, Buffer):
            raise ValueError(f"expected a Buffer, got {b!r}")
        if not isinstance(b.name, str) or not b.name:
            raise ValueError(f"buffer name must be a non-empty string, got {b.name!r}")
        try:  # operator.index accepts numpy integers and refuses floats and bools' cousins alike
            size, first, last = (operator.index(v) for v in (b.size, b.first, b.last))
        except TypeError:
            raise ValueError(
                f"buffer {b.name!r}: size, first and last must be integers, "
                f"got size={b.size!r} first={b.first!r} last={b.last!r}"
            ) from None
        if size < 0:
            raise ValueError(f"buffer {b.name!r}: negative size {size}")
        if last < first:
            raise ValueError(f"buffer {b.name!r}: last step {last} is before first step {first}")
        if b.name in seen:
            raise ValueError(f"buffer {b.name!r}: duplicate name")
        if b.alias_of is not None and not isinstance(b.alias_of, str):
            raise ValueError(f"buffer {b.name!r}: alias_of must be a buffer name, got {b.alias_of!r}")
        seen.add(b.name)
        if type(size) is not int or type(first) is not int or type(last) is not int:
            b = Buffer(b.name, int(size), int(first), int(last), b.alias_of)  # e.g. numpy ints
        out.append(b)
    return out


def _alias_roots(bufs: list[Buffer]) -> tuple[dict[str, str], dict[str, tuple[int, int, int]]]:
    """Map each buffer to the root it aliases, and each root to (size, first, last) of its group."""
    if all(b.alias_of is None for b in bufs):  # the common case; skip the chain walking
        return {b.name: b.name for b in bufs}, {b.name: (b.size, b.first, b.last) for b in bufs}
    by_name = {b.name: b for b in bufs}
    for b in bufs:
        if b.alias_of is None:
            continue
        target = by_name.get(b.alias_of)
        if target is None:
            raise ValueError(f"buffer {b.name!r}: alias_of names unknown buffer {b.alias_of!r}")
        if b.size > target.size:
            raise ValueError(
                f"buffer {b.name!r} ({b.size} B) cannot alias {target.name!r} ({target.size} B): "
                f"it does not fit"
            )

    root_of: dict[str, str] = {}
    for b in bufs:
        chain, name = [], b.name
        while name not in root_of and by_name[name].alias_of is not None:
            if name in chain:
                raise ValueError(f"buffer {b.name!r}: alias cycle {' -> '.join(chain + [name])}")
            chain.append(name)
            name = by_name[name].alias_of
        root = root_of.get(name, name)
        for n in chain + [name]:
            root_of[n] = root

    # A root's group occupies the root's size over the union of its members' lifetimes.
    span: dict[str, tuple[int, int, int]] = {}
    for b in bufs:
        r = root_of[b.name]
        size, first, last = span.get(r, (by_name[r].size, b.first, b.last))
        span[r] = (size, min(first, b.first), max(last, b.last))
    return root_of, span


# ---------------------------------------------------------------------------------------------
# Planning proper


def _align_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) & -alignment


def _lower_bound(sizes: np.ndarray, firsts: np.ndarray, lasts: np.ndarray) -> int:
    """Max over steps of the bytes live at that step (a sweep over start/end events)."""
    if sizes.size == 0:
        return 0
    times = np.concatenate([firsts, lasts + 1])  # inclusive last: gone from step last + 1 on
    deltas = np.concatenate([sizes, -sizes])
    order = np.lexsort((deltas, times))  # at equal times frees (negative) come before allocations
    return int(np.cumsum(deltas[order]).max())


def _orders(
    roots: list[str], sizes: np.ndarray, firsts: np.ndarray, lasts: np.ndarray
) -> Iterator[tuple[str, list[int]]]:
    """Visiting orders to try, best first; ties fall back to first step, then name (determinism)."""
    names = np.array(roots, dtype=object)
    tie = np.argsort(names, kind="stable")
    # np.lexsort sorts by the last key first; applying it to a name-sorted permutation keeps
    # the name order for full ties.
    by_size = tie[np.lexsort((firsts[tie], -sizes[tie]))]
    yield "size", by_size.tolist()
    breadth = sizes * (lasts - firsts + 1)
    yield "size*lifetime", tie[np.lexsort((firsts[tie], -sizes[tie], -breadth[tie]))].tolist()


# Below this many conflicting blocks a plain Python scan beats the numpy call overhead.
_SMALL = 24


def _best_fit(
    sizes: np.ndarray, firsts: np.ndarray, lasts: np.ndarray, order: list[int]
) -> tuple[np.ndarray, int]:
    """Place blocks in `order`, each in the smallest gap among its conflicts; (offsets, arena size).

    Sizes are already aligned, so every offset and end stays aligned without further rounding.
    """
    n = len(order)
    offsets = np.zeros(n, dtype=np.int64)
    # Placed blocks, in placement order; only the first k entries are meaningful. A linear numpy
    # scan for conflicts beats an interval tree here: n is at most tens of thousands.
    p_first = np.empty(n, dtype=np.int64)
    p_last = np.empty(n, dtype=np.int64)
    p_off = np.empty(n, dtype=np.int64)
    p_end = np.empty(n, dtype=np.int64)
    size_l, first_l, last_l = sizes.tolist(), firsts.tolist(), lasts.tolist()
    total = 0
    for k, i in enumerate(order):
        size, a, b = size_l[i], first_l[i], last_l[i]
        live = p_first[:k] <= b
        live &= p_last[:k] >= a
        hit = live.nonzero()[0]
        if len(hit) == 0:
            off = 0
        elif len(hit) <= _SMALL:
            off = _gap_small(p_off[hit].tolist(), p_end[hit].tolist(), size)
        else:
            off = _gap_vector(p_off[hit], p_end[hit], size)
        offsets[i] = off
        p_first[k], p_last[k], p_off[k], p_end[k] = a, b, off, off + size
        total = max(total, off + size)
    return offsets, total


def _gap_small(offs: list[int], ends: list[int], size: int) -> int:
    """Best-fit offset among blocks given as parallel offset/end lists (pure Python)."""
    best_off, best_gap = -1, -1
    reach = 0  # highest end so far: blocks that do not conflict with each other may overlap
    for off, end in sorted(zip(offs, ends)):
        gap = off - reach
        if gap >= size and (best_gap < 0 or gap < best_gap):
            best_off, best_gap = reach, gap
        if end > reach:
            reach = end
    return best_off if best_gap >= 0 else reach


def _gap_vector(offs: np.ndarray, ends: np.ndarray, size: int) -> int:
    """Best-fit offset, the same rule as _gap_small, vectorised for many conflicting blocks."""
    srt = offs.argsort()
    reach = np.maximum.accumulate(ends[srt])
    offs = offs[srt]
    # Gap j runs from the reach of the blocks below block j (0 for the first) up to block j.
    starts = np.concatenate(([0], reach[:-1]))
    gaps = offs - starts
    gaps[gaps < size] = _NO_FIT
    j = int(gaps.argmin())  # first minimum: the lowest of equally tight gaps
    return int(starts[j]) if gaps[j] != _NO_FIT else int(reach[-1])


_NO_FIT = np.iinfo(np.int64).max
