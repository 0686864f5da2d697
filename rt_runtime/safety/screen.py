"""A task's declared output invariants compiled once into one cheap pass: "all hold" or "maybe not".

``invariants.py`` states the checks one by one, so that each can say what is wrong: a min and a max
per bounded column, a slice per integer column, some thirty numpy calls per task and job. Run right
after the job's kernels, with the caches cold, each numpy call costs tens of us. ``Screen`` compiles
a task's checks at set-up (each column's bounds rounded as numpy compares them, the finite test
folded into them) and checks a job's valid rows in one pass as Python numbers (``tolist``), with
numpy only for whole arrays: padding, covariances, predicted paths.

On "maybe not" the caller runs the checks of ``invariants.py``, which give the verdict and its
message: both are theirs by construction, as long as the screen is sound (it passes nothing they
reject). It compares in the same rounding (a float32 output against bounds rounded to float32, as
numpy compares with a Python float; integers in float64), differences ids as numpy does (an int32
difference wraps; a float32 one below 1e-30 defers), and keeps a margin of 1e-9 where math's and
numpy's hypot, atan2 and remainder may differ in the last bit (1e-6 for numpy's float32 hypot,
1e-5 for steps squared in float32), deferring inside it. A NaN, an odd shape or dtype, or a count
that is not a whole number always defers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .invariants import OutputChecks


_EXACT = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32))   # exact as Python numbers
_INT32_MAX = 2 ** 31 - 1


def _rounded(bound: float, dtype: np.dtype) -> float:
    """``bound`` as numpy compares it with an array of ``dtype``: rounded to its float type (a Python
    float is cast to the array's), else unchanged (an integer array compares in float64)."""
    return float(np.asarray(bound, dtype)) if dtype.kind == "f" else float(bound)


def _all(mask: np.ndarray) -> bool:
    """``mask.all()`` without its Python wrapper (a count in C)."""
    return np.count_nonzero(mask) == mask.size


@dataclass(frozen=True)
class Plan:
    """One output's checks as the screen reads them, with its bounds per element type (filled on use)."""

    checks: OutputChecks
    width: int                        # columns the column checks need
    bounds: dict[tuple[np.dtype, int], tuple[list[float], list[float]]] = field(default_factory=dict)

    def bounds_for(self, dtype: np.dtype, width: int) -> tuple[list[float], list[float]]:
        """Each column's bounds as numpy compares them (``_rounded``); undeclared columns get the largest
        finite float where finite values are required (so the bounds show them), else +-inf."""
        got = self.bounds.get((dtype, width))
        if got is None:
            c = self.checks
            edge = float(np.finfo(dtype).max) if c.finite and dtype.kind == "f" else math.inf
            lo, hi = [-edge] * width, [edge] * width
            declared = {col: c.range[None] for col in range(width)} if None in c.range else c.range
            for col, (low, high) in declared.items():
                lo[col], hi[col] = _rounded(low, dtype), _rounded(high, dtype)
            got = self.bounds[(dtype, width)] = (lo, hi)
        return got


def _plan(c: OutputChecks) -> Plan:
    """One output's checks, with the columns they need."""
    used = [col for col in c.range if col is not None] + list(c.integer) + [i for pair in c.ordered for i in pair]
    if c.increasing is not None or c.below is not None:
        used.append(c.increasing or 0)
    if c.speed is not None:
        used += c.speed[:2]
    return Plan(c, max(used, default=-1) + 1)


def _first(a: np.ndarray) -> float:
    """``invariants._scalar``: the first element as a float, 0.0 when empty."""
    return float(a.item(0)) if a.size else 0.0


def _whole(c: float) -> bool:
    return math.isfinite(c) and c == int(c)


def _rows_hold(rows: list[list[Any]], p: Plan, dtype: np.dtype, n: int, outputs: Mapping[str, np.ndarray]) -> bool:
    """The row checks on the valid rows as Python numbers (one pass, no numpy call per check: after the
    ops' kernels the caches are cold, and every numpy call costs tens of us there)."""
    c = p.checks
    lo, hi = p.bounds_for(dtype, len(rows[0])) if rows else ([], [])
    ints = c.integer if dtype.kind == "f" else ()
    speed = c.speed
    v_max = speed[2] * (1 - 1e-6) if speed else 0.0   # numpy's float32 hypot is within 1e-7 of math.hypot's
    for r in rows:
        for x, low, high in zip(r, lo, hi):
            if not low <= x <= high:   # a NaN fails
                return False
        for j in ints:
            if not r[j].is_integer():   # x == np.round(x) for a finite x
                return False
        for a, b in c.ordered:
            if not r[a] < r[b]:
                return False
        if speed and not math.hypot(r[speed[0]], r[speed[1]]) <= v_max:
            return False
    if c.increasing is not None and n > 1:
        cut = n
        if c.split is not None:
            s = _first(outputs[c.split])
            if not math.isfinite(s):
                return False
            cut = int(min(max(s, 0), n))
        ids = [r[c.increasing] for r in rows]
        for i in range(n - 1):
            d = ids[i + 1] - ids[i]   # np.diff: an int32 difference wraps, a tiny float32 one may flush
            if i != cut - 1 and not (0 < d <= _INT32_MAX if dtype.kind == "i" else d > 1e-30):
                return False
    if c.below is not None and n and not max(r[c.increasing or 0] for r in rows) < _first(outputs[c.below]):
        return False
    if c.kinematics is not None and not _kinematics_hold(rows, c.kinematics, _rounded(math.pi + 1e-3, dtype)):
        return False
    return True


def _kinematics_hold(rows: list[list[float]], k: Mapping[str, float], yaw_bound: float) -> bool:
    """``invariants._kinematics`` answers None: the same float64 arithmetic on the same values, with a
    margin of 1e-9 where math's hypot, atan2 and remainder may differ from numpy's in the last bit (and
    deferring a step within 1e-9 of the 0.2 m that decides which yaws are checked)."""
    if len(rows) < 1 or len(rows[0]) < 5:
        return False
    dt, vmax = k["dt"], k["v_max"]
    amax, tol, ytol = k.get("a_max", 10.0), k.get("tol", 0.25), k.get("yaw_tol", 0.1)
    for i, r in enumerate(rows):
        if not (abs(r[4] - i * dt) <= 1e-4 and 0 <= r[3] <= vmax and abs(r[2]) <= yaw_bound):
            return False
    steps, headings = [], []
    for i in range(len(rows) - 1):
        a, b = rows[i], rows[i + 1]
        if not abs(b[3] - a[3]) <= amax * dt:
            return False
        dx, dy = b[0] - a[0], b[1] - a[1]
        step = math.hypot(dx, dy)
        if not abs(step - 0.5 * (b[3] + a[3]) * dt) <= tol - 1e-9 or abs(step - 0.2) < 1e-9:
            return False
        steps.append(step)
        headings.append((i, math.atan2(dy, dx)) if step > 0.2 else None)
    bend = amax * dt * dt + 1e-3 - 1e-9
    for i in range(len(rows) - 2):
        a, b, c = rows[i], rows[i + 1], rows[i + 2]
        if not math.hypot((c[0] - b[0]) - (b[0] - a[0]), (c[1] - b[1]) - (b[1] - a[1])) <= bend:
            return False
    moving = [h for h in headings if h is not None]
    if moving:
        limit = ytol + 0.5 * k.get("kappa_max", 0.2) * max(s for s in steps if s > 0.2) - 1e-9
        for i, heading in moving:
            for yaw in (rows[i][2], rows[i + 1][2]):
                if not abs((heading - yaw + math.pi) % (2 * math.pi) - math.pi) <= limit:
                    return False
    return True


def _cholesky_holds(mats: list[list[list[float]]]) -> bool:
    """Each matrix (exactly symmetric) is positive definite by a margin numpy's eigenvalues cannot
    miss: a Cholesky factorization of ``m - d I`` succeeds, d = 1e-9 x its largest diagonal entry. Its
    rounding moves an eigenvalue by at most about 2e-15 x that entry (Higham, Thm 10.3), LAPACK's
    eigenvalues by about 1e-13 x; so the smallest is above 0 in numpy's as in exact arithmetic."""
    for m in mats:
        k = len(m)
        top = max(m[i][i] for i in range(k))
        if not 1e-150 < top < 1e150:   # no underflow or overflow in the squares below
            return False
        shift = 1e-9 * top
        low = [[0.0] * k for _ in range(k)]
        for j in range(k):
            d = m[j][j] - shift - sum(low[j][q] * low[j][q] for q in range(j))
            if not d > 0:
                return False
            low[j][j] = math.sqrt(d)
            for i in range(j + 1, k):
                low[i][j] = (m[i][j] - sum(low[i][q] * low[j][q] for q in range(j))) / low[j][j]
    return True


def _positive_definite(v: np.ndarray) -> bool:
    """``check_output``'s covariance checks hold: symmetric (exactly, or within its tolerance) and
    numpy's eigenvalues all positive."""
    m = v.astype(np.float64)
    if not _all(v == np.swapaxes(v, -1, -2)):   # exactly symmetric passes the tolerance; else its test
        if not np.abs(m - np.swapaxes(m, -1, -2)).max() <= 1e-6 * max(1.0, float(np.abs(m).max())):
            return False
    return bool(np.linalg.eigvalsh(m).min() > 0)


def _steps_hold(x: np.ndarray, k: Mapping[str, float]) -> bool:
    """``invariants._steps`` answers None: every squared step, in float32, under the squared limit less
    1e-5 (float32's differences and squares are within 4e-7 of the float64 hypot the check takes)."""
    if x.shape[1] < 2:
        return True
    d = x[:, 1:, :2] - x[:, :-1, :2]
    limit = k["v_max"] * k["dt"]
    return bool(np.max(d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1], initial=0.0) <= limit * limit * (1 - 1e-5))


def _array_holds(v: np.ndarray, p: Plan) -> bool:
    """The element checks of an output that is not a table of rows (a matrix per row, paths): numpy."""
    c = p.checks
    every = c.range.get(None)
    if every is not None and v.size:
        if not (v.min() >= every[0] and v.max() <= every[1]):   # numpy's comparison with a Python float
            return False
        shown = all(map(math.isfinite, every))   # finite bounds leave no NaN or inf
    else:
        shown = False
    if c.finite and v.dtype.kind == "f" and not shown and not _all(np.isfinite(v)):
        return False
    for col, (lo, hi) in c.range.items():   # column j of v is v[:, j], whatever follows it
        if col is not None and v.size and not (v[:, col].min() >= lo and v[:, col].max() <= hi):
            return False
    if c.integer or c.ordered or c.speed is not None or c.increasing is not None or c.below is not None \
            or c.kinematics is not None:
        return False   # row checks on an output that is not a table: the checks say what they make of it
    return True


def _holds(outputs: Mapping[str, np.ndarray], p: Plan) -> bool:
    """True only if ``invariants.check_output`` finds nothing wrong with this output."""
    c = p.checks
    x = outputs[c.output]
    n = len(x) if x.ndim else 1
    if c.rows is not None:
        count = _first(outputs[c.rows])
        if not x.ndim or not _whole(count) or not 0 <= count <= n:
            return False
        n = int(count)
    if p.width and (x.ndim < 2 or x.shape[1] < p.width):
        return False   # a column the checks name is missing: the checks say how
    if c.capacity is not None:
        s = _first(x)
        if not _whole(s) or not 0 <= s <= c.capacity:
            return False
    if c.zero_padding and x.ndim and np.count_nonzero(x[n:]):
        return False
    v = x[:n] if x.ndim else x
    if x.dtype in _EXACT and v.ndim <= 2:
        rows = v.tolist() if v.ndim == 2 else [[e] for e in (v.tolist() if v.ndim else [v.item()])]
        if not _rows_hold(rows, p, x.dtype, n, outputs):
            return False
    elif not _array_holds(v, p):
        return False
    if c.at_most is not None and not _first(x) <= _first(outputs[c.at_most]):
        return False
    if c.equals is not None:
        ref = np.asarray(outputs[c.equals[0]])
        if not x.size or ref.size <= c.equals[1] or not _first(x) == float(ref.item(c.equals[1])):
            return False   # equal as Python floats: equal as numpy compares them; NaN: the check decides
    if c.partition is not None and n:
        at_least, split = c.partition
        cut = _first(outputs[split])
        if not _whole(cut) or not 0 <= cut <= n:
            return False
        t = _rounded(at_least, x.dtype)
        if v.ndim != 1 or not all(e >= t for e in v[:int(cut)].tolist()) or \
                not all(e < t for e in v[int(cut):].tolist()):
            return False
    if c.positive_definite and n:
        if v.ndim != 3 or v.shape[-1] != v.shape[-2]:
            return False
        mats = v.tolist() if x.dtype in _EXACT else None
        if mats is not None and all(m[i][j] == m[j][i] for m in mats for i in range(len(m)) for j in range(i)):
            if not _cholesky_holds(mats):   # finite values: shown by the bounds (NaN is never symmetric)
                return False
        elif not _positive_definite(v):
            return False
    if c.steps is not None and (v.ndim != 3 or v.shape[2] < 2 or not _steps_hold(v, c.steps)):
        return False
    return True


class Screen:
    """A task's checks compiled once: ``holds`` is True only when ``invariants.violation`` finds nothing."""

    def __init__(self, checks: tuple[OutputChecks, ...]) -> None:
        self.plans = tuple(_plan(c) for c in checks)

    def holds(self, outputs: Mapping[str, Any]) -> bool:
        """Every check holds of ``outputs`` (numpy arrays; with the inputs ``equals`` names); False: maybe not."""
        try:
            for p in self.plans:
                if not _holds(outputs, p):
                    return False
            return True
        except (IndexError, ValueError, TypeError, np.linalg.LinAlgError):
            return False   # a shape or value the checks refuse: they say what
