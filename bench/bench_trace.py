"""Cost of recording one trace event into the preallocated ring (target: median <= 1 us).

Anchor, in the same run: the same call into the scheduler's NullSink (a Python method call that
does nothing), and a RecordingSink that appends a tuple to a list (what a naive tracer costs).
"""
from __future__ import annotations

import statistics
import time

from rt_runtime.sched.events import EventKind, NullSink, RecordingSink
from rt_runtime.trace import TraceRing

REPEATS, N = 9, 100_000


def per_event_ns(sink) -> float:
    """Median over REPEATS of the mean ns per emit over N emits."""
    emit = sink.emit
    kind = int(EventKind.OP_END)
    runs = []
    for _ in range(REPEATS):
        t0 = time.perf_counter_ns()
        for i in range(N):
            emit(kind, 1_700_000_000_000_000_000 + i, "perception", i, 3, 1)
        runs.append((time.perf_counter_ns() - t0) / N)
        if isinstance(sink, RecordingSink):
            sink.events.clear()
        elif isinstance(sink, TraceRing):
            sink.drain()
    return statistics.median(runs)


def main() -> None:
    rows = [("NullSink (call floor)", per_event_ns(NullSink())),
            ("TraceRing (preallocated)", per_event_ns(TraceRing(1 << 20))),
            ("RecordingSink (list append)", per_event_ns(RecordingSink()))]
    floor = rows[0][1]
    print(f"{'sink':<30} {'ns/event':>9} {'over floor':>11}")
    for name, ns in rows:
        print(f"{name:<30} {ns:>9.0f} {ns - floor:>11.0f}")
    ring = TraceRing(1 << 20)
    for i in range(1 << 19):
        ring.emit(5, i, "perception", i, 1, 0)
    t0 = time.perf_counter_ns()
    cols = ring.drain()
    print(f"drain of {len(cols)} events: {(time.perf_counter_ns() - t0) / 1e6:.1f} ms (off the hot path)")
    print(f"(median of {REPEATS} runs of {N} events)")


if __name__ == "__main__":
    main()
