"""The ``redundancy:`` and ``speculate:`` keys of a task and the stack's ``safety:`` key, as plain data.

``redundancy:`` says how many copies run and how their outputs are compared.

Pure data, no torch: ``rt-runtime check`` reads it to multiply budgets without building graphs.

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
SPEC_KEYS = ("mode", "compare", "atol", "rtol", "budget", "checks", "cost")
CHECK_COST_NS = 150_000   # per checked output and job, unless ``cost`` says otherwise
BUDGETS = ("nominal", "worst_case")


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


def parse_redundancy(value: object) -> RedundancySpec | None:
    """A config value into a spec (None for ``none``/absent); ValueError says what is wrong."""
    if value is None or value is False or value == "none":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = {2: "dual", 3: "triple"}.get(value, value)   # copies: 2 is dual, 3 is triple
    if isinstance(value, str):
        value = {"mode": value}
    if not isinstance(value, Mapping):
        raise ValueError(f"expected 'dual', 'triple' or a mapping with mode, compare, atol, rtol, checks; "
                         f"found {value!r}")
    unknown = sorted(set(map(str, value)) - set(SPEC_KEYS))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}; expected {', '.join(SPEC_KEYS)}")
    mode = value.get("mode", "dual")
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"mode: expected one of {', '.join(MODES)}, found {mode!r}")
    tol = {}
    for k in ("atol", "rtol"):
        v = value.get(k, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"{k}: expected a non-negative number, found {v!r}")
        tol[k] = float(v)
    compare = value.get("compare", "tolerance" if any(tol.values()) else "exact")
    if compare not in ("exact", "tolerance"):
        raise ValueError(f"compare: expected 'exact' or 'tolerance', found {compare!r}")
    if compare == "exact" and any(tol.values()):
        raise ValueError("compare: 'exact' takes no atol/rtol (give compare: tolerance, or leave compare out)")
    budget = value.get("budget", "nominal")
    if budget not in BUDGETS:
        raise ValueError(f"budget: expected one of {', '.join(BUDGETS)}, found {budget!r}")
    checks: tuple[Any, ...] = ()
    if value.get("checks") is not None:
        from .invariants import parse_checks

        checks = parse_checks(value["checks"])
    elif mode == "invariants":
        raise ValueError("mode invariants: expected 'checks' (output -> what must hold of it)")
    cost = value.get("cost")
    if cost is None:
        cost_ns = CHECK_COST_NS * len(checks)
    else:
        from ..core.units import DurationError, parse_duration

        try:
            cost_ns = parse_duration(cost, what="cost")
        except DurationError as e:
            raise ValueError(str(e)) from None
    return RedundancySpec(mode, compare, tol["atol"], tol["rtol"], budget, checks, cost_ns)


SPECULATE_KEYS = ("hypotheses", "args", "k", "atol", "rows", "margin", "wait_for", "enabled")


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


def _keys(value: object, keys: tuple[str, ...], main: str) -> Mapping[str, Any]:
    """``value`` as a mapping with only ``keys``; ValueError otherwise."""
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping with {main}; found {value!r}")
    unknown = sorted(set(map(str, value)) - set(keys))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}; expected {', '.join(keys)}")
    return value


def _non_negative(v: object, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise ValueError(f"{what}: expected a non-negative number, found {v!r}")
    return float(v)


def parse_speculate(value: object) -> SpeculateSpec | None:
    """A config value into a spec (None when absent); ValueError says what is wrong."""
    if value is None or value is False:
        return None
    value = _keys(value, SPECULATE_KEYS, "hypotheses, k, atol, rows")
    ref = value.get("hypotheses")
    if not isinstance(ref, str) or ":" not in ref:
        raise ValueError(f"hypotheses: expected 'package.module:function', found {ref!r}")
    args = value.get("args") or {}
    if not isinstance(args, Mapping):
        raise ValueError(f"args: expected a mapping, found {args!r}")
    k = value.get("k", 2)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k: expected an integer >= 1, found {k!r}")
    atol = value.get("atol", 0.0)
    per_input = atol.items() if isinstance(atol, Mapping) else [("atol", atol)]
    for name, v in per_input:
        where = f"atol.{name}" if isinstance(atol, Mapping) else "atol"
        if isinstance(v, (list, tuple)):
            for x in v:
                _non_negative(x, where)
        else:
            _non_negative(v, where)
    rows = value.get("rows")
    if rows is not None and (not isinstance(rows, Mapping)
                             or not all(isinstance(a, str) and isinstance(b, str) for a, b in rows.items())):
        raise ValueError(f"rows: expected a mapping of input names to count-input names, found {rows!r}")
    margin = _non_negative(value.get("margin", 2.0), "margin")
    wait_for = value.get("wait_for") or []
    if not isinstance(wait_for, (list, tuple)) or not all(isinstance(w, str) for w in wait_for):
        raise ValueError(f"wait_for: expected a list of input names, found {wait_for!r}")
    enabled = value.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError(f"enabled: expected true or false, found {enabled!r}")
    return SpeculateSpec(ref, dict(args), k, atol, dict(rows) if rows is not None else None, margin,
                         tuple(wait_for), enabled)


SAFETY_KEYS = ("planner", "sensors", "silence_factor", "silence_critical", "max_latency", "hysteresis")


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


def parse_safety(value: object, duration: Any) -> SafetySpec | None:
    """A config value into a spec (None when absent); ``duration(text, what)`` parses "20ms"-like values."""
    if value is None:
        return None
    value = _keys(value, SAFETY_KEYS, "planner and sensors")
    planner = value.get("planner")
    if not isinstance(planner, str):
        raise ValueError(f"planner: expected the planning task's name, found {planner!r}")
    sensors = value.get("sensors") or {}
    if not isinstance(sensors, Mapping):
        raise ValueError(f"sensors: expected a mapping of channel to period, found {sensors!r}")
    periods = {str(ch): duration(p, f"sensors.{ch}") for ch, p in sensors.items()}
    factor = _non_negative(value.get("silence_factor", 1.5), "silence_factor")
    critical = _non_negative(value.get("silence_critical", 4.0), "silence_critical")
    if critical < factor:
        raise ValueError(f"silence_critical ({critical}) must be >= silence_factor ({factor})")
    latency = duration(value.get("max_latency", "30ms"), "max_latency")
    hyst = value.get("hysteresis")
    if hyst is not None:
        if not isinstance(hyst, Mapping) or set(hyst) - {"degraded", "minimal_risk"} or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in hyst.values()):
            raise ValueError(f"hysteresis: expected {{degraded: N, minimal_risk: M}} with N, M >= 1, found {hyst!r}")
        hyst = dict(hyst)
    return SafetySpec(planner, periods, factor, critical, latency, hyst)
