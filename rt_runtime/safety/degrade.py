"""Degrade modes: nominal -> degraded -> minimal-risk, a pure state machine with hysteresis.

Inputs are verdicts (``fault(reason, severity, t)``) and clean planning periods (``tick(t)``):

* a ``DEGRADED`` fault (a vote outvoted a copy, a sensor fell silent or sent garbage, a job
  overran, missed or failed) moves nominal to degraded;
* a ``CRITICAL`` fault (no majority, a stalled worker, the watchdog degrading the planner, a
  sensor silent for long) moves any state to minimal-risk;
* ``escalate_count`` faults within ``escalate_window_ns`` move to minimal-risk as well: a fault
  that keeps coming back is not a transient one.

Going down needs ``clear_after[state]`` clean periods in a row (hysteresis): a fault in between
resets the count (and the monitor counts no period as clean while a sensor is still silent).
Transitions are recorded with their time and reason; steps up are counted per state.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Mapping

NOMINAL, DEGRADED, MINIMAL_RISK = 0, 1, 2
STATES = ("nominal", "degraded", "minimal_risk")

# Why a state changed (``b`` of the SAFETY trace event). 0 is recovery (clean periods).
REASONS = ("recovered", "vote", "no_majority", "miss", "overrun", "error", "stall", "planner_degraded",
           "sensor_silent", "sensor_bad", "sensor_late", "escalated")
REASON = {r: i for i, r in enumerate(REASONS)}


@dataclass
class Transition:
    """One change of state."""

    t_ns: int
    before: int
    after: int
    reason: str


@dataclass
class DegradeStateMachine:
    """The supervisor's state; feed it verdicts and clean periods, read ``state`` and ``transitions``."""

    clear_after: Mapping[int, int] = field(default_factory=lambda: {DEGRADED: 5, MINIMAL_RISK: 10})
    escalate_count: int = 3
    escalate_window_ns: int = 1_000_000_000
    state: int = NOMINAL
    clean: int = 0
    transitions: list[Transition] = field(default_factory=list)
    entries: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATES, 0))
    faults: dict[str, int] = field(default_factory=dict)
    _recent: deque = field(default_factory=deque)

    def fault(self, reason: str, severity: int, t_ns: int) -> bool:
        """A verdict of ``severity`` (DEGRADED or CRITICAL) at ``t_ns``; True if the state changed."""
        if reason not in REASON:
            raise ValueError(f"unknown reason {reason!r}; expected one of {', '.join(REASONS)}")
        self.faults[reason] = self.faults.get(reason, 0) + 1
        self.clean = 0
        recent = self._recent
        recent.append(t_ns)
        while recent and recent[0] <= t_ns - self.escalate_window_ns:
            recent.popleft()
        target = max(self.state, MINIMAL_RISK if severity >= MINIMAL_RISK else DEGRADED)
        if len(recent) >= self.escalate_count and target < MINIMAL_RISK:
            target, reason = MINIMAL_RISK, "escalated"
        return self._go(target, reason, t_ns)

    def tick(self, t_ns: int) -> bool:
        """A clean period (the planner published with no fault since the last tick); True if the state changed."""
        if self.state == NOMINAL:
            return False
        self.clean += 1
        if self.clean >= self.clear_after[self.state]:
            return self._go(self.state - 1, "recovered", t_ns)
        return False

    def _go(self, target: int, reason: str, t_ns: int) -> bool:
        if target == self.state:
            return False
        if self.transitions:   # verdicts can arrive stamped slightly out of order (mid-op detection)
            t_ns = max(t_ns, self.transitions[-1].t_ns)
        before = self.state
        self.transitions.append(Transition(t_ns, before, target, reason))
        self.state = target
        self.clean = 0
        if target > before:   # an entry is a step up; stepping down from minimal-risk is not
            self.entries[STATES[target]] += 1
        return True

    def state_at(self, t_ns: int) -> int:
        """The state in force at ``t_ns`` (after every transition stamped at or before it)."""
        s = NOMINAL
        for tr in self.transitions:
            if tr.t_ns > t_ns:
                break
            s = tr.after
        return s

    @property
    def name(self) -> str:
        """The current state's name."""
        return STATES[self.state]

    def status(self) -> dict[str, object]:
        """For diagnostics: the state, entries per state and fault counts."""
        return {"state": self.name, "entries": dict(self.entries), "faults": dict(self.faults),
                "transitions": len(self.transitions)}
