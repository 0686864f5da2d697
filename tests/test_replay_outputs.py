"""The replay's output collector: encoding on its writer thread keeps the order and the digest, and a
writer error reaches the driver (replay/outputs.py)."""
from __future__ import annotations

import threading

import pytest

from rt_runtime.io.egress import diagnostics
from rt_runtime.replay.outputs import OutputCollector

STATS = {"planning": {"released": 3, "missed": 0}, "lidar_objects": {"released": 2, "missed": 1}}


def run(background: bool, fail_at: int | None = None) -> tuple[list[tuple[str, int]], str]:
    seen: list[tuple[str, int]] = []

    def sink(topic: str, t_ns: int, cdr: bytes) -> None:
        if fail_at is not None and len(seen) == fail_at:
            raise OSError("disk full")
        seen.append((topic, t_ns))
    c = OutputCollector([], "map", 0, sink=sink, background=background)
    try:
        for k in range(60):
            c.emit(f"/diag{k % 3}", k * 1_000_000, diagnostics({**STATS, "n": {"released": k}}, k))
            if k % 7 == 6:   # written once their instants are flushed, in time order
                c.flush(k * 1_000_000)
        c.flush(60 * 1_000_000)
        c.drain()
    finally:
        c.close()
    return seen, c.digest.hexdigest()


def test_the_writer_thread_writes_in_hand_over_order_with_the_same_digest() -> None:
    before = threading.active_count()
    assert run(True) == run(False) and len(run(True)[0]) == 60
    assert threading.active_count() == before   # closed: no writer thread left behind


def test_a_writer_error_reaches_the_driver() -> None:
    with pytest.raises(OSError, match="disk full"):
        run(True, fail_at=10)
