"""Tracing a real runtime: the ring, the trace file and the Perfetto export."""
import json

import pytest
import torch

from rt_runtime import Graph, Op, Task, TensorSpec
from rt_runtime.sched import EventKind, RecordingSink, Runtime, TaskBinding, VirtualClock, declared_cost
from rt_runtime.sched.events import FanoutSink
from rt_runtime.trace import TraceFileError, TraceRing, TraceWriter, load_trace, to_chrome_events, write_perfetto

MS = 1_000_000


def chain(name, n_ops, cost_us):
    specs = [TensorSpec(f"{name}_t{i}", (2,)) for i in range(n_ops + 1)]
    ops = [Op(f"{name}_op{i}", lambda a, b: torch.add(a, 1, out=b), (specs[i],), (specs[i + 1],), cost_us=cost_us)
           for i in range(n_ops)]
    return Graph(name, ops, [specs[0]], [specs[-1].name])


def run_traced(overload=False, sink_extra=None):
    fast = Task("fast", period_ns=10 * MS, wcet_ns=3 * MS, deadline_ns=10 * MS)
    slow = Task("slow", period_ns=20 * MS, wcet_ns=12 * MS, deadline_ns=20 * MS)
    g_fast = chain("fast", 2, 1000 if not overload else 6000)
    g_slow = chain("slow", 4, 2500)
    bindings = [TaskBinding(fast, g_fast, inputs={"fast_t0": "in"}, outputs={"fast_t2": "fast_out"}),
                TaskBinding(slow, g_slow, inputs={"slow_t0": "in"}, outputs={"slow_t4": "slow_out"})]
    ring = TraceRing(1 << 14)
    rec = RecordingSink()
    rt = Runtime(bindings, policy="rm", clock=VirtualClock(), cost=declared_cost, sink=FanoutSink(ring, rec))
    rt.push("in", 0, torch.zeros(2))
    rt.run_until(100 * MS)
    meta = {"ops": {"fast": [o.name for o in g_fast.ops], "slow": [o.name for o in g_slow.ops]}}
    return ring, rec, meta


def test_ring_holds_exactly_what_the_runtime_emitted():
    ring, rec, _ = run_traced()
    cols = ring.drain()
    assert len(cols) == len(rec.events) > 50
    got = list(zip(cols.kind.tolist(), cols.t_ns.tolist(), [cols.tasks[i] for i in cols.task], cols.job.tolist(),
                   cols.a.tolist(), cols.b.tolist()))
    assert got == [(int(e.kind), e.t_ns, e.task, e.job_index, e.a, e.b) for e in rec.events]
    assert len(ring.drain()) == 0


def test_ring_overflow_keeps_newest_and_counts_lost():
    ring = TraceRing(8)
    for i in range(20):
        ring.emit(EventKind.RELEASE, i, "t", i)
    cols = ring.drain()
    assert cols.t_ns.tolist() == list(range(13, 20)) and ring.lost == 13


def test_trace_file_round_trip_and_bad_files(tmp_path):
    ring, rec, meta = run_traced()
    path = TraceWriter(tmp_path / "run.rttrace", ring, meta).close()
    cols, header = load_trace(path)
    assert len(cols) == len(rec.events) and header["ops"] == meta["ops"] and header["lost_events"] == 0
    with pytest.raises(TraceFileError, match="no such trace file"):
        load_trace(tmp_path / "missing.rttrace")
    bad = tmp_path / "bad.rttrace"
    bad.write_bytes(path.read_bytes()[:100])
    with pytest.raises(TraceFileError, match="bad.rttrace"):
        load_trace(bad)


def test_perfetto_export_nests_ops_in_jobs_and_marks_misses(tmp_path):
    ring, rec, meta = run_traced(overload=True)
    cols = ring.drain()
    events = to_chrome_events(cols, meta)
    # Every worker track's B/E events balance and nest: ops inside jobs.
    stack: dict[int, list[str]] = {}
    for e in events:
        if e["ph"] == "B":
            s = stack.setdefault(e["tid"], [])
            if e.get("cat") == "op":
                assert s and s[-1] == "job", "an op slice outside a job slice"
            s.append(e.get("cat"))
        elif e["ph"] == "E":
            assert stack[e["tid"]], "an end without a begin"
            stack[e["tid"]].pop()
    assert all(not s for s in stack.values())
    # Under overload the slow task never gets the processor; in the nominal run every op shows.
    nominal = to_chrome_events(run_traced()[0].drain(), meta)
    op_names = {e["name"] for e in nominal if e.get("cat") == "op" and e["ph"] == "B"}
    assert op_names == {"fast_op0", "fast_op1", "slow_op0", "slow_op1", "slow_op2", "slow_op3"}
    misses = [e for e in events if e["ph"] == "i" and e["name"].startswith("deadline miss")]
    assert len(misses) == len(rec.of(EventKind.MISS)) > 0
    out = write_perfetto(tmp_path / "trace.json", cols, meta)
    assert json.loads(out.read_text())["traceEvents"]
