"""Declared output invariants: physics and structure checks on a job's outputs, as plain functions.

A task's ``redundancy: {mode: invariants, checks: {...}}`` names, per graph output, what must hold
of it when it is published (docs/SAFETY.md, "Output invariants"). Every check reads only the
valid rows (``rows``: the output holding the row count) and answers None (holds) or one line
saying what is wrong. Pure: numpy arrays in, strings out; no torch, no clock, no I/O.

    checks:
      boxes: {rows: box_count, range: {3: [0.1, 30]}}          # column 3 (length) within [0.1, 30] m
      box_count: {capacity: 128}                               # 0 <= count <= 128
      camera_boxes: {rows: camera_box_count, ordered: [[0, 2], [1, 3]]}   # u1 < u2, v1 < v2
      tracks: {rows: track_count, zero_padding: true, increasing: 0, below: next_id,
               integer: [0, 1], speed: [4, 5, 70.0]}           # ids, classes; |(vx, vy)| <= 70 m/s
      track_cov: {rows: track_count, positive_definite: true}
      trajectory: {kinematics: {dt: 0.1, v_max: 45, a_max: 10, tol: 0.25}}

Finite values are always required of the valid rows of a floating-point output that has checks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

CHECK_KEYS = ("rows", "capacity", "finite", "range", "integer", "ordered", "zero_padding", "increasing", "split",
              "below", "at_most", "equals", "partition", "speed", "positive_definite", "kinematics", "steps")
KINEMATICS_KEYS = ("dt", "v_max", "a_max", "tol", "yaw_tol", "kappa_max")
STEPS_KEYS = ("dt", "v_max")


@dataclass(frozen=True)
class OutputChecks:
    """What must hold of one graph output (see the module docstring for the keys)."""

    output: str
    rows: str | None = None
    capacity: int | None = None
    finite: bool = True
    range: Mapping[int | None, tuple[float, float]] = field(default_factory=dict)   # None: every element
    integer: tuple[int, ...] = ()
    ordered: tuple[tuple[int, int], ...] = ()      # (a, b): column a < column b (a box's corners)
    zero_padding: bool = False
    increasing: int | None = None
    split: str | None = None                        # ids increase within [0, split) and [split, rows)
    below: str | None = None
    at_most: str | None = None                      # a count: not above this other count
    equals: tuple[str, int] | None = None           # a scalar: bit-equal to element i of an input or output
    partition: tuple[float, str] | None = None      # rows [0, split) >= value, rows [split, rows) below it
    speed: tuple[int, int, float] | None = None
    positive_definite: bool = False
    kinematics: Mapping[str, float] | None = None
    steps: Mapping[str, float] | None = None


def _number(v: object, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{what}: expected a number, found {v!r}")
    return float(v)


def _index(v: object, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{what}: expected a column index (an integer >= 0), found {v!r}")
    return v


def _pair(v: object, what: str) -> tuple[float, float]:
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise ValueError(f"{what}: expected [low, high], found {v!r}")
    lo, hi = _number(v[0], what), _number(v[1], what)
    if lo > hi:
        raise ValueError(f"{what}: low {lo} is above high {hi}")
    return lo, hi


def _sub(v: object, keys: tuple[str, ...], need: tuple[str, ...], what: str) -> dict[str, float]:
    if not isinstance(v, Mapping):
        raise ValueError(f"{what}: expected a mapping with {', '.join(keys)}, found {v!r}")
    bad = sorted(set(map(str, v)) - set(keys))
    if bad:
        raise ValueError(f"{what}: unknown key(s) {bad}; expected {', '.join(keys)}")
    missing = [k for k in need if k not in v]
    if missing:
        raise ValueError(f"{what}: missing {', '.join(missing)}")
    out = {k: _number(x, f"{what}.{k}") for k, x in v.items()}
    if any(x <= 0 for x in out.values()):
        raise ValueError(f"{what}: expected positive numbers, found {dict(v)!r}")
    return out


def parse_checks(value: object) -> tuple[OutputChecks, ...]:
    """A ``checks:`` mapping (output -> its checks) into specs; ValueError names the output and key."""
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"checks: expected a mapping of output names to their checks, found {value!r}")
    out = []
    for name, spec in value.items():
        where = f"checks.{name}"
        if not isinstance(spec, Mapping):
            raise ValueError(f"{where}: expected a mapping of checks ({', '.join(CHECK_KEYS)}), found {spec!r}")
        bad = sorted(set(map(str, spec)) - set(CHECK_KEYS))
        if bad:
            raise ValueError(f"{where}: unknown check(s) {bad}; expected {', '.join(CHECK_KEYS)}")
        rng = spec.get("range") or {}
        ranges: dict[int | None, tuple[float, float]] = {}
        if isinstance(rng, (list, tuple)):
            ranges[None] = _pair(rng, f"{where}.range")
        elif isinstance(rng, Mapping):
            for col, pair in rng.items():   # a column key may come as text (JSON, flow-style YAML): "3"
                col = int(col) if isinstance(col, str) and col.isdigit() else col
                ranges[_index(col, f"{where}.range")] = _pair(pair, f"{where}.range.{col}")
        else:
            raise ValueError(f"{where}.range: expected [low, high] or {{column: [low, high]}}, found {rng!r}")
        speed = spec.get("speed")
        if speed is not None:
            if not isinstance(speed, (list, tuple)) or len(speed) != 3:
                raise ValueError(f"{where}.speed: expected [vx column, vy column, max m/s], found {speed!r}")
            speed = (_index(speed[0], f"{where}.speed"), _index(speed[1], f"{where}.speed"),
                     _number(speed[2], f"{where}.speed"))
        cap = spec.get("capacity")
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
            raise ValueError(f"{where}.capacity: expected an integer >= 0, found {cap!r}")
        for k in ("finite", "zero_padding", "positive_definite"):
            if not isinstance(spec.get(k, False), bool):
                raise ValueError(f"{where}.{k}: expected true or false, found {spec[k]!r}")
        for k in ("rows", "below", "at_most", "split"):
            if spec.get(k) is not None and not isinstance(spec[k], str):
                raise ValueError(f"{where}.{k}: expected the name of an output, found {spec[k]!r}")
        integer = spec.get("integer") or []
        if not isinstance(integer, (list, tuple)):
            raise ValueError(f"{where}.integer: expected a list of column indices, found {integer!r}")
        inc = spec.get("increasing")
        ordered = spec.get("ordered") or []
        if not isinstance(ordered, (list, tuple)) or not all(isinstance(p, (list, tuple)) and len(p) == 2
                                                             for p in ordered):
            raise ValueError(f"{where}.ordered: expected a list of [column a, column b] (a < b), found {ordered!r}")
        equals, part = spec.get("equals"), spec.get("partition")
        if equals is not None:
            if not isinstance(equals, (list, tuple)) or len(equals) != 2 or not isinstance(equals[0], str):
                raise ValueError(f"{where}.equals: expected [input or output name, element index], found {equals!r}")
            equals = (equals[0], _index(equals[1], f"{where}.equals"))
        if part is not None:
            if not isinstance(part, (list, tuple)) or len(part) != 2 or not isinstance(part[1], str):
                raise ValueError(f"{where}.partition: expected [threshold, split output], found {part!r}")
            part = (_number(part[0], f"{where}.partition"), part[1])
        out.append(OutputChecks(
            str(name), spec.get("rows"), cap, spec.get("finite", True), ranges,
            tuple(_index(c, f"{where}.integer") for c in integer),
            tuple((_index(a, f"{where}.ordered"), _index(b, f"{where}.ordered")) for a, b in ordered),
            spec.get("zero_padding", False),
            None if inc is None else _index(inc, f"{where}.increasing"), spec.get("split"), spec.get("below"),
            spec.get("at_most"), equals, part, speed,
            spec.get("positive_definite", False),
            None if spec.get("kinematics") is None else _sub(spec["kinematics"], KINEMATICS_KEYS, ("dt", "v_max"),
                                                             f"{where}.kinematics"),
            None if spec.get("steps") is None else _sub(spec["steps"], STEPS_KEYS, STEPS_KEYS, f"{where}.steps")))
    return tuple(out)


def referenced(checks: tuple[OutputChecks, ...]) -> set[str]:
    """Every output name the checks read (to validate against the graph's outputs)."""
    return {n for c in checks for n in (c.output, c.rows, c.below, c.at_most, c.split,
                                        c.partition[1] if c.partition else None) if n is not None}


def referenced_inputs(checks: tuple[OutputChecks, ...]) -> set[str]:
    """Names the ``equals`` checks read, which may be graph inputs as well as outputs."""
    return {c.equals[0] for c in checks if c.equals is not None}


# ---- the checks ---------------------------------------------------------------------------------
def _scalar(a: np.ndarray) -> float:
    return float(a.reshape(-1)[0]) if a.size else 0.0


def _count(outputs: Mapping[str, np.ndarray], c: OutputChecks, x: np.ndarray) -> tuple[int | None, str | None]:
    """The valid rows of ``x`` (its ``rows`` output), or why that count is impossible."""
    if c.rows is None:
        return len(x) if x.ndim else 1, None
    n = _scalar(outputs[c.rows])
    if not n == int(n) or n < 0 or n > len(x):
        return None, f"{c.rows} = {n:g} is outside 0..{len(x)} (the rows of {c.output})"
    return int(n), None


def _kinematics(x: np.ndarray, k: Mapping[str, float]) -> str | None:
    """A trajectory (x, y, yaw, v, t rows): times on the grid, speeds and steps that agree."""
    dt, vmax = k["dt"], k["v_max"]
    amax, tol, ytol = k.get("a_max", 10.0), k.get("tol", 0.25), k.get("yaw_tol", 0.1)
    t = x[:, 4].astype(np.float64)
    grid = np.arange(len(x)) * dt
    if np.abs(t - grid).max() > 1e-4:
        return "the times are off the trajectory's grid of {:g} s".format(dt)
    v = x[:, 3].astype(np.float64)
    if v.min() < 0 or v.max() > vmax:
        return f"a speed {v.min() if v.min() < 0 else v.max():.3g} m/s is outside 0..{vmax:g}"
    if np.abs(x[:, 2]).max() > np.pi + 1e-3:
        return "a yaw outside [-pi, pi]"
    if len(x) < 2:
        return None
    if np.abs(np.diff(v)).max() > amax * dt:
        return f"an acceleration above {amax:g} m/s^2"
    xy = x[:, :2].astype(np.float64)
    d = np.diff(xy, axis=0)
    step = np.hypot(d[:, 0], d[:, 1])
    expect = 0.5 * (v[1:] + v[:-1]) * dt
    bad = np.abs(step - expect) > tol
    if bad.any():
        i = int(np.argmax(bad))
        return f"step {i} -> {i + 1} is {step[i]:.3f} m; its speeds give {expect[i]:.3f} m"
    d2 = np.diff(xy, 2, axis=0)   # a point off a smooth path shows twice as far in its second difference
    if len(d2) and np.hypot(d2[:, 0], d2[:, 1]).max() > amax * dt * dt + 1e-3:
        return f"a position off the path (second difference above {amax:g} m/s^2 x dt^2)"
    moving = step > 0.2   # near a stop the planner's yaw is not the direction of travel (it ends at 0)
    if moving.any():   # each yaw against the steps on both sides of its point
        heading = np.arctan2(d[moving, 1], d[moving, 0])
        yaw = x[:, 2].astype(np.float64)
        limit = ytol + 0.5 * k.get("kappa_max", 0.2) * step[moving].max()
        for side in (yaw[:-1][moving], yaw[1:][moving]):
            off = np.abs((heading - side + np.pi) % (2 * np.pi) - np.pi)
            if off.max() > limit:
                return f"a yaw {off.max():.3f} rad off the direction of travel"
    return None


def _steps(x: np.ndarray, k: Mapping[str, float]) -> str | None:
    """Predicted paths (rows x steps x (x, y)): no step faster than v_max."""
    if x.shape[0] == 0 or x.shape[1] < 2:
        return None
    d = np.diff(x.astype(np.float64), axis=1)
    fast = np.hypot(d[..., 0], d[..., 1]).max()
    if fast > k["v_max"] * k["dt"]:
        return f"a predicted step of {fast:.2f} m in {k['dt']:g} s (above {k['v_max']:g} m/s)"
    return None


def check_output(outputs: Mapping[str, np.ndarray], c: OutputChecks) -> str | None:
    """None when every declared check of output ``c.output`` holds, else what does not."""
    x = outputs[c.output]
    n, why = _count(outputs, c, x)
    if why is not None:
        return why
    if c.capacity is not None and (_scalar(x) != int(_scalar(x)) or not 0 <= _scalar(x) <= c.capacity):
        return f"{c.output} = {_scalar(x):g} is outside 0..{c.capacity}"
    v = x[:n] if x.ndim else x
    floating = np.issubdtype(x.dtype, np.floating)
    if c.finite and floating and not np.isfinite(v).all():
        return f"{c.output}: a non-finite value in the valid rows"
    if c.zero_padding and x.ndim and np.any(x[n:] != 0):
        return f"{c.output}: rows past {c.rows} = {n} are not empty"
    for col, (lo, hi) in c.range.items():
        s = v if col is None else v[:, col]
        if s.size and (s.min() < lo or s.max() > hi):
            bad = s.min() if s.min() < lo else s.max()
            return f"{c.output}" + (f" column {col}" if col is not None else "") + f": {bad:g} outside [{lo:g}, {hi:g}]"
    for col in c.integer:
        s = v[:, col]
        if s.size and np.any(s != np.round(s)):
            return f"{c.output} column {col}: a non-integer value"
    for a, b in c.ordered:
        if n and np.any(v[:, a] >= v[:, b]):
            return f"{c.output}: column {a} not below column {b} (an empty or inverted box)"
    if c.increasing is not None and n > 1:
        cut = n if c.split is None else int(min(max(_scalar(outputs[c.split]), 0), n))
        ids = v[:, c.increasing]
        if np.any(np.diff(ids[:cut]) <= 0) or np.any(np.diff(ids[cut:]) <= 0):
            return f"{c.output} column {c.increasing}: ids not strictly increasing"
    if c.at_most is not None and _scalar(x) > _scalar(outputs[c.at_most]):
        return f"{c.output} = {_scalar(x):g} is above {c.at_most} = {_scalar(outputs[c.at_most]):g}"
    if c.equals is not None:
        ref = np.asarray(outputs[c.equals[0]]).reshape(-1)[c.equals[1]]
        if not (_scalar(x) == ref or (np.isnan(_scalar(x)) and np.isnan(ref))):
            return f"{c.output} = {_scalar(x)!r} is not {c.equals[0]}[{c.equals[1]}] = {ref!r}"
    if c.partition is not None and n:
        at_least, split = c.partition
        cut = _scalar(outputs[split])
        if cut != int(cut) or not 0 <= cut <= n or np.any(v[:int(cut)] < at_least) or np.any(v[int(cut):] >= at_least):
            return f"{c.output}: the rows at or above {at_least:g} are not exactly the first {split} = {cut:g}"
    if c.below is not None and n:
        top, limit = float(v[:, c.increasing or 0].max()), _scalar(outputs[c.below])
        if top >= limit:
            return f"{c.output}: id {top:g} not below {c.below} = {limit:g}"
    if c.speed is not None and n:
        vx, vy, vmax = c.speed
        s = float(np.hypot(v[:, vx], v[:, vy]).max())
        if s > vmax:
            return f"{c.output}: a speed of {s:.1f} m/s (above {vmax:g})"
    if c.positive_definite and n:
        m = v.astype(np.float64)
        if np.abs(m - np.swapaxes(m, -1, -2)).max() > 1e-6 * max(1.0, float(np.abs(m).max())):
            return f"{c.output}: a covariance is not symmetric"
        if np.linalg.eigvalsh(m).min() <= 0:
            return f"{c.output}: a covariance is not positive definite"
    if c.kinematics is not None:
        why = _kinematics(v, c.kinematics)
        if why is not None:
            return f"{c.output}: {why}"
    if c.steps is not None:
        why = _steps(v, c.steps)
        if why is not None:
            return f"{c.output}: {why}"
    return None


def violation(outputs: Mapping[str, np.ndarray], checks: tuple[OutputChecks, ...]) -> str | None:
    """The first declared invariant that does not hold of a job's outputs, or None (``outputs`` also
    holds the inputs that ``equals`` checks name)."""
    for c in checks:
        why = check_output(outputs, c)
        if why is not None:
            return why
    return None
