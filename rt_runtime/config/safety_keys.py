"""A task's ``redundancy:`` and ``speculate:`` keys and the stack's ``safety:`` key, read into safety's specs.

Their structure (keys, types, bounds, durations) is checked by the stack file's models
(``config.schema``: ``Redundancy``, ``Speculate``, ``Safety``); what the models cannot say is checked
here: the shorthands (``redundancy: dual`` or ``3``), a tolerance with ``compare: exact``, ``invariants``
without checks, ``silence_critical`` below ``silence_factor``. A ValueError is one line, as the loader
(``taskset``, ``stack``) prefixes it with the file and the task.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from ..core.units import parse_duration
from ..safety.spec import CHECK_COST_NS, RedundancySpec, SafetySpec, SpeculateSpec
from .basetypes import validate
from .schema import Redundancy, Safety, Speculate, keys

_SHORTHAND = {2: "dual", 3: "triple"}   # redundancy: copies


def parse_redundancy(value: object) -> RedundancySpec | None:
    """A config value into a spec (None for ``none``/absent); ValueError says what is wrong."""
    if value is None or value is False or value == "none":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = _SHORTHAND.get(value, value)
    if isinstance(value, str):
        value = {"mode": value}
    if not isinstance(value, Mapping):
        raise ValueError(f"expected 'dual', 'triple' or a mapping with {', '.join(keys(Redundancy))}; "
                         f"found {value!r}")
    # the checks are read by ``parse_checks``, which says more than the model (and reads a column given as text)
    m: Any = validate(Redundancy, {k: v for k, v in value.items() if k != "checks"})
    compare = m.compare or ("tolerance" if m.atol or m.rtol else "exact")
    if compare == "exact" and (m.atol or m.rtol):
        raise ValueError("compare: 'exact' takes no atol/rtol (give compare: tolerance, or leave compare out)")
    checks: tuple[Any, ...] = ()
    if value.get("checks") is not None:
        from ..safety.invariants import parse_checks

        checks = parse_checks(value["checks"])
    elif m.mode == "invariants":
        raise ValueError("mode invariants: expected 'checks' (output -> what must hold of it)")
    cost_ns = CHECK_COST_NS * len(checks) if m.cost is None else parse_duration(m.cost, what="cost")
    return RedundancySpec(m.mode, compare, float(m.atol), float(m.rtol), m.budget, checks, cost_ns)


def parse_speculate(value: object) -> SpeculateSpec | None:
    """A config value into a spec (None when absent); ValueError says what is wrong."""
    if value is None or value is False:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping with hypotheses, k, atol, rows; found {value!r}")
    m: Any = validate(Speculate, value)
    return SpeculateSpec(m.hypotheses, dict(m.args or {}), m.k, m.atol, m.rows, float(m.margin),
                         tuple(m.wait_for or ()), m.enabled)


def parse_safety(value: object, duration: Callable[[object, str], int]) -> SafetySpec | None:
    """A config value into a spec (None when absent); ``duration(text, what)`` parses "20ms"-like values."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping with planner and sensors; found {value!r}")
    m: Any = validate(Safety, value)
    if m.silence_critical < m.silence_factor:
        raise ValueError(f"silence_critical ({m.silence_critical}) must be >= silence_factor ({m.silence_factor})")
    hysteresis = None if m.hysteresis is None else m.hysteresis.model_dump(exclude_none=True)
    return SafetySpec(m.planner, {ch: duration(p, f"sensors.{ch}") for ch, p in (m.sensors or {}).items()},
                      float(m.silence_factor), float(m.silence_critical), duration(m.max_latency or "30ms",
                                                                                   "max_latency"), hysteresis)
