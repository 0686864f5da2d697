"""The ``redundancy:`` and ``speculate:`` keys of a task and the stack's ``safety:`` key, as plain data.

``redundancy:`` says how many copies run and how their outputs are compared.

Pure data, no torch: ``rt-runtime check`` reads it to multiply budgets without building graphs;
``config/safety_keys.py`` reads the keys into it.

    redundancy: dual                                  # two copies, bit-exact comparison (also: 2)
    redundancy: {mode: dual, compare: exact, budget: worst_case}
    redundancy: {mode: triple, atol: 1e-5, rtol: 0}   # three copies, within a tolerance (also: 3)

    redundancy: {mode: invariants, checks: {...}}     # one copy, its outputs checked (safety/invariants.py);
                                                      # a violation re-runs the job once

Budgets: ``wcet`` is one run of the graph. A redundant job runs it ``copies`` times nominally
and three times in the worst case: dual runs a third copy to vote when the first two disagree,
so dual's worst case counts the third run (3x; 2x nominal). ``budget: nominal`` (the default)
gives the analysis and the watchdog ``copies`` x wcet: a vote then shows as an overrun of that
budget (traced; the task's ``on_overrun`` decides). ``budget: worst_case`` gives them 3 x wcet.
``invariants`` runs once nominally and twice in the worst case (the re-run after a violation).
Declared ``checks`` (any mode) add their ``cost`` per job: by default ``CHECK_COST_NS`` per checked
output, which `bench/bench_safety_cost.py` shows is above what they take on the CI machine.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

MODES = {"dual": 2, "triple": 3, "invariants": 1}
WORST_CASE_RUNS = 3   # dual: two runs nominal, a third on a mismatch; triple: always three
CHECK_COST_NS = 150_000   # per checked output and job, unless ``cost`` says otherwise


@dataclass(frozen=True)
class RedundancySpec:
    """Copies per job and the comparison (``exact``: bit for bit; ``tolerance``: |a-b| <= atol + rtol |b|)."""

    mode: str = "dual"
    compare: str = "exact"
    atol: float = 0.0
    rtol: float = 0.0
    budget: str = "nominal"
    checks: tuple[Any, ...] = ()          # ``invariants.OutputChecks``, one per checked output
    cost_ns: int = 0                      # what running the checks costs per job (in the budget)

    @property
    def copies(self) -> int:
        """Copies every job runs (before any vote)."""
        return MODES[self.mode]

    @property
    def nominal_factor(self) -> int:
        """Graph runs of a job whose copies agree."""
        return self.copies

    @property
    def worst_case_factor(self) -> int:
        """Graph runs of a job in the worst case (dual: the third, voting copy counts; invariants: a re-run)."""
        return 2 if self.mode == "invariants" else WORST_CASE_RUNS

    @property
    def budget_factor(self) -> int:
        """What the analysis and the watchdog multiply ``wcet`` by (``budget``: nominal or worst case)."""
        return self.worst_case_factor if self.budget == "worst_case" else self.nominal_factor

    def to_json(self) -> dict[str, Any]:
        """Plain values, for reports."""
        return {"mode": self.mode, "compare": self.compare, "atol": self.atol, "rtol": self.rtol,
                "budget": self.budget, "checks": [c.output for c in self.checks], "cost_ns": self.cost_ns}

    def budget_ns(self, wcet_ns: int) -> int:
        """The job's budget for the analysis and the watchdog: ``wcet`` (one run) x factor + the checks."""
        return wcet_ns * self.budget_factor + self.cost_ns


@dataclass(frozen=True)
class SpeculateSpec:
    """A task's ``speculate:`` key (docs/SAFETY.md): the hypotheses' factory and the validator's settings.

        speculate:
          hypotheses: pipelines.speculation:ego_hypotheses   # module:function(**args) -> hypotheses
          args: {period: "20ms"}
          k: 2                                             # hypotheses per release
          atol: {odom: [0.1, 0.1, 0.01, 0.1, 0.01, 0.001]}  # per input: a number, or one per column
          rows: {route: route_count}                       # compare only the valid rows
          wait_for: [tracks]                               # speculate once these are this cycle's
          enabled: true                                    # false: declared, off unless asked for
    """

    hypotheses: str
    args: Mapping[str, Any]
    k: int = 2
    atol: Any = 0.0
    rows: Mapping[str, str] | None = None
    margin: float = 2.0
    wait_for: tuple[str, ...] = ()
    enabled: bool = True


@dataclass(frozen=True)
class SafetySpec:
    """The stack's ``safety:`` key: who the planner is, what each sensor's period is, the thresholds.

        safety:
          planner: planning                       # held in its minimal-risk fallback in minimal-risk
          sensors: {ego/odom: 20ms, lidar/points: 100ms}   # channel -> expected period (silence)
          silence_factor: 1.5                     # silent for 1.5 periods: degraded
          silence_critical: 4.0                   # for 4 periods: minimal-risk
          max_latency: 30ms                       # arrival - stamp beyond this: degraded
          hysteresis: {degraded: 5, minimal_risk: 10}   # clean planning periods to step down
    """

    planner: str
    sensors: Mapping[str, int]
    silence_factor: float = 1.5
    silence_critical: float = 4.0
    max_latency_ns: int = 30_000_000
    hysteresis: Mapping[str, int] | None = None
