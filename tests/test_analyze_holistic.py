"""`rt-runtime analyze` reruns `check`'s holistic analysis with the observed times: releases derived from
what triggers each task, the run's worker partition, the release offsets; and sets each chain's measured
latency, reaction, data age and finish beside the bounds `check` gives. Traces from the real runtime."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pytest
import torch

from rt_runtime import Task
from rt_runtime.analysis.chains import Chain
from rt_runtime.analysis.trace_rta import observed_rta
from rt_runtime.analysis.trace_text import format_report
from rt_runtime.cli import main
from rt_runtime.sched import Runtime, TaskBinding, VirtualClock, declared_cost
from rt_runtime.trace import TraceRing, save_trace
from test_analyze import MS, analyze, graph, run_traced

# A producer and the consumer its LET publish releases: each takes 4 ms of a 5 ms deadline. Released
# together (the worst phasing of independent sporadic tasks), 8 ms would be due in 5 ms; in the run the
# consumer is released when the producer publishes, 5 ms later, and nothing ever overlaps.
PIPELINE_YAML = """\
policy: edf
tasks:
  - {name: P, period: "10ms", deadline: "5ms", wcet: "4ms", outputs: {y: P_out}}
  - {name: C, trigger: P_out, min_interarrival: "10ms", deadline: "5ms", wcet: "4ms",
     inputs: {x: P_out}, outputs: {y: C_out}}
chains:
  - {name: pc, tasks: [P, C]}
"""


def run_bindings(tasks: Sequence[tuple[Task, Sequence[tuple[str, int]], str]], until_ms: int, tmp: Path,
                 workers: int = 1) -> tuple[Path, Runtime]:
    """Run (task, ops, input channel) on the real runtime with declared costs; save the trace."""
    bindings, ops, tc = [], {}, {}
    for task, op_costs, src in tasks:
        g = graph(task.name, op_costs)
        bindings.append(TaskBinding(task, g, inputs={f"{task.name}_t0": src},
                                    outputs={g.outputs[0].name: f"{task.name}_out"}))
        ops[task.name] = [o.name for o in g.ops]
        tc[task.name] = {"period_ns": task.period_ns, "deadline_ns": task.deadline, "wcet_ns": task.wcet_ns,
                         "trigger": task.trigger}
    ring = TraceRing(1 << 16)
    rt = Runtime(bindings, policy="edf", clock=VirtualClock(), cost=declared_cost, sink=ring, workers=workers)
    rt.push("in", 0, torch.zeros(2))
    rt.run_until(until_ms * MS)
    path = tmp / "run.rttrace"
    save_trace(path, ring.drain(), {"ops": ops, "tasks_config": tc, "policy": "edf", "workers": workers,
                                    "clock": "virtual", "config": None, "bag": None, "lost_events": ring.lost})
    return path, rt


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Runtime]:
    tmp = tmp_path_factory.mktemp("pipeline")
    cfg = tmp / "tasks.yaml"
    cfg.write_text(PIPELINE_YAML)
    p = Task("P", period_ns=10 * MS, deadline_ns=5 * MS, wcet_ns=4 * MS)
    c = Task("C", period_ns=10 * MS, deadline_ns=5 * MS, wcet_ns=4 * MS, trigger="P_out")
    path, rt = run_bindings([(p, [("p", 4000)], "in"), (c, [("c", 4000)], "P_out")], 200, tmp)
    return path, cfg, rt


def test_releases_come_from_the_trigger_so_the_run_and_the_analysis_agree(
        pipeline: tuple[Path, Path, Runtime], capsys: pytest.CaptureFixture) -> None:
    path, cfg, rt = pipeline
    assert rt.stats()["C"]["released"] >= 19 and rt.stats()["C"]["missed"] == rt.stats()["P"]["missed"] == 0
    assert main(["analyze", str(path), "--config", str(cfg), "--json"]) == 0
    rta = json.loads(capsys.readouterr().out)["rta"]
    rows = {r["name"]: r for r in rta["tasks"]}
    # The worst phasing of independent tasks (the analysis analyze used to rerun) says C misses.
    assert rows["C"]["released_by"] == "P" and rows["C"]["observed_wcet_ms"] == pytest.approx(4.0)
    assert rta["schedulable"] is True and rows["C"]["schedulable"] and rows["P"]["schedulable"]
    assert "edf_offsets" in rta["bounds"]["worker0"] and rta["bounds"]["worker0"]["edf_offsets"]["passes"]
    # `check` on the same file gives the same verdict and the same chain bounds as analyze's "check".
    assert main(["check", str(cfg), "--json"]) == 0
    check = json.loads(capsys.readouterr().out)
    assert rta["check"]["schedulable"] is check["schedulable"] is True
    assert rta["check"]["chains"] == check["chains"]


def test_chain_measures_sit_beside_checks_bounds(pipeline: tuple[Path, Path, Runtime],
                                                  capsys: pytest.CaptureFixture) -> None:
    path, cfg, _ = pipeline
    assert main(["analyze", str(path), "--config", str(cfg), "--json"]) == 0
    (chain,) = json.loads(capsys.readouterr().out)["chains"]
    vs = {v["measure"]: v for v in chain["vs_bounds"]}
    # P#k read at 10k publishes at 10k + 5, which releases C#k; C publishes at 10k + 10, having finished at + 9.
    assert chain["latency_ms"]["max"] == chain["data_age_ms"]["max"] == pytest.approx(10.0)
    assert chain["finished_ms"]["max"] == pytest.approx(9.0)
    assert vs["latency"]["bound"] == "chain-LET" and vs["latency"]["bound_ms"] == pytest.approx(10.0)
    assert vs["latency"]["ratio"] == pytest.approx(1.0) and vs["latency"]["per_hop_let_ms"] == pytest.approx(10.0)
    assert vs["reaction"]["bound_ms"] == pytest.approx(20.0)      # a periodic head: an event can just miss a read
    assert chain["reaction_ms"]["max"] == pytest.approx(20.0)
    assert vs["finished"]["bound"] == "response" and 9.0 <= vs["finished"]["bound_ms"] <= 10.0
    assert all(v["ratio"] >= 1 for v in vs.values() if v["ratio"] is not None)
    assert main(["analyze", str(path), "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "latency      10.00    10.00    10.00 |    10.00 chain-LET" in out
    assert "with the configured budgets (rt-runtime check): schedulable" in out


def test_the_runs_worker_partition_is_analysed(tmp_path: Path) -> None:
    # 6 ms of every 10 ms each: together they overload one worker; the runtime put them on two.
    a = Task("A", period_ns=10 * MS, deadline_ns=10 * MS, wcet_ns=6 * MS)
    b = Task("B", period_ns=10 * MS, deadline_ns=10 * MS, wcet_ns=6 * MS)
    path, rt = run_bindings([(a, [("a", 6000)], "in"), (b, [("b", 6000)], "in")], 100, tmp_path, workers=2)
    assert rt.stats()["A"]["missed"] == rt.stats()["B"]["missed"] == 0
    rep = analyze(path)
    workers = {r["name"]: r["worker"] for r in rep.rta["tasks"]}
    tr = rep.trace
    ran_on = {n: int(tr.jobs.worker[tr.jobs.rows_of(tr.task_id(n))][0]) for n in ("A", "B")}
    assert workers == ran_on and len(set(workers.values())) == 2
    assert rep.rta["schedulable"] is True
    assert "on 2 workers" in rep.rta["verdict"]


def test_offsets_are_read_off_the_trace_without_a_configuration(tmp_path: Path) -> None:
    # docs/CYCLE.md's example: P publishes at 8 ms, C (offset 5 ms) reads it at 15 ms: 25 ms, every sample.
    specs = [("P", 10, 8, 2, [("p", 1000)], 0), ("C", 10, 10, 2, [("c", 1000)], 5)]
    path, _ = run_traced(specs, "edf", 200, tmp_path, inputs={"C": "P_out"})
    rep = analyze(path, chains=[Chain("pc", ("P", "C"))])
    (c,) = rep.chains
    assert set(c.latency_ns.tolist()) == {25 * MS}
    b = rep.chain_bounds["pc"]
    assert b["chain_let_ms"] == pytest.approx(25.0)   # at offset 0 the analysis would wait 2 ms, not 7
    vs = {v["measure"]: v for v in c.to_json(b)["vs_bounds"]}
    assert vs["latency"]["ratio"] == pytest.approx(1.0)
    assert "bound/max" in format_report(rep)


def test_edf_needs_is_the_smallest_deadline_that_passes() -> None:
    a = Task("A", period_ns=10 * MS, deadline_ns=3 * MS, wcet_ns=2 * MS)
    rta = observed_rta([a], {"A": 4 * MS}, {"A": 4 * MS}, "edf")
    (row,) = rta["tasks"]
    assert row["schedulable"] is False and row["needs_ms"] == pytest.approx(1.0, abs=0.02)
    assert rta["check"]["schedulable"] is True and "task A needs 1.0" in rta["verdict"]
    # A member of a run-time chain: the chain's deadline is what can be extended (every member due by it).
    b = Task("B", period_ns=10 * MS, deadline_ns=10 * MS, wcet_ns=2 * MS, trigger="A_out")
    rta = observed_rta([a, b], {"A": 3 * MS, "B": 3 * MS}, {"A": 3 * MS, "B": 3 * MS}, "edf",
                       [Chain("ab", ("A", "B"), 5 * MS)])
    rows = {r["name"]: r for r in rta["tasks"]}
    assert not rows["B"]["schedulable"] and rows["B"]["needs_ms"] == pytest.approx(1.0, abs=0.02)
    assert "chain 'ab'" in rows["B"]["note"]
