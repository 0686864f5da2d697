"""Utilization-based schedulability tests: quick, sufficient (or, for EDF, exact) checks.

These only hold for the textbook model: independent, fully preemptive, implicit-deadline
periodic tasks with no release jitter and no blocking. ``analyze_taskset`` reports them as
information next to the exact tests (response-time analysis, processor demand), which are the
ones the verdict rests on.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Sequence

from ..core.task import Task


def utilization(tasks: Sequence[Task]) -> float:
    """Total utilization, the sum of wcet / period."""
    return float(exact_utilization(tasks))


def exact_utilization(tasks: Sequence[Task]) -> Fraction:
    """Total utilization as an exact fraction, so that U == 1 and U > 1 are decided without rounding."""
    return sum((Fraction(t.wcet_ns, t.period_ns) for t in tasks), Fraction(0))


def density(tasks: Sequence[Task]) -> float:
    """Sum of wcet / min(deadline, period): EDF is feasible when it is at most 1 (sufficient only)."""
    return float(sum((Fraction(t.wcet_ns, min(t.deadline, t.period_ns)) for t in tasks), Fraction(0)))


def liu_layland_bound(n: int) -> float:
    """n (2^(1/n) - 1): the RM utilization bound of Liu & Layland (JACM 1973); tends to ln 2."""
    if n < 1:
        raise ValueError(f"liu_layland_bound: n must be at least 1, found {n}")
    return n * (2.0 ** (1.0 / n) - 1.0)


def liu_layland_test(tasks: Sequence[Task]) -> bool:
    """Sufficient RM test (Liu & Layland 1973): U <= n (2^(1/n) - 1)."""
    if not tasks:
        return True
    # A hair of tolerance: the bound is irrational, the utilization a float sum.
    return utilization(tasks) <= liu_layland_bound(len(tasks)) + 1e-12


def hyperbolic_product(tasks: Sequence[Task]) -> float:
    """prod(U_i + 1), the quantity the hyperbolic bound compares with 2."""
    return float(math.prod((Fraction(t.wcet_ns, t.period_ns) + 1 for t in tasks), start=Fraction(1)))


def hyperbolic_test(tasks: Sequence[Task]) -> bool:
    """Sufficient RM test of Bini, Buttazzo & Buttazzo (IEEE TC 2003): prod(U_i + 1) <= 2.

    Decided in integers, prod(C_i + T_i) <= 2 prod(T_i), so a task set exactly on the bound passes.
    """
    return math.prod(t.wcet_ns + t.period_ns for t in tasks) <= 2 * math.prod(t.period_ns for t in tasks)


def edf_utilization_test(tasks: Sequence[Task]) -> bool:
    """EDF with implicit deadlines is schedulable iff U <= 1 (Liu & Layland 1973)."""
    return exact_utilization(tasks) <= 1


def textbook_model(tasks: Sequence[Task], blocking_ns: Sequence[int] | None = None) -> bool:
    """True when the utilization bounds apply: implicit deadlines, no jitter, no blocking."""
    return (all(t.deadline == t.period_ns and t.jitter_ns == 0 for t in tasks)
            and not any(blocking_ns or ()))
