"""Run-time chains: one LET interval for a chain of tasks (core/chain.py, sched/chains.py, docs/CYCLE.md)."""
from __future__ import annotations

import pytest
import torch
import yaml

from rt_runtime.analysis import analyze_taskset
from rt_runtime.analysis.trace_chains import chain_times
from rt_runtime.analysis.trace_jobs import build
from rt_runtime.cli import main
from rt_runtime.config import ConfigError
from rt_runtime.config.stack import build_bindings, parse_stack, run_chains
from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.core.chain import Chain, apply_chains, hop_deadlines
from rt_runtime.core.task import TaskError
from rt_runtime.sched import EventKind, RecordingSink, Runtime, TaskBinding, VirtualClock
from rt_runtime.sched.budget import BudgetCost
from rt_runtime.trace import TraceRing

MS = 1_000_000
X, Y = TensorSpec("x", (1,), "float32"), TensorSpec("y", (1,), "float32")
A_, B_ = TensorSpec("a", (1,), "float32"), TensorSpec("b", (1,), "float32")


def unary(name: str, fn) -> Graph:
    return Graph(name, [Op(name, lambda x, y: y.copy_(fn(x)), (X,), (Y,))], [X], ["y"])


def combine(name: str) -> Graph:
    """y = b + a: reads two earlier members of the chain."""
    return Graph(name, [Op(name, lambda a, b, y: torch.add(b, a, out=y), (A_, B_), (Y,))], [A_, B_], ["y"])


class Boom:
    """An op that raises on the jobs named."""

    def __init__(self, jobs: set[int]) -> None:
        self.jobs, self.n = jobs, -1

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.n += 1
        if self.n in self.jobs:
            raise ValueError("boom")
        return x + 1


def chain_runtime(deadline_ms: int = 20, policy: str = "edf", boom: set[int] = frozenset(), extra=(),
                  c_kw: dict | None = None, slow_a: dict[int, int] | None = None):
    """A (on /in) -> B -> C, chain deadline ``deadline_ms``; budgets 2, 3, 1 ms (A's job j: ``slow_a[j]`` ms);
    D reads /c every 100 ms; ``c_kw``: more of C's binding (a fallback, its reaction)."""
    tasks = [
        TaskBinding(Task("A", 100 * MS, 2 * MS, trigger="/in", priority=1), unary("a", Boom(set(boom))),
                    inputs={"x": "/in"}, outputs={"y": "/a"}),
        TaskBinding(Task("B", 100 * MS, 3 * MS, priority=2), unary("b", lambda a: a * 2),
                    inputs={"x": "/a"}, outputs={"y": "/b"}),
        TaskBinding(Task("C", 100 * MS, 1 * MS, priority=3), combine("c"),
                    inputs={"a": "/a", "b": "/b"}, outputs={"y": "/c"}, **(c_kw or {})),
        TaskBinding(Task("D", 100 * MS, 1 * MS, deadline_ns=2 * MS, offset_ns=20 * MS, priority=4), unary("d", lambda c: c),
                    inputs={"x": "/c"}, outputs={"y": "/d"}),
        *extra]
    sink, out = RecordingSink(), []
    budget = BudgetCost(tasks)

    def cost(task: str, job: int, i: int, op: Op, measured: int) -> int:
        if task == "A" and job in (slow_a or {}):
            return slow_a[job] * MS
        return budget(task, job, i, op, measured)
    rt = Runtime(tasks, policy=policy, clock=VirtualClock(), cost=cost, sink=sink,
                 egress=lambda ch, t, seq, d: out.append((ch, t // MS, float(d[0]))),
                 chains=[Chain("abc", ("A", "B", "C"), deadline_ms * MS)])
    for k in range(3):
        rt.push("/in", k * 100 * MS, torch.full((1,), float(10 * k)))
    return rt, sink, out


def test_members_run_on_precedence_and_publish_together_at_the_chain_deadline() -> None:
    rt, sink, out = chain_runtime()
    rt.run_until(250 * MS)
    rel = {(e.task, e.job_index): (e.t_ns // MS, e.b) for e in sink.of(EventKind.RELEASE) if e.task in "ABC"}
    assert [rel[(n, 1)] for n in "ABC"] == [(100, 1), (102, 2), (105, 2)]   # released the moment the one before ends
    pub = {(ch, t): v for ch, t, v in out}
    for k, x in enumerate((0.0, 10.0, 20.0)):
        r = 100 * k
        a, b = x + 1, (x + 1) * 2
        assert (pub[("/a", r + 20)], pub[("/b", r + 20)], pub[("/c", r + 20)]) == (a, b, a + b)   # one instance's data
        assert pub[("/d", r + 22)] == a + b   # D at r + 20 sees the chain's outputs: publish before release
    assert not any(t % 100 != 20 for ch, t, _ in out if ch in ("/a", "/b", "/c"))
    assert rt.deterministic and all(rt.stats()[n]["missed"] == 0 for n in "ABCD")
    assert [e.a for e in sink.of(EventKind.CHAIN, "C")] == [0, 1, 2]   # its predecessor's job, for the analysis


def test_a_member_still_waiting_at_the_chain_deadline_misses_and_never_runs() -> None:
    """Under fixed priorities a more urgent 30 ms task released with the chain holds it past its 20 ms."""
    hog = TaskBinding(Task("H", 100 * MS, 30 * MS, priority=0), unary("h", lambda x: x), inputs={"x": "/in"},
                      outputs={"y": "/h"})
    rt, sink, _ = chain_runtime(policy="fp", extra=[hog])
    rt.run_until(90 * MS)
    misses = {e.task: e.a for e in sink.of(EventKind.MISS)}
    assert misses == {"A": -1, "B": -1, "C": -1}   # none had started by 20 ms (A waited in the ready queue)
    st = rt.stats()
    # Released with their instance at r (they snapshotted their inputs there), never queued, never started.
    assert st["B"]["released"] == 1 and st["C"]["released"] == 1
    assert st["B"]["started"] == 0 and st["C"]["started"] == 0
    assert not sink.of(EventKind.PUBLISH, "C")


def test_a_degraded_member_whose_fallback_reads_no_predecessor_does_not_wait_for_them() -> None:
    """A runs 25 ms in instances 0 and 1: C misses while waiting and degrades; its fallback (a fixed stop,
    reading nothing) is reserved: released at once, on its own, ahead of A's running job (at A's op
    boundary), and published on time, not starved behind its chain (docs/SAFETY.md, "Degraded mode")."""
    stop = Graph("stop", [Op("stop", lambda y: y.fill_(-1.0), (), (Y,))], [], ["y"])
    rt, sink, out = chain_runtime(c_kw={"fallback": stop, "on_miss": "degrade", "recover_after": 1},
                                  slow_a={0: 25, 1: 25})
    rt.run_until(250 * MS)
    rel = [(e.job_index, e.t_ns // MS, e.b) for e in sink.of(EventKind.RELEASE) if e.task == "C"]
    assert rel == [(1, 20, 0), (3, 120, 0), (4, 205, 2)]   # at each degrade on its own; then in its chain again
    assert [(e.job_index, e.t_ns // MS) for e in sink.of(EventKind.START, "C")] == [(1, 25), (3, 125), (4, 205)]
    # Each fallback on time at its own deadline, and that clean job switches C back (recover_after 1).
    assert [(t, v) for ch, t, v in out if ch == "/c"] == [(40, -1.0), (140, -1.0), (220, 63.0)]
    assert (rt.stats()["C"]["recovered"], rt.stats()["C"]["mode"]) == (2, "primary")
    assert [e.job_index for e in sink.of(EventKind.ABORT, "C")] == [0, 2]   # only the primary jobs that never ran


def test_a_failed_member_hands_over_the_last_published_value() -> None:
    rt, sink, out = chain_runtime(boom={1})   # A's job 1 raises
    rt.run_until(250 * MS)
    pub = {(ch, t): v for ch, t, v in out}
    assert ("/a", 120) not in pub                   # A's failed job publishes nothing
    assert pub[("/b", 120)] == 2.0 and pub[("/c", 120)] == 3.0   # B and C ran on A's job 0 output, stale
    assert pub[("/c", 220)] == 21.0 + 42.0
    assert rt.stats()["A"]["errors"] == 1 and rt.stats()["B"]["released"] == 3


def test_the_trace_measures_the_chain_as_one_interval() -> None:
    ring = TraceRing(1 << 12)
    tasks = chain_runtime()[0]   # warm the imports; the run below traces
    del tasks
    rt, _, _ = chain_runtime()
    rt.sched.sink, rt.sched.tr = ring, True
    rt.run_until(250 * MS)
    times = chain_times(build(ring.drain(), {}), "abc", ("A", "B", "C"))
    assert list(times.data_age_ns // MS) == [20, 20, 20] and list(times.reaction_ns // MS) == [20, 20, 20]


def test_deadline_decomposition_and_analysis() -> None:
    assert hop_deadlines([2, 3, 1], 18) == [6, 9, 3] and sum(hop_deadlines([1, 1, 1], 10)) == 10
    tasks = [Task("A", 100 * MS, 2 * MS, trigger="/in"), Task("B", 50 * MS, 3 * MS), Task("C", 70 * MS, 1 * MS)]
    edf = {t.name: t for t in apply_chains(tasks, [Chain("abc", ("A", "B", "C"), 18 * MS)], "edf")}
    assert [(edf[n].period_ns, edf[n].deadline_ns, edf[n].jitter_ns) for n in "ABC"] == [(100 * MS, 18 * MS, 0)] * 3
    fp = {t.name: t for t in apply_chains(tasks, [Chain("abc", ("A", "B", "C"), 18 * MS)], "fp")}
    assert [(fp[n].deadline_ns, fp[n].jitter_ns) for n in "ABC"] == [(6 * MS, 0), (15 * MS, 6 * MS), (18 * MS, 15 * MS)]
    rep = analyze_taskset(tasks, "edf", [Chain("abc", ("A", "B", "C"), 18 * MS)])
    b = rep.chains[0]
    assert rep.schedulable and (b.let_data_age_ns, b.let_reaction_ns) == (18 * MS, 18 * MS)
    assert not analyze_taskset(tasks, "edf", [Chain("abc", ("A", "B", "C"), 5 * MS)]).schedulable   # 6 ms of budgets
    with pytest.raises(TaskError, match="longer than its head's minimum inter-arrival"):
        apply_chains(tasks, [Chain("abc", ("A", "B", "C"), 150 * MS)])


def stack_doc() -> dict:
    return yaml.safe_load(open("config/stack.yaml"))


@pytest.mark.parametrize("chain, message", [
    ({"deadline": "1s"}, "longer than its head's minimum inter-arrival (90 ms)"),
    ({"deadline": "90"}, "chain 'fusion_to_plan': deadline"),
    ({"deadline": "50ms", "tasks": ["planning", "planning"]}, "'planning' appears twice"),
    ({"deadline": "50ms", "tasks": ["planning"]}, "two or more distinct tasks"),
])
def test_bad_chains_in_a_config_are_one_line(chain: dict, message: str) -> None:
    doc = stack_doc()
    doc["chains"][1].update(chain)
    with pytest.raises(ConfigError, match="stack.yaml: ") as e:
        parse_stack(doc, "stack.yaml")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_speculating_member_leaves_its_chain(capsys) -> None:
    cfg = parse_stack(stack_doc(), "stack.yaml")
    bindings, _ = build_bindings(cfg, speculate=True)
    chains, notes = run_chains(cfg, bindings)
    assert [c.tasks for c in chains] == [("fusion_tracking", "prediction")]
    assert notes == ["task 'planning' speculates, so it runs on its own period, outside chain 'fusion_to_plan' "
                     "(the chain keeps ['fusion_tracking', 'prediction'])"]


def test_check_bounds_the_reference_chain(capsys) -> None:
    assert main(["check", "config/stack.yaml"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("lidar_to_plan"))
    # LiDAR objects' 45 ms, then fusion -> prediction -> planning as one 75 ms interval, released by its publish
    assert line.split()[-2:] == ["120.000", "120.000"] and "chain-LET" in out


def test_a_periodic_member_runs_on_its_own_when_its_chain_falls_silent() -> None:
    """No message after the third: B and C (periodic tasks of their own, 100 ms) are released on their own
    1.5 periods after the chain last opened, reading the channels; A (triggered) does not run."""
    rt, sink, out = chain_runtime()
    rt.run_until(700 * MS)
    rel = [(e.t_ns // MS, e.b) for e in sink.of(EventKind.RELEASE, "C")]
    assert rel == [(5, 2), (105, 2), (205, 2), (350, 0), (500, 0), (650, 0)]   # 1.5 periods after the last open
    assert rt.stats()["A"]["released"] == 3 and rt.stats()["C"]["missed"] == 0
    assert [v for ch, t, v in out if ch == "/c" and t > 300] == [63.0] * 3   # the last published /a and /b


def test_ops_read_the_metadata_of_what_they_read() -> None:
    """``x.meta`` beside ``x``: [t_ns, seq, age_ns, stale, stamp_ns] of the message the job read, with no
    binding of its own; the stamp follows the data through a chain and a downstream task."""
    from rt_runtime.sched.meta import meta_spec

    seen = []
    x, out = TensorSpec("x", (1,), "float32"), TensorSpec("y", (1,), "float32")
    g = Graph("m", [Op("m", lambda v, m, y: (seen.append(m.tolist()), y.copy_(v))[1], (x, meta_spec("x")), (out,))],
              [x, meta_spec("x")], ["y"])
    b = TaskBinding(Task("M", 10 * MS, 1 * MS), g, inputs={"x": "/x"}, outputs={"y": "/y"})
    rt = Runtime([b], clock=VirtualClock(), cost=BudgetCost([b]))
    rt.push("/x", 3 * MS, torch.zeros(1), stamp_ns=1 * MS)   # a sensor message stamped 2 ms before it arrived
    rt.push("/x", 12 * MS, torch.ones(1))                     # no header: stamped at its push
    rt.run_until(35 * MS)
    # Released at 10 (reads the 3 ms message, seq 0), 20 (the 12 ms one, seq 1), 30 (nothing new: stale).
    assert seen == [[3 * MS, 0, 7 * MS, 0, 1 * MS], [12 * MS, 1, 8 * MS, 0, 12 * MS], [12 * MS, 1, 18 * MS, 1, 12 * MS]]
    # Inside a chain, a handed-over input is stamped at the hand-over, not yet published (seq -1).
    # Downstream: C (periodic, 30 ms) reads /b; D (triggered by /c) reads /c.
    seen_c, seen_d = [], []
    gc = Graph("c", [Op("c", lambda v, m, y: (seen_c.append(m.tolist()), y.copy_(v))[1], (x, meta_spec("x")),
                        (out,))], [x, meta_spec("x")], ["y"])
    gd = Graph("d", [Op("d", lambda v, m, y: (seen_d.append(m.tolist()), y.copy_(v))[1], (x, meta_spec("x")),
                        (out,))], [x, meta_spec("x")], ["y"])
    tasks = [TaskBinding(Task("A", 100 * MS, 2 * MS, trigger="/in"), unary("a", lambda v: v + 1),
                         inputs={"x": "/in"}, outputs={"y": "/a"}),
             TaskBinding(Task("B", 100 * MS, 3 * MS), g, inputs={"x": "/a"}, outputs={"y": "/b"}),
             TaskBinding(Task("C", 100 * MS, 1 * MS, offset_ns=30 * MS), gc, inputs={"x": "/b"}, outputs={"y": "/c"}),
             TaskBinding(Task("D", 100 * MS, 1 * MS, trigger="/c"), gd, inputs={"x": "/c"}, outputs={"y": "/d"})]
    seen.clear()
    rt = Runtime(tasks, clock=VirtualClock(), cost=BudgetCost(tasks), chains=[Chain("ab", ("A", "B"), 20 * MS)])
    rt.push("/in", 5 * MS, torch.zeros(1), stamp_ns=2 * MS)
    rt.run_until(150 * MS)
    assert seen == [[7 * MS, -1, 0, 0, 2 * MS]]   # the head's stamp: what released A
    assert seen_c[0] == [25 * MS, 0, 5 * MS, 0, 2 * MS]   # B's output, published with the chain at 25, of 2 ms
    assert seen_d[0] == [130 * MS, 0, 0, 0, 30 * MS]      # C is periodic: its output describes its release
