"""Speculative execution on small real torch graphs, VirtualClock + declared costs: hits, misses, no interference."""
from __future__ import annotations

from typing import Any, Mapping

import pytest
import torch

from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.safety.speculation import REACT_SPEC_HIT, REACT_SPEC_MISS, Speculate
from rt_runtime.sched import EventKind, RecordingSink, Runtime, TaskBinding, declared_cost

MS = 1_000_000
K = EventKind
X = TensorSpec("x", (8,), "float32")
H1 = TensorSpec("h1", (8,), "float32")
H2 = TensorSpec("h2", (8,), "float32")
Y = TensorSpec("y", (8,), "float32")
STEP = 0.5


def graph(name: str = "g") -> Graph:
    """y = (2x + 1) * 3 - 1 in three ops of 1 ms each (declared)."""
    a = Op(f"{name}_scale", lambda x, h: torch.mul(x, 2.0, out=h), (X,), (H1,), cost_us=1000)
    b = Op(f"{name}_shift", lambda h, o: torch.add(h, 1.0, out=o), (H1,), (H2,), cost_us=1000)
    c = Op(f"{name}_out", lambda h, y: torch.sub(h * 3.0, 1.0, out=y), (H2,), (Y,), cost_us=1000)
    return Graph(name, [a, b, c], [X], ["y"])


def counter(basis: Mapping[str, Any], written: Mapping[str, int], release: int) -> list[dict[str, Any]]:
    """The counter keeps advancing by STEP (first), or holds (second)."""
    return [{"x": basis["x"] + STEP}, {"x": basis["x"].clone()}]


def inputs_predictable(k: int) -> torch.Tensor:
    return torch.arange(8, dtype=torch.float32) + STEP * k


def inputs_random(k: int) -> torch.Tensor:
    return torch.randn(8, generator=torch.Generator().manual_seed(1000 + k))


def run(spec: Speculate | None, feed=inputs_predictable, other: bool = False, until_ms: int = 100):
    """Task S (10 ms period, 3 ms of ops) fed on /x every 10 ms; ``other``: a 5 ms task H with 1 ms."""
    b = TaskBinding(Task("S", 10 * MS, 5 * MS), graph("s"), inputs={"x": "/x"}, outputs={"y": "/y"},
                    speculate=spec)
    tasks = [b]
    if other:
        gh = Graph("h", [Op("h_op", lambda x, y: torch.mul(x, -1.0, out=y), (X,), (Y,), cost_us=1000)],
                   [X], ["y"])
        tasks.append(TaskBinding(Task("H", 5 * MS, 2 * MS, deadline_ns=5 * MS), gh, inputs={"x": "/x"},
                                 outputs={"y": "/hy"}))
    sink, out = RecordingSink(), {}
    rt = Runtime(tasks, sink=sink, cost=declared_cost,
                 egress=lambda ch, t, seq, d: out.__setitem__((ch, t // MS), d.clone()))
    for k in range(until_ms // 10 + 1):
        rt.push("/x", k * 10 * MS, feed(k))
    rt.run_until(until_ms * MS)
    return rt, sink, out


def responses(sink: RecordingSink, task: str) -> dict[int, int]:
    rel = {e.job_index: e.t_ns for e in sink.of(K.RELEASE, task)}
    return {e.job_index: e.t_ns - rel[e.job_index] for e in sink.of(K.FINISH, task)}


def test_predictable_inputs_hit_and_response_drops_to_zero() -> None:
    rt0, sink0, out0 = run(None)
    rt1, sink1, out1 = run(Speculate(counter, k=2))
    st = rt1.stats()["S"]
    sp = st["speculation"]
    # Job 0 has no hypothesis; every later job is a hit on the first hypothesis.
    assert st["released"] == 11 and st["missed"] == 0
    assert sp["hits"] == 10 and sp["misses"] == 0
    assert sp["latency_saved_ns"] == 10 * 3 * MS
    assert sp["ops_wasted"] == 10 * 3   # the second hypothesis ("holds") of every hit
    r0, r1 = responses(sink0, "S"), responses(sink1, "S")
    assert all(v == 3 * MS for v in r0.values())
    assert r1[0] == 3 * MS and all(r1[j] == 0 for j in range(1, 11))
    assert len(sink1.events) and sum(1 for e in sink1.of(K.REACTION, "S") if e.a == REACT_SPEC_HIT) == 10
    # LET: the same values, published at the same instants; tolerance 0 keeps the run deterministic.
    assert out0.keys() == out1.keys() and all(torch.equal(out0[k], out1[k]) for k in out0)
    assert rt1.deterministic
    # No speculation: no speculation stats, no spec events.
    assert "speculation" not in rt0.stats()["S"]


def test_other_tasks_response_times_are_identical() -> None:
    _, sink0, out0 = run(None, other=True)
    rt1, sink1, out1 = run(Speculate(counter, k=2), other=True)
    assert responses(sink0, "H") == responses(sink1, "H")
    assert [e for e in sink0.events if e.task == "H"] == [e for e in sink1.events if e.task == "H"]
    assert rt1.stats()["S"]["speculation"]["hits"] >= 9
    assert all(torch.equal(out0[k], out1[k]) for k in out0) and out0.keys() == out1.keys()
    # No speculative op ever spans a release instant: the worker is never busy with one at a release.
    assert rt1.stats()["H"]["missed"] == 0 and rt1.stats()["H"]["preemptions"] == 0


def test_unpredictable_inputs_miss_and_outputs_match() -> None:
    _, _, out0 = run(None, feed=inputs_random)
    rt1, sink1, out1 = run(Speculate(counter, k=2), feed=inputs_random)
    sp = rt1.stats()["S"]["speculation"]
    assert sp["hits"] == 0 and sp["misses"] == 10 and sp["ops_wasted"] == 10 * 2 * 3
    assert sum(1 for e in sink1.of(K.REACTION, "S") if e.a == REACT_SPEC_MISS) == 10
    assert out0.keys() == out1.keys() and all(torch.equal(out0[k], out1[k]) for k in out0)
    assert rt1.deterministic


def test_tolerance_hits_mark_the_run_nondeterministic() -> None:
    def noisy(k: int) -> torch.Tensor:
        return inputs_predictable(k) + 1e-4 * (k % 2)

    rt, _, _ = run(Speculate(counter, k=1, atol=1e-3), feed=noisy)
    sp = rt.stats()["S"]["speculation"]
    assert sp["hits"] == 10 and not rt.deterministic
    rt_exact, _, _ = run(Speculate(counter, k=1, atol=0.0), feed=noisy)
    assert rt_exact.stats()["S"]["speculation"]["hits"] == 0 and rt_exact.deterministic


def test_no_slack_no_speculation() -> None:
    """A task triggered every 1 ms leaves no gap a 1 ms op fits strictly inside: nothing speculative runs."""
    z = TensorSpec("z", (1,), "float32")
    gt = Graph("t", [Op("t_op", lambda a, b: b.copy_(a), (z,), (TensorSpec("w", (1,), "float32"),), cost_us=10)],
               [z], ["w"])
    b = TaskBinding(Task("S", 10 * MS, 5 * MS), graph("s"), inputs={"x": "/x"}, outputs={"y": "/y"},
                    speculate=Speculate(counter))
    t = TaskBinding(Task("T", 1 * MS, MS // 2, trigger="/z"), gt,
                    inputs={"z": "/z"}, outputs={"w": "/w"})
    rt = Runtime([b, t], cost=declared_cost)
    for k in range(51):
        rt.push("/z", k * MS, torch.zeros(1))
        if k % 10 == 0:
            rt.push("/x", k * MS, inputs_predictable(k // 10))
    rt.run_until(50 * MS)
    sp = rt.stats()["S"]["speculation"]
    assert rt.stats()["T"]["released"] == 51
    assert sp["spec_ops"] == 0 and sp["hits"] == 0 and sp["no_hypothesis"] == 5


def test_messages_nobody_is_triggered_by_do_not_end_slack() -> None:
    """Messages on a channel no task is triggered by start nothing: speculation runs across them."""
    b = TaskBinding(Task("S", 10 * MS, 5 * MS), graph("s"), inputs={"x": "/x"}, outputs={"y": "/y"},
                    speculate=Speculate(counter))
    rt = Runtime([b], cost=declared_cost)
    for k in range(51):
        rt.push("/x", k * MS, inputs_predictable(k / 10))   # /x moves every ms; at releases it is on the counter
    rt.run_until(50 * MS)
    sp = rt.stats()["S"]["speculation"]
    assert sp["completed"] >= 4 and sp["hits"] == 0   # built from x between releases: +STEP misses


def test_fragmented_slack_abandons_and_never_delays_others() -> None:
    """H every 3 ms leaves 2 ms gaps: a 3-op hypothesis never completes; it is abandoned, H is unaffected."""
    gh = Graph("h", [Op("h_op", lambda x, y: torch.mul(x, -1.0, out=y), (X,), (Y,), cost_us=1000)], [X], ["y"])
    res = []
    for spec in (None, Speculate(counter, k=2)):
        s = TaskBinding(Task("S", 10 * MS, 8 * MS), graph("s"), inputs={"x": "/x"}, outputs={"y": "/y"},
                        speculate=spec)
        h = TaskBinding(Task("H", 3 * MS, 2 * MS), gh, inputs={"x": "/x"}, outputs={"y": "/hy"})
        sink = RecordingSink()
        rt = Runtime([s, h], sink=sink, cost=declared_cost)
        for k in range(11):
            rt.push("/x", k * 10 * MS, inputs_predictable(k))
        rt.run_until(100 * MS)
        res.append((rt, sink))
    (_, s0), (rt1, s1) = res
    sp = rt1.stats()["S"]["speculation"]
    assert sp["abandoned"] > 0 and sp["completed"] == 0 and sp["hits"] == 0
    assert sp["ops_wasted"] == sp["spec_ops"]
    assert [e for e in s0.events if e.task == "H"] == [e for e in s1.events if e.task == "H"]
    assert responses(s0, "S") == responses(s1, "S")


def test_let_makes_a_producers_pending_output_the_basis() -> None:
    """A's job finishes before its LET publish: S's next input is known in advance, so 'as known' hits
    exactly, every time, although A's own input (random) is unpredictable."""
    def chain(spec: Speculate | None):
        a = TaskBinding(Task("A", 10 * MS, 2 * MS, offset_ns=2 * MS, deadline_ns=8 * MS),
                        Graph("a", [Op("a_op", lambda x, y: torch.mul(x, 2.0, out=y), (X,), (Y,), cost_us=1000)],
                              [X], ["y"]), inputs={"x": "/x"}, outputs={"y": "/a"})
        s = TaskBinding(Task("S", 10 * MS, 4 * MS, deadline_ns=5 * MS), graph("s"), inputs={"x": "/a"},
                        outputs={"y": "/y"}, speculate=spec)
        sink, out = RecordingSink(), {}
        rt = Runtime([a, s], sink=sink, cost=declared_cost,
                     egress=lambda ch, t, seq, d: out.__setitem__((ch, t // MS), d.clone()))
        rt.push("/a", 0, torch.zeros(8))
        for k in range(11):
            rt.push("/x", k * 10 * MS + MS, inputs_random(k))
        rt.run_until(100 * MS)
        return rt, sink, out

    rt0, sink0, out0 = chain(None)
    rt1, sink1, out1 = chain(Speculate(lambda basis, written, release: [{}], k=1))
    sp = rt1.stats()["S"]["speculation"]
    assert sp["hits"] == 10 and sp["misses"] == 0 and sp["restarts"] == 0   # jobs 1..10 (job 0: no history)
    assert rt1.deterministic
    assert out0.keys() == out1.keys() and all(torch.equal(out0[k], out1[k]) for k in out0)
    ra0, ra1 = responses(sink0, "A"), responses(sink1, "A")   # S no longer runs before A: A is sooner
    assert ra0.keys() == ra1.keys() and all(ra1[j] <= ra0[j] for j in ra0) and ra1[5] < ra0[5]
    r1 = responses(sink1, "S")
    assert all(r1[j] == 0 for j in range(1, 11)) and responses(sink0, "S")[5] == 3 * MS


def test_in_the_calling_thread_on_the_wall_clock_speculation_is_off_and_says_so() -> None:
    from rt_runtime.sched import WallClock

    b = TaskBinding(Task("S", 10 * MS, 5 * MS), graph("s"), inputs={"x": "/x"}, outputs={"y": "/y"},
                    speculate=Speculate(counter))
    with pytest.warns(RuntimeWarning, match=r"\['S'\] will not speculate in the calling thread"):
        rt = Runtime([b], clock=WallClock(), threaded=False)
    try:
        assert "speculation" not in rt.stats()["S"]
    finally:
        rt.close()


def on_worker_threads(b: TaskBinding, period_ms: int, until_ms: int, **kw: Any):
    """``b`` on a threaded runtime in real time, fed predictable /x every period: (stats, outputs, sink)."""
    from rt_runtime.sched import WallClock

    out: dict = {}
    sink = RecordingSink()
    rt = Runtime([b], clock=WallClock(), threaded=True, realtime=False, sink=sink,
                 egress=lambda ch, t, seq, d: out.__setitem__((ch, t // MS), d.clone()), **kw)
    try:
        for k in range(until_ms // period_ms + 1):
            rt.push("/x", k * period_ms * MS, inputs_predictable(k))
        rt.run_until(until_ms * MS)
        return rt.stats()["S"], out, sink
    finally:
        rt.close()


@pytest.mark.wallclock
def test_worker_threads_speculate_in_slack_on_the_wall_clock() -> None:
    """Threaded runtime, real time: the idle worker runs the hypotheses between jobs; exact hits, the
    same outputs as without speculation. 45 ms of slack a job: room for a loaded machine's late wake-ups."""
    runs = [on_worker_threads(TaskBinding(Task("S", 50 * MS, 5 * MS), graph("s"), inputs={"x": "/x"},
                                          outputs={"y": "/y"}, speculate=spec), 50, 1000)
            for spec in (None, Speculate(counter, k=2))]
    (_, out0, _), (st1, out1, _) = runs
    sp = st1["speculation"]
    assert sp["hits"] >= 15 and sp["misses"] == 0 and sp["errors"] == 0, sp
    assert out0.keys() == out1.keys() and len(out0) >= 19 and all(torch.equal(out0[k], out1[k]) for k in out0)


@pytest.mark.wallclock
def test_a_speculative_op_that_hangs_is_reported_as_a_stall() -> None:
    """Worker threads: the watchdog thread watches speculative ops as it watches jobs' ops."""
    import time

    def slow(x: torch.Tensor, y: torch.Tensor) -> None:
        if float(x[0]) < 0:     # only the hypothesis carries a negative value
            time.sleep(0.3)
        torch.mul(x, 2.0, out=y)

    g = Graph("slow", [Op("slow_op", slow, (X,), (Y,), cost_us=100)], [X], ["y"])
    hang = Speculate(lambda basis, written, release: [{"x": torch.full((8,), -1.0)}], k=1)
    b = TaskBinding(Task("S", 100 * MS, 50 * MS), g, inputs={"x": "/x"}, outputs={"y": "/y"}, speculate=hang)
    stats, _, sink = on_worker_threads(b, 100, 350, stall_after_ns=50 * MS)
    stalls = sink.of(K.STALL, "S")
    assert stalls and all(e.job_index == -1 for e in stalls) and stats["stalls"] == len(stalls)
    assert stats["speculation"]["abandoned"] >= 1 and stats["speculation"]["hits"] == 0   # dropped after it returned
