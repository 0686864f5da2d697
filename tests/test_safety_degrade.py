"""Degrade modes: the pure state machine, and the monitor driving a real runtime's planner."""
from __future__ import annotations

import torch

from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.safety.degrade import DEGRADED, MINIMAL_RISK, NOMINAL, REASON, DegradeStateMachine
from rt_runtime.faults.inject import Injection, Injector
from rt_runtime.safety.monitor import SafetyMonitor
from rt_runtime.safety.redundancy import Redundant
from rt_runtime.safety.spec import RedundancySpec
from rt_runtime.sched import EventKind, RecordingSink, Runtime, TaskBinding, declared_cost
from rt_runtime.sched.events import HOT

MS = 1_000_000
X, Y = TensorSpec("x", (2,), "float32"), TensorSpec("y", (2,), "float32")


def test_verdicts_move_up_at_once_and_down_with_hysteresis() -> None:
    S = 1_000_000_000
    m = DegradeStateMachine(clear_after={DEGRADED: 2, MINIMAL_RISK: 3})
    assert m.fault("vote", DEGRADED, 10) and m.state == DEGRADED
    assert not m.tick(20) and m.tick(30) and m.state == NOMINAL          # two clean periods
    m.fault("sensor_silent", DEGRADED, 2 * S)
    m.tick(2 * S + 10)
    m.fault("overrun", DEGRADED, 2 * S + 20)                              # a fault resets the clean count
    assert not m.tick(2 * S + 30) and m.state == DEGRADED
    assert m.fault("no_majority", MINIMAL_RISK, 4 * S) and m.state == MINIMAL_RISK
    for t in (10, 20):
        assert not m.tick(4 * S + t)
    assert m.tick(4 * S + 30) and m.state == DEGRADED and not m.tick(4 * S + 40)
    assert m.tick(4 * S + 50) and m.state == NOMINAL
    assert m.entries == {"nominal": 0, "degraded": 2, "minimal_risk": 1}   # steps up only
    assert [(tr.after, tr.reason) for tr in m.transitions] == [
        (1, "vote"), (0, "recovered"), (1, "sensor_silent"), (2, "no_majority"), (1, "recovered"), (0, "recovered")]
    assert m.state_at(4 * S + 5) == MINIMAL_RISK and m.state_at(5) == NOMINAL and m.status()["state"] == "nominal"


def test_repeated_faults_escalate_to_minimal_risk() -> None:
    m = DegradeStateMachine(escalate_count=3, escalate_window_ns=100)
    m.fault("miss", DEGRADED, 0)
    m.fault("miss", DEGRADED, 150)          # the first fell out of the window
    assert m.state == DEGRADED
    m.fault("miss", DEGRADED, 200)
    assert m.state == DEGRADED
    m.fault("error", DEGRADED, 240)         # three within 100 ns
    assert m.state == MINIMAL_RISK and m.transitions[-1].reason == "escalated"


def _planner_runtime():
    """A dual planner (y = x + 1) with a constant fallback, watched by a SafetyMonitor."""
    inj = Injector()
    plan = Graph("plan", [Op("plan", lambda x, y: torch.add(x, 1.0, out=y), (X,), (Y,), cost_us=1000)], [X], ["y"])
    stop = Graph("stop", [Op("stop", lambda x, y: y.fill_(-1.0), (X,), (Y,), cost_us=500)], [X], ["y"])
    b = TaskBinding(Task("planning", 10 * MS, 4 * MS), inj.wrap("planning", plan), inputs={"x": "/x"},
                    outputs={"y": "/y"}, fallback=inj.wrap("planning", stop, primary=False), on_overrun="none",
                    recover_after=2, executor=Redundant(RedundancySpec()))
    sink, out = RecordingSink(), {}
    rt = Runtime([b], sink=sink, cost=inj.cost(declared_cost),
                 egress=lambda ch, t, s, d: out.__setitem__(t // MS, float(d[0])))
    mon = SafetyMonitor(rt, "planning", DegradeStateMachine(clear_after={DEGRADED: 2, MINIMAL_RISK: 3}),
                        periods={"/x": 10 * MS}).install()
    return rt, inj, sink, out, mon


def test_no_majority_holds_the_planner_in_minimal_risk_then_recovers() -> None:
    rt, inj, sink, out, mon = _planner_runtime()
    # Every copy of job 2 raises: no majority -> the fallback in that job, then minimal-risk.
    inj.arm([Injection(k, "exception", 15 * MS, "planning", 0) for k in range(3)], rt.clock.now, lambda t: 5 * MS)
    for k in range(16):
        rt.push("/x", k * 10 * MS, torch.zeros(2))
        mon.arrived("/x", k * 10 * MS, k * 10 * MS)
    rt.run_until(150 * MS)
    safety = [(e.t_ns // MS, e.a, e.b) for e in sink.of(EventKind.SAFETY)]
    assert safety[0][1:] == (MINIMAL_RISK, REASON["no_majority"])
    # The job that failed still published (its in-job fallback); the next releases run the fallback
    # graph while minimal-risk holds them there, then the primary again after the hysteresis.
    assert out[30] == -1.0 and out[40] == -1.0 and out[60] == -1.0
    assert [s for _, s, _ in safety] == [MINIMAL_RISK, DEGRADED, NOMINAL]
    back = safety[1][0]
    assert all(v == 1.0 for t, v in out.items() if t > back + 10) and out[150] == 1.0
    assert rt.stats()["planning"]["degraded"] == 1 and rt.stats()["planning"]["recovered"] == 1
    assert sorted(out) == list(range(10, 151, 10))   # a trajectory every period throughout


def test_a_silent_sensor_degrades_and_a_long_silence_is_critical() -> None:
    rt, inj, sink, out, mon = _planner_runtime()
    for k in (0, 1, 2):
        rt.push("/x", k * 10 * MS, torch.zeros(2))
        mon.arrived("/x", k * 10 * MS, k * 10 * MS)
    for t in range(25, 75, 5):
        rt.run_until(t * MS)
        mon.check_silence(t * MS)
    assert [(tr.t_ns // MS, tr.after, tr.reason) for tr in mon.machine.transitions] == [
        (35, DEGRADED, "sensor_silent"), (60, MINIMAL_RISK, "sensor_silent")]
    assert mon.status()["silent"] == ["/x"] and "planning" in rt.sched.watchdog.held
    assert rt.stats()["planning"]["safety_state"] == MINIMAL_RISK   # diagnostics carry the state


def test_the_monitor_acts_on_no_high_rate_kind() -> None:
    # The scheduler sends the HOT kinds past the monitor (``Scheduler.hot``): it must not need them.
    rt, _, _, _, mon = _planner_runtime()
    before = (mon.machine.state, len(mon.machine.transitions), list(mon.detections), set(mon._missed), mon._dirty)
    for kind in sorted(HOT):
        for a in range(-1, 7):
            mon.emit(kind, 10 * MS, "planning", 0, a, 1)
            mon.emit(kind, 10 * MS, "planning", -1, a, 0)
    assert (mon.machine.state, len(mon.machine.transitions), list(mon.detections), set(mon._missed),
            mon._dirty) == before


def test_the_tracer_beside_the_monitor_records_what_it_records_alone() -> None:
    def traced(watched: bool) -> list:
        rt, _, sink, _, mon = _planner_runtime()
        if not watched:
            rt.sched.sink = mon.inner   # the monitor taken out: every event straight to the recording sink
        for k in range(6):
            rt.push("/x", k * 10 * MS, torch.zeros(2))
        rt.run_until(60 * MS)
        return sink.events

    alone, beside = traced(False), traced(True)
    assert {e.kind for e in alone} >= {EventKind.OP_START, EventKind.FINISH, EventKind.PUBLISH, EventKind.COMPARE}
    assert beside == alone   # a clean run: no SAFETY event either
