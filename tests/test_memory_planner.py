"""Static memory planner: validity properties, aliasing, validation, lifetimes, arenas."""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rt_runtime.memory import Arena, Buffer, MemoryPlan, PoolKind, lifetimes, plan_buffers, plan_offsets

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def _conflict(x: Buffer, y: Buffer) -> bool:
    return x.first <= y.last and y.first <= x.last


def _overlap(o1: int, s1: int, o2: int, s2: int) -> bool:
    return s1 > 0 and s2 > 0 and o1 < o2 + s2 and o2 < o1 + s1


def _brute_lower_bound(bufs: list[Buffer], a: int) -> int:
    steps = range(min(b.first for b in bufs), max(b.last for b in bufs) + 1) if bufs else []
    return max([sum(_align(b.size, a) for b in bufs if b.first <= t <= b.last) for t in steps], default=0)


def _assert_valid(plan: MemoryPlan, bufs: list[Buffer], a: int) -> None:
    assert set(plan.offsets) == {b.name for b in bufs}
    for b in bufs:
        off = plan.offsets[b.name]
        assert off >= 0 and off % a == 0, (b, off)
        assert off + b.size <= plan.total_bytes
    for i, x in enumerate(bufs):
        for y in bufs[i + 1:]:
            if _conflict(x, y):
                assert not _overlap(plan.offsets[x.name], x.size, plan.offsets[y.name], y.size), (x, y)
    assert plan.total_bytes % a == 0
    assert plan.lower_bound <= plan.total_bytes <= max(plan.naive_bytes, 0)


@st.composite
def buffer_sets(draw, max_n: int = 40, max_step: int = 30) -> list[Buffer]:
    n = draw(st.integers(0, max_n))
    out = []
    for i in range(n):
        first = draw(st.integers(0, max_step))
        last = first + draw(st.integers(0, 10))
        size = draw(st.one_of(st.just(0), st.integers(1, 5000)))
        out.append(Buffer(f"b{i}", size, first, last))
    return out


alignments = st.sampled_from([1, 8, 64, 256])


# --- properties --------------------------------------------------------------------------------


@FAST
@given(buffer_sets(), alignments)
def test_plan_is_valid_and_bounded(bufs: list[Buffer], a: int) -> None:
    plan = plan_offsets([(b.name, b.size, b.first, b.last) for b in bufs], alignment=a)
    _assert_valid(plan, bufs, a)
    assert plan.lower_bound == _brute_lower_bound(bufs, a)
    assert plan.naive_bytes == sum(_align(b.size, a) for b in bufs)
    assert all(plan.offsets[b.name] == 0 for b in bufs if b.size == 0)


@FAST
@given(buffer_sets(max_n=25), st.data())
def test_alias_chains_share_offsets_and_stay_valid(bufs: list[Buffer], data: st.DataObject) -> None:
    # Turn some buffers into in-place results of an earlier buffer (shrinking them to fit).
    aliased: list[Buffer] = []
    for i, b in enumerate(bufs):
        if i and data.draw(st.booleans()):
            target = aliased[data.draw(st.integers(0, i - 1))]
            b = Buffer(b.name, min(b.size, target.size), b.first, b.last, alias_of=target.name)
        aliased.append(b)
    plan = plan_buffers(aliased, alignment=64)

    by_name = {b.name: b for b in aliased}

    def root(name: str) -> str:
        while by_name[name].alias_of is not None:
            name = by_name[name].alias_of
        return name

    for b in aliased:
        if b.alias_of is not None:
            assert plan.offsets[b.name] == plan.offsets[b.alias_of]
    # Validity: buffers in different alias groups whose group lifetimes overlap must not overlap.
    groups: dict[str, list[Buffer]] = {}
    for b in aliased:
        groups.setdefault(root(b.name), []).append(b)
    span = {r: (min(m.first for m in ms), max(m.last for m in ms)) for r, ms in groups.items()}
    for r1, (f1, l1) in span.items():
        for r2, (f2, l2) in span.items():
            if r1 < r2 and f1 <= l2 and f2 <= l1:
                s1, s2 = by_name[r1].size, by_name[r2].size
                assert not _overlap(plan.offsets[r1], s1, plan.offsets[r2], s2), (r1, r2)
    for b in aliased:
        assert plan.offsets[b.name] % 64 == 0 and plan.offsets[b.name] + b.size <= plan.total_bytes


@FAST
@given(buffer_sets())
def test_deterministic(bufs: list[Buffer]) -> None:
    assert plan_buffers(bufs).offsets == plan_buffers(list(bufs)).offsets


# --- examples ----------------------------------------------------------------------------------


def test_best_fit_reuses_freed_gap() -> None:
    # big dies after step 1; late (2..3) takes its bytes instead of growing the arena, and mid,
    # which overlaps both, goes above them.
    plan = plan_offsets(
        [("big", 1024, 0, 1), ("mid", 512, 0, 3), ("late", 1000, 2, 3), ("tiny", 64, 2, 3)], alignment=64
    )
    assert plan.offsets == {"big": 0, "late": 0, "mid": 1024, "tiny": 1536}
    assert plan.total_bytes == plan.lower_bound == 1600
    assert plan.naive_bytes == 2624 and plan.ratio == 1.0


def test_best_fit_picks_smallest_gap() -> None:
    # Short-lived fillers (placed first, being bigger) push the long-lived A and B up, leaving a
    # 512 B hole at 0 and a 256 B hole at 768 once the fillers die. x takes the tighter hole;
    # first-fit would have taken 0.
    plan = plan_offsets(
        [("f1", 512, 0, 0), ("A", 256, 0, 9), ("f2", 256, 0, 0), ("B", 128, 0, 9), ("x", 128, 5, 5)],
        alignment=64,
    )
    assert plan.offsets == {"f1": 0, "A": 512, "f2": 768, "B": 1024, "x": 768}
    assert plan.total_bytes == 1152


def test_empty_and_zero_size() -> None:
    plan = plan_offsets([])
    assert (plan.total_bytes, plan.lower_bound, plan.naive_bytes, plan.ratio) == (0, 0, 0, 1.0)
    plan = plan_offsets([("z", 0, 0, 5), ("a", 10, 0, 5)])
    assert plan.offsets == {"z": 0, "a": 0} and plan.total_bytes == 64
    assert "2 buffers" in plan.summary() and "ratio 1.000" in plan.summary()


def test_accepts_buffers_and_numpy_ints() -> None:
    plan = plan_offsets([Buffer("a", 100, 0, 1), ("b", np.int64(100), np.int32(1), np.int64(2))], alignment=np.int64(32))
    assert plan.offsets == {"a": 0, "b": 128} and plan.alignment == 32


def test_alias_extends_lifetime() -> None:
    # x dies at step 1 but y (alias of x) lives to 3, so z (2..3) must not take x's bytes.
    bufs = [Buffer("x", 256, 0, 1), Buffer("y", 256, 1, 3, alias_of="x"), Buffer("z", 256, 2, 3)]
    plan = plan_buffers(bufs)
    assert plan.offsets["y"] == plan.offsets["x"] != plan.offsets["z"]
    assert plan.naive_bytes == 512  # the alias needs no bytes of its own
    chain = [Buffer("a", 128, 0, 0), Buffer("b", 128, 1, 1, "a"), Buffer("c", 64, 2, 2, "b"), Buffer("d", 128, 1, 2)]
    plan = plan_buffers(chain)
    assert plan.offsets["a"] == plan.offsets["b"] == plan.offsets["c"] != plan.offsets["d"]


@pytest.mark.parametrize(
    "bufs, alignment, match",
    [
        ([("a", -1, 0, 0)], 64, "'a'.*negative size"),
        ([("a", 1, 3, 2)], 64, "'a'.*before first step"),
        ([("a", 1, 0, 0), ("a", 2, 0, 0)], 64, "'a'.*duplicate"),
        ([("a", 1.5, 0, 0)], 64, "'a'.*integers"),
        ([("a", 1, 0)], 64, "tuple"),
        ([], 0, "power of two"),
        ([], 48, "power of two"),
        ([], -64, "power of two"),
        ([], True, "power of two"),
        ([], 64.0, "power of two"),
    ],
)
def test_validation_errors(bufs: list, alignment: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plan_offsets(bufs, alignment=alignment)


@pytest.mark.parametrize(
    "bufs, match",
    [
        ([Buffer("a", 64, 0, 0), Buffer("b", 128, 1, 1, "a")], "'b'.*does not fit"),
        ([Buffer("b", 64, 1, 1, "nope")], "'b'.*unknown buffer 'nope'"),
        ([Buffer("a", 64, 0, 0, "b"), Buffer("b", 64, 1, 1, "a")], "cycle"),
        ([Buffer("a", 64, 0, 0, "a")], "cycle"),
    ],
)
def test_alias_errors(bufs: list[Buffer], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plan_buffers(bufs)


@pytest.mark.wallclock
def test_ten_thousand_buffers_is_fast() -> None:
    rng = np.random.default_rng(0)
    n = 10_000
    first = rng.integers(0, n, n)
    length = np.where(rng.random(n) < 0.1, rng.integers(0, n // 4, n), rng.geometric(0.3, n) - 1)
    size = rng.integers(64, 4 << 20, n)
    bufs = [(f"t{i}", int(size[i]), int(first[i]), int(first[i] + length[i])) for i in range(n)]
    t0 = time.perf_counter()
    plan = plan_offsets(bufs)
    elapsed = time.perf_counter() - t0
    assert plan.lower_bound <= plan.total_bytes
    # ~0.4 s here, 1.5 s beside a CPU hog; a quadratic planner would take minutes.
    assert elapsed < 20.0, f"planning 10,000 buffers took {elapsed:.2f} s"


# --- lifetimes ---------------------------------------------------------------------------------


def test_lifetimes_chain_with_skip_and_outputs() -> None:
    order = [
        ("conv1", ["image"], ["a"]),
        ("conv2", ["a"], ["b"]),
        ("conv3", ["b"], ["c", "unused"]),
        ("add", ["c", "a"], ["d"]),
        ("head", ["d"], ["out"]),
    ]
    assert lifetimes(order, keep_alive={"a", "image"}) == {
        "a": (0, 4), "b": (1, 2), "c": (2, 3), "unused": (2, 2), "d": (3, 4), "out": (4, 4),
    }
    assert lifetimes(order)["a"] == (0, 3)
    assert "image" not in lifetimes(order)
    assert lifetimes([]) == {}


def test_lifetimes_rejects_bad_orders() -> None:
    with pytest.raises(ValueError, match="'x' is produced twice"):
        lifetimes([("p", [], ["x"]), ("q", ["x"], ["x"])])
    with pytest.raises(ValueError, match="'x' is consumed at step 0"):
        lifetimes([("q", ["x"], ["y"]), ("p", [], ["x"])])


def test_lifetimes_feed_the_planner() -> None:
    order = [(f"op{i}", [f"t{i - 1}"] if i else ["in"], [f"t{i}"]) for i in range(6)]
    live = lifetimes(order, keep_alive={"t5"})
    plan = plan_offsets([(n, 1000, f, l) for n, (f, l) in live.items()])
    assert plan.total_bytes == plan.lower_bound == 2 * 1024  # a chain needs two slots, ping-pong


# --- arena -------------------------------------------------------------------------------------


def test_arena() -> None:
    plan = plan_offsets([("a", 100, 0, 1), ("b", 100, 1, 2)])
    arena = Arena("act", "activations", plan, np.zeros(plan.total_bytes, np.uint8))
    assert arena.kind is PoolKind.ACTIVATIONS and PoolKind("io") is PoolKind.IO
    assert arena.nbytes == 256 and arena.offset_of("b") == plan.offsets["b"]
    assert PoolKind.WORKSPACE.value == "workspace" and PoolKind.WEIGHTS.value == "weights"
    with pytest.raises(KeyError, match="'nope'"):
        arena.offset_of("nope")
    with pytest.raises(ValueError, match="needs 256 B"):
        Arena("act", PoolKind.ACTIVATIONS, plan, np.zeros(100, np.uint8))
    assert Arena("w", PoolKind.WEIGHTS, plan, bytearray(256)).nbytes == 256
