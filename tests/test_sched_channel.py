"""Channels: policies when a reader falls behind, drop counts, preallocated slots, pinning."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rt_runtime.core import ContractError, TensorSpec
from rt_runtime.sched import Channel, ChannelPolicy


def _vals(ch: Channel, rid: int, n: int) -> list[float]:
    out = []
    for _ in range(n):
        s = ch.read(rid)
        out.append(float(s.data[0]))
        ch.unpin(s)
    return out


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_latest_sees_newest_and_counts_unseen_as_drops(lib: str) -> None:
    ch = Channel("/x", "latest")
    rid = ch.add_reader("t.x")
    assert ch.read(rid) is None
    for k in range(4):
        ch.write(100 * k, np.full(3, k, np.float32) if lib == "numpy" else torch.full((3,), float(k)))
    s = ch.read(rid)
    assert (s.seq, s.t_ns, float(s.data[0])) == (3, 300, 3.0)
    assert ch.readers[rid].drops == 3 and ch.last_read_drops == 3
    ch.unpin(s)
    s2 = ch.read(rid)   # nothing new: the same message, stale, no new drop
    assert s2 is s and ch.readers[rid].stale and ch.readers[rid].drops == 3
    ch.unpin(s2)
    assert isinstance(s.data, np.ndarray if lib == "numpy" else torch.Tensor)


def test_queue_keeps_oldest_n_and_drops_newcomers() -> None:
    ch = Channel("/q", "queue", depth=2)
    rid = ch.add_reader("t.x")
    for k in range(5):
        ch.write(k, np.array([k], np.float64))
    assert ch.unread(rid) == 2 and ch.readers[rid].drops == 3 and ch.drops == 3
    assert _vals(ch, rid, 3) == [0.0, 1.0, 1.0]   # the third read: nothing queued, the last again
    assert ch.readers[rid].stale


def test_drop_oldest_keeps_newest_n() -> None:
    ch = Channel("/d", ChannelPolicy.DROP_OLDEST, depth=2)
    rid = ch.add_reader("t.x")
    for k in range(5):
        ch.write(k, np.array([k], np.float64))
    assert ch.readers[rid].drops == 3
    assert _vals(ch, rid, 2) == [3.0, 4.0]
    assert ch.unread(rid) == 0


def test_readers_have_independent_cursors() -> None:
    ch = Channel("/m", "queue", depth=4)
    a, b = ch.add_reader("a.x"), ch.add_reader("b.x")
    for k in range(3):
        ch.write(k, np.array([k], np.float64))
    assert _vals(ch, a, 3) == [0.0, 1.0, 2.0]
    ch.write(3, np.array([3], np.float64))
    assert _vals(ch, b, 4) == [0.0, 1.0, 2.0, 3.0]
    assert _vals(ch, a, 1) == [3.0]
    assert ch.drops == 0


def test_steady_state_allocates_nothing_and_pinned_slots_are_never_overwritten() -> None:
    ch = Channel("/s", "drop_oldest", depth=2)
    rid = ch.add_reader("t.x")
    ch.reserve_capacity(8)
    ch.write(0, torch.zeros(16))
    bufs = [s.buf.data_ptr() for s in ch.slots]
    pinned = ch.read(rid)
    for k in range(1, 2000):
        ch.write(k, torch.full((16,), float(k)))
        if k % 3 == 0:
            ch.unpin(ch.read(rid))
    assert float(pinned.data[0]) == 0.0 and pinned.seq == 0    # held by a "job": untouched
    assert [s.buf.data_ptr() for s in ch.slots] == bufs and ch.grows == 0 and len(ch.slots) == 8
    ch.unpin(pinned)


def test_spec_bounds_size_the_slots_and_smaller_messages_are_contiguous_views() -> None:
    spec = TensorSpec("pts", ("N<=100", 4), "float32")
    ch = Channel("/pts", spec=spec)
    rid = ch.add_reader("t.pts")
    for n in (10, 100, 37):
        x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
        ch.write(n, x)
        s = ch.read(rid)
        assert s.data.shape == (n, 4) and s.data.flags.c_contiguous and np.array_equal(s.data, x)
        spec.check(s.data)
        ch.unpin(s)
    assert ch.grows == 0 and all(s.buf.size == 400 for s in ch.slots)
    with pytest.raises(ContractError, match="shape"):
        ch.write(9, np.zeros((101, 4), np.float32))


def test_without_a_spec_the_first_message_sizes_slots_and_a_larger_one_regrows_counted() -> None:
    ch = Channel("/v")
    rid = ch.add_reader("t.v")
    ch.write(0, np.ones(4, np.float32))
    ch.write(1, np.arange(10, dtype=np.float32))
    s = ch.read(rid)
    assert ch.grows == 1 and np.array_equal(s.data, np.arange(10, dtype=np.float32))
    with pytest.raises(ContractError, match="dtype"):
        ch.write(2, np.ones(4, np.float64))


def test_reserve_fill_commit_is_invisible_until_commit() -> None:
    ch = Channel("/o")
    rid = ch.add_reader("t.o")
    ch.write(0, torch.zeros(2))
    slot = ch.fill(ch.reserve(), torch.ones(2))
    s = ch.read(rid)
    assert float(s.data[0]) == 0.0        # the reserved message is not visible yet
    ch.unpin(s)
    assert ch.commit(slot, 50) == 1
    s = ch.read(rid)
    assert (float(s.data[0]), s.t_ns) == (1.0, 50)
    ch.unpin(s)
    ch.cancel(ch.fill(ch.reserve(), torch.ones(2)))   # cancelled: back to the free list
    assert sum(x.refs == 0 for x in ch.slots) == len(ch.slots) - 1


@pytest.mark.parametrize("policy", ["latest", "queue", "drop_oldest"])
def test_peek_shows_what_read_would_return_and_consumes_nothing(policy: str) -> None:
    ch = Channel("/p", policy, depth=2)
    rid = ch.add_reader("t.x")
    assert ch.peek(rid) is None
    for k in range(3):
        ch.write(k, np.array([k], np.float64))
    for _ in range(4):   # a read after each peek: the peek saw exactly that slot, and changed nothing
        unread, reads = ch.unread(rid), ch.readers[rid].reads
        seen = ch.peek(rid)
        assert ch.unread(rid) == unread and ch.readers[rid].reads == reads
        got = ch.read(rid)
        assert got is seen
        ch.unpin(got)


def test_adopt_keeps_the_pushed_tensor_and_falls_back_to_a_copy_where_it_must() -> None:
    ch = Channel("/img", spec=TensorSpec("img", ("N<=64",), "float32"))
    rid = ch.add_reader("t.img")
    x = torch.arange(8, dtype=torch.float32)
    ch.adopt(0, x)
    s = ch.read(rid)
    assert s.data.data_ptr() == x.data_ptr() and all(slot.buf is None for slot in ch.slots)   # no copy, no buffers
    ch.unpin(s)
    loose = Channel("/v")   # no contract: a strided tensor is accepted, and copied into a buffer of its own
    lid = loose.add_reader("t.v")
    loose.adopt(0, torch.zeros(16))
    strided = torch.arange(32, dtype=torch.float32)[::2]
    loose.adopt(1, strided)
    s = loose.read(lid)
    assert s.data.data_ptr() != strided.data_ptr() and torch.equal(s.data, strided) and s.data.is_contiguous()
    for k in range(2, 12):   # adopted and copied slots come round again: each read sees its own message
        ch.adopt(k, torch.full((k,), float(k)))
        s = ch.read(rid)
        assert s.data.shape == (k,) and float(s.data[0]) == k
        ch.unpin(s)
    with pytest.raises(ContractError, match="dtype"):
        ch.adopt(12, torch.zeros(4, dtype=torch.float64))
