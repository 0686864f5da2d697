"""Time redundancy on small real torch graphs: compare, vote, fallback, budgets, every bit flip caught."""
from __future__ import annotations

import pytest
import torch

from rt_runtime.config import ConfigError
from rt_runtime.config.taskset import parse_taskset
from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.safety.compare import outputs_equal, tensors_equal
from rt_runtime.faults.inject import Injection, Injector, flip_bit
from rt_runtime.safety.redundancy import Redundant, RedundantExecutor
from rt_runtime.config.safety_keys import parse_redundancy
from rt_runtime.safety.spec import RedundancySpec
from rt_runtime.sched import EventKind, RecordingSink, Runtime, TaskBinding, declared_cost
from rt_runtime.sched.events import COMPARE_MATCH, COMPARE_NO_MAJORITY, COMPARE_VOTED

MS = 1_000_000
X = TensorSpec("x", (8,), "float32")
H = TensorSpec("h", (8,), "float32")
Y = TensorSpec("y", (8,), "float32")
N = TensorSpec("n", (1,), "int32")


def graph() -> Graph:
    """y = 2x + 1 in two ops (1 ms each, declared), plus a count output."""
    a = Op("scale", lambda x, h: torch.mul(x, 2.0, out=h), (X,), (H,), cost_us=1000)
    b = Op("shift", lambda h, y, n: (torch.add(h, 1.0, out=y), n.fill_(8)), (H,), (Y, N), cost_us=1000)
    return Graph("g", [a, b], [X], ["y", "n"])


def stop() -> Graph:
    """The fallback: a constant output (the minimal-risk stop's stand-in)."""
    return Graph("stop", [Op("stop", lambda x, y, n: (y.fill_(-1.0), n.fill_(0)), (X,), (Y, N), cost_us=500)],
                 [X], ["y", "n"])


def run(spec: RedundancySpec, injections: list[Injection], until_ms: int = 60, fallback: bool = True,
        wcet_ms: float = 6):
    """One redundant task every 10 ms on x = 0..7; returns (runtime, sink, published y by time)."""
    inj = Injector()
    b = TaskBinding(Task("T", 10 * MS, int(wcet_ms * MS)), inj.wrap("T", graph()), inputs={"x": "/x"},
                    outputs={"y": "/y", "n": "/n"}, fallback=inj.wrap("T", stop(), primary=False) if fallback else None,
                    on_overrun="none", executor=Redundant(spec))
    sink, out = RecordingSink(), {}
    rt = Runtime([b], sink=sink, cost=inj.cost(declared_cost),
                 egress=lambda ch, t, seq, d: out.__setitem__(t // MS, d.clone()) if ch == "/y" else None)
    inj.arm(injections, rt.clock.now, lambda task: 5 * MS)
    rt.push("/x", 0, torch.arange(8, dtype=torch.float32))
    rt.run_until(until_ms * MS)
    return rt, sink, out


GOOD = torch.arange(8, dtype=torch.float32) * 2 + 1


def test_spec_parsing_and_budget_factors() -> None:
    assert parse_redundancy("dual") == RedundancySpec("dual") and parse_redundancy(None) is None
    assert parse_redundancy(3).mode == "triple" and parse_redundancy(2).copies == 2
    s = parse_redundancy({"mode": "dual", "atol": 1e-5})
    assert (s.compare, s.atol, s.budget_factor, s.worst_case_factor) == ("tolerance", 1e-5, 2, 3)
    assert parse_redundancy({"mode": "dual", "budget": "worst_case"}).budget_factor == 3
    assert parse_redundancy("triple").budget_factor == 3
    for bad, msg in (("quad", "mode"), ({"mode": "dual", "compare": "exact", "atol": 1.0}, "exact"),
                     ({"mode": "dual", "rtol": -1}, "rtol"), ({"mode": "dual", "votes": 2}, "unknown"),
                     (5, "expected")):
        with pytest.raises(ValueError, match=msg):
            parse_redundancy(bad)


def test_check_multiplies_the_budget_of_redundant_tasks() -> None:
    doc = {"policy": "edf", "tasks": [
        {"name": "a", "period": "10ms", "wcet": "2ms", "redundancy": "dual"},
        {"name": "b", "period": "10ms", "wcet": "1ms", "redundancy": {"mode": "dual", "budget": "worst_case"}},
        {"name": "c", "period": "10ms", "wcet": "1ms", "redundancy": "triple"},
        {"name": "d", "period": "10ms", "wcet": "1ms"}]}
    _, tasks, _ = parse_taskset(doc, "t.yaml")
    assert [t.wcet_ns // MS for t in tasks] == [4, 3, 3, 1]
    doc["tasks"][0]["redundancy"] = "quad"
    with pytest.raises(ConfigError, match="task 'a': redundancy: mode"):
        parse_taskset(doc, "t.yaml")


def test_exact_comparison_sees_every_bit_and_tolerance_only_floats() -> None:
    a = torch.tensor([1.0, float("nan"), -0.0])
    exact, loose = RedundancySpec(), RedundancySpec("dual", "tolerance", 1e-3, 0.0)
    assert tensors_equal(a, a.clone(), exact)    # the same NaN is equal bit for bit
    for bit in range(a.numel() * 32):
        b = a.clone()
        flip_bit(b, (bit // 32 + 0.5) / a.numel(), bit % 32)
        assert not tensors_equal(a, b, exact), bit
    assert tensors_equal(a, a + 1e-4, loose) and not tensors_equal(a, a + 1e-2, loose)
    i = torch.tensor([1, 2], dtype=torch.int32)
    assert tensors_equal(i, i.clone(), loose) and not tensors_equal(i, i + 1, loose)   # ints: always exact
    assert outputs_equal({"y": a}, {"y": a.clone()}, exact) and not outputs_equal({"y": a}, {"z": a}, exact)


def test_copies_have_their_own_arenas_and_agree_nominally() -> None:
    rt, sink, out = run(RedundancySpec(), [])
    ex = rt.tasks["T"].executors[0]
    assert isinstance(ex, RedundantExecutor)
    ptrs = {c.outputs["y"].data_ptr() for c in ex.copies}
    assert len(ptrs) == 3 and ex.arena_bytes == sum(e.arena_bytes for e in ex.executors)
    cmp = sink.of(EventKind.COMPARE, "T")
    assert [e.a for e in cmp] == [COMPARE_MATCH] * 6 and all(e.b == 2 for e in cmp)
    # Two copies of two 1 ms ops each: 4 ms of virtual execution per job, compared at its end.
    assert [e.t_ns for e in cmp] == [k * 10 * MS + 4 * MS for k in range(6)]
    assert all(torch.equal(v, GOOD) for v in out.values()) and sorted(out) == [10, 20, 30, 40, 50, 60]
    assert rt.stats()["T"]["max_exec_ns"] == 4 * MS and not rt.errors


def test_a_bit_flip_in_one_copy_is_outvoted_and_the_clean_output_published() -> None:
    flips = [Injection(k, "bitflip", (10 * k + 8) * MS, "T", 1, 0, element=k / 5, bit=7 * k + 3) for k in range(5)]
    rt, sink, out = run(RedundancySpec(), flips)
    verdicts = [(e.job_index, e.a, e.b) for e in sink.of(EventKind.COMPARE, "T")]
    assert verdicts[0] == (0, COMPARE_MATCH, 2)
    assert verdicts[1:] == [(k, COMPARE_VOTED, 3) for k in range(1, 6)]
    assert all(torch.equal(v, GOOD) for v in out.values())
    assert rt.stats()["T"]["max_exec_ns"] == 6 * MS   # the vote's third copy: 3x the single run


def test_every_single_bit_flip_of_a_redundant_tasks_outputs_is_detected() -> None:
    # All 32 bits of every element of y, and of the int32 count: one flip per job.
    targets = [(0, e, bit) for e in range(8) for bit in range(32)] + [(1, 0, bit) for bit in range(32)]
    flips = [Injection(k, "bitflip", (10 * k + 8) * MS, "T", 1, tensor, (e + 0.5) / (8 if tensor == 0 else 1), bit)
             for k, (tensor, e, bit) in enumerate(targets)]
    rt, sink, out = run(RedundancySpec(), flips, until_ms=10 * len(targets) + 20)
    verdicts = {e.job_index: e.a for e in sink.of(EventKind.COMPARE, "T")}
    assert all(verdicts[k] == COMPARE_VOTED for k in range(1, len(targets) + 1))
    assert all(torch.equal(v, GOOD) for v in out.values())


def test_triple_votes_every_job_and_masks_a_faulty_copy() -> None:
    rt, sink, out = run(RedundancySpec("triple"), [Injection(0, "bitflip", 21 * MS, "T", 0, 0, 0.3, 30)])
    assert [e.a for e in sink.of(EventKind.COMPARE, "T")] == [0, 0, 1, 0, 0, 0]
    assert all(e.b == 3 for e in sink.of(EventKind.COMPARE, "T"))
    assert all(torch.equal(v, GOOD) for v in out.values())


def test_no_majority_publishes_the_fallback_in_the_same_job() -> None:
    boom = [Injection(k, "exception", 25 * MS, "T", 0) for k in range(3)]   # every copy of job 3 raises
    rt, sink, out = run(RedundancySpec(), boom)
    assert [e.a for e in sink.of(EventKind.COMPARE, "T")][2:4] == [COMPARE_MATCH, COMPARE_NO_MAJORITY]
    assert torch.equal(out[40], torch.full((8,), -1.0))   # job 3 (r=30 ms) published at its deadline
    assert torch.equal(out[50], GOOD) and not rt.errors
    assert rt.tasks["T"].executors[0].stats()["fallback_outputs"] == 1


def test_no_majority_without_fallback_fails_the_job() -> None:
    boom = [Injection(k, "exception", 25 * MS, "T", 0) for k in range(3)]
    rt, sink, out = run(RedundancySpec(), boom, fallback=False)
    assert len(rt.errors) == 1 and "no two of" in str(rt.errors[0][2])
    assert 40 not in out and rt.stats()["T"]["aborted"] == 1


def test_exact_comparison_refuses_nondeterministic_ops() -> None:
    op = Op("rand", lambda x, y: y.copy_(x), (X,), (Y,), deterministic=False)
    with pytest.raises(ValueError, match="deterministic"):
        RedundantExecutor(Graph("r", [op], [X], ["y"]), RedundancySpec())
    RedundantExecutor(Graph("r", [op], [X], ["y"]), RedundancySpec("dual", "tolerance", 1e-6))
