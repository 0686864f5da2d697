"""SafetyMonitor: the adapter between a running Runtime and the DegradeStateMachine.

It listens to the runtime's trace events (installed as one more ``EventSink``) and to ingress
(what arrived when, what was rejected), turns them into verdicts for the state machine, and
applies its decisions: in minimal-risk the planning task is switched to its fallback graph (the
minimal-risk stop) and held there; leaving minimal-risk releases it, and the watchdog's usual
recovery (``recover_after`` clean jobs) switches it back. Every change of state is a ``SAFETY``
trace event (``a`` = new state, ``b`` = reason), stamped on the planning task with job -1.

Verdicts: COMPARE voted -> degraded, no majority -> critical; MISS, OVERRUN (recorded, but no
verdict when the task's ``on_overrun`` is ``none``: its budget is a soft one), a job ended by an
error -> degraded (critical for the planner's own failed job: no plan that period); a job's STALL
-> degraded (what it costs escalates on its own: the job's failure, miss or no-majority vote; a
re-run that masked it costs nothing), a speculative op's STALL (job -1: it holds its worker) and
the watchdog degrading the planner -> critical. A sensor silent for ``silence_factor`` of its period
-> degraded, for ``silence_critical`` periods -> critical; rejected or late messages -> degraded.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..sched.events import COMPARE_NO_MAJORITY, COMPARE_VOTED, REACT_DEGRADE, EventKind
from .degrade import DEGRADED, MINIMAL_RISK, REASON, DegradeStateMachine

_K = EventKind
CRITICAL = MINIMAL_RISK


class SafetyMonitor:
    """Verdicts in (trace events, ingress), degrade decisions out (planner held in its fallback)."""

    enabled = True

    def __init__(self, rt: Any, planner: str, machine: DegradeStateMachine | None = None, *,
                 periods: Mapping[str, int] | None = None, silence_factor: float = 1.5,
                 silence_critical: float = 4.0, max_latency_ns: int = 30_000_000) -> None:
        if planner not in rt.tasks:
            raise ValueError(f"safety monitor: no task named {planner!r} (have {sorted(rt.tasks)})")
        self.rt = rt
        self.planner = planner
        self.machine = machine or DegradeStateMachine()
        self.periods = dict(periods or {})          # ingress channel -> expected period (ns)
        self.silence_factor = silence_factor
        self.silence_critical = silence_critical
        self.max_latency_ns = max_latency_ns
        self.last: dict[str, int] = {}              # channel -> last arrival
        self.flagged: dict[str, int] = {}           # channel -> silence level already reported (1, 2)
        self.detections: list[tuple[int, str, str]] = []   # (t, reason, task or channel)
        self._dirty = False                          # a fault since the planner's last publish
        self._missed: set[tuple[str, int]] = set()
        self.inner = rt.sched.sink   # the sink before it (the tracer)
        self.tolerated = {n for n, ts in rt.sched.tasks.items() if ts.on_overrun.value == "none"}
        self._installed = False

    @classmethod
    def from_spec(cls, rt: Any, spec: Any) -> "SafetyMonitor":
        """A monitor configured by a stack's ``safety:`` key (``safety.spec.SafetySpec``), not yet installed."""
        steps = {"degraded": DEGRADED, "minimal_risk": MINIMAL_RISK}
        machine = DegradeStateMachine(clear_after={**DegradeStateMachine().clear_after,
                                                   **{steps[k]: n for k, n in (spec.hysteresis or {}).items()}})
        return cls(rt, spec.planner, machine, periods=spec.sensors, silence_factor=spec.silence_factor,
                   silence_critical=spec.silence_critical, max_latency_ns=spec.max_latency_ns)

    def install(self) -> "SafetyMonitor":
        """Subscribe to the runtime's events (idempotent); the state shows in the planner's stats."""
        if not self._installed:
            s = self.rt.sched
            s.listen(self)   # it acts on no high-rate kind (``events.HOT``): those skip the fan-out
            # Diagnostics report every task's counters: the state rides along as one (0, 1, 2).
            s.tasks[self.planner].safety_state = self.machine.state
            self._installed = True
        return self

    # ---- verdicts from the trace --------------------------------------------------------------
    def emit(self, kind: int, t_ns: int, task: str, job_index: int, a: int = 0, b: int = 0) -> None:
        """The EventSink hook: map trace events to verdicts (cheap for the common kinds)."""
        if kind <= _K.FINISH or kind == _K.DROP or kind == _K.SAFETY:
            return
        if kind == _K.PUBLISH:
            if task == self.planner:
                if self._dirty:
                    self._dirty = False
                elif not any(self.flagged.values()) and self.machine.tick(t_ns):   # silence is not clean
                    self._changed(t_ns)
        elif kind == _K.COMPARE:
            if a == COMPARE_VOTED:
                self.fault("vote", DEGRADED, t_ns, task)
            elif a == COMPARE_NO_MAJORITY:
                self.fault("no_majority", CRITICAL, t_ns, task)
        elif kind == _K.MISS:
            self._missed.add((task, job_index))
            self.fault("miss", DEGRADED, t_ns, task)
        elif kind == _K.OVERRUN:
            if task in self.tolerated:   # on_overrun: none says the budget is a soft one: seen, no verdict
                self.detections.append((t_ns, "overrun", task))
            else:
                self.fault("overrun", DEGRADED, t_ns, task)
        elif kind == _K.STALL:
            self.fault("stall", DEGRADED if job_index >= 0 else CRITICAL, t_ns, task)
        elif kind == _K.ABORT:
            if (task, job_index) not in self._missed:   # aborted by an error, not by a miss's reaction
                self.fault("error", CRITICAL if task == self.planner else DEGRADED, t_ns, task)
            self._missed.discard((task, job_index))
        elif kind == _K.REACTION and a == REACT_DEGRADE and task == self.planner:
            self.fault("planner_degraded", CRITICAL, t_ns, task)

    # ---- verdicts from ingress ----------------------------------------------------------------
    def arrived(self, channel: str, t_ns: int, stamp_ns: int) -> None:
        """A message reached ``channel`` at ``t_ns``, stamped ``stamp_ns`` by its sensor."""
        self.last[channel] = t_ns
        self.flagged.pop(channel, None)
        if t_ns - stamp_ns > self.max_latency_ns:
            self.fault("sensor_late", DEGRADED, t_ns, channel)

    def rejected(self, channel: str, t_ns: int) -> None:
        """A message for ``channel`` was not usable (undecodable, implausible values)."""
        self.fault("sensor_bad", DEGRADED, t_ns, channel)

    def next_check(self) -> int | None:
        """The next instant a sensor becomes silent, if no message comes first."""
        due = [self.last[c] + int(self._factor(c) * p) for c, p in self.periods.items() if c in self.last
               and self.flagged.get(c, 0) < 2]
        return min(due) if due else None

    def check_silence(self, t_ns: int) -> None:
        """Report every sensor silent at ``t_ns`` (stamped when its silence began to count)."""
        for c, p in sorted(self.periods.items()):
            if c not in self.last:
                continue
            level = self.flagged.get(c, 0)
            if level < 2 and t_ns >= self.last[c] + int(self._factor(c) * p):
                at = self.last[c] + int(self._factor(c) * p)
                self.flagged[c] = level + 1
                self.fault("sensor_silent", DEGRADED if level == 0 else CRITICAL, at, c)

    def _factor(self, channel: str) -> float:
        return self.silence_critical if self.flagged.get(channel, 0) >= 1 else self.silence_factor

    # ---- decisions ----------------------------------------------------------------------------
    def fault(self, reason: str, severity: int, t_ns: int, where: str) -> None:
        """Hand a verdict to the state machine and apply a change of state."""
        self.detections.append((t_ns, reason, where))
        self._dirty = True
        if self.machine.fault(reason, severity, t_ns):
            self._changed(t_ns)

    def _changed(self, t_ns: int) -> None:
        m = self.machine
        tr = m.transitions[-1]
        s = self.rt.sched
        wd = s.watchdog
        ts = s.tasks[self.planner]
        ts.safety_state = tr.after
        if tr.after == MINIMAL_RISK:
            wd.held.add(self.planner)
            if ts.mode == 0:
                wd.degrade(ts, t_ns)
        elif tr.before == MINIMAL_RISK:
            wd.held.discard(self.planner)
        # Through the scheduler's sink as it is now, not as it was when the monitor was made: a listener
        # attached after it (the live view) hears the change too; this monitor ignores its own SAFETY.
        s.emit(_K.SAFETY, t_ns, self.planner, -1, tr.after, REASON[tr.reason])

    def status(self) -> dict[str, Any]:
        """For diagnostics: the state machine's status plus silent sensors now."""
        return {**self.machine.status(), "silent": sorted(c for c, lv in self.flagged.items() if lv)}


__all__ = ["CRITICAL", "SafetyMonitor"]
