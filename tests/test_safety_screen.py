"""The compiled screen of the output invariants: it passes every clean output and flags every output the
checks of ``invariants.py`` reject (which then give the verdict and its message), for every check kind,
under every bit flip of the outputs, at the bounds' float32 rounding and where int32 differences wrap."""
from __future__ import annotations

import numpy as np
import pytest

from rt_runtime.faults.inject import flip_bit
from rt_runtime.safety.invariants import CHECK_KEYS, parse_checks, violation
from rt_runtime.safety.screen import Screen

from test_safety_invariants import KIN, TRACKS, trajectory, tracks

# A tracker's outputs with the checks the other fixtures lack: a split id order, a count not above
# another, a stamp passed on, hits partitioned at the split, predicted paths, bounds on every element.
FUSION = {"count": {"capacity": 4}, "confirmed": {"capacity": 4, "at_most": "count"},
          "next_id": {"range": [1, 1000]}, "stamp": {"equals": ["odom", 5]},
          "tracks": {"rows": "count", "zero_padding": True, "increasing": 0, "split": "confirmed",
                     "below": "next_id", "range": {1: [-50, 50]}},
          "hits": {"rows": "count", "zero_padding": True, "partition": [3, "confirmed"], "range": [0, 1000]},
          "paths": {"steps": {"dt": 0.1, "v_max": 50}, "range": [-1000, 1000]}}


def fusion() -> dict[str, np.ndarray]:
    """Three tracks: two confirmed (ids 4, 9), one tentative (id 2: ids restart after the split)."""
    tr = np.zeros((4, 2), np.float32)
    tr[:3] = [[4, 1.0], [9, -2.0], [2, 30.0]]
    paths = np.zeros((4, 5, 2), np.float32)
    paths[:, :, 0] = np.arange(5) * 2.0   # 2 m per 0.1 s: 20 m/s
    return {"count": np.array([3], np.int32), "confirmed": np.array([2], np.int32),
            "next_id": np.array([10], np.int32), "stamp": np.array([12.5]),
            "odom": np.array([0, 0, 0, 0, 0, 12.5]), "tracks": tr,
            "hits": np.array([5, 3, 1, 0], np.int32), "paths": paths}


COUNTS = {"a": {"capacity": 4}, "b": {"capacity": 4, "at_most": "a"}}


def counts() -> dict[str, np.ndarray]:
    """Two counts, the second not above the first."""
    return {"a": np.array([2], np.int32), "b": np.array([1], np.int32)}


def _set(name: str, index: tuple, value: float):
    return lambda o: o[name].__setitem__(index, value)


# (fixture, checks, spoil, what the message says): every check kind of docs/SAFETY.md's table
CASES = [
    (tracks, TRACKS, _set("count", (0,), 5), "count = 5 is outside 0..4"),                       # capacity
    (tracks, TRACKS, _set("count", (0,), 1), "rows past count = 1 are not empty"),              # zero_padding
    (tracks, TRACKS, _set("tracks", (1, 0), 2), "ids not strictly increasing"),                  # increasing
    (tracks, TRACKS, _set("tracks", (1, 0), 8), "not below next_id"),                            # below
    (tracks, TRACKS, _set("tracks", (0, 0), 2.5), "a non-integer value"),                        # integer
    (tracks, TRACKS, _set("tracks", (0, 2), 80.0), "a speed of 80.0"),                           # speed
    (tracks, TRACKS, _set("tracks", (0, 4), 0.0), "column 4: 0 outside [0.1, 30]"),              # range by column
    (tracks, TRACKS, _set("tracks", (0, 1), np.inf), "a non-finite value"),                      # finite
    (lambda: {"w": np.zeros((2, 3), np.float32)}, {"w": {"finite": True}}, _set("w", (1, 2), np.nan),
     "w: a non-finite value"),                                                                 # finite alone
    (tracks, TRACKS, _set("cov", (0, 1, 1), -0.1), "not positive definite"),                     # positive_definite
    (tracks, TRACKS, _set("cov", (0, 0, 1), 0.1), "not symmetric"),
    (tracks, TRACKS, _set("boxes", (1, 1), 4.0), "an empty or inverted box"),                    # ordered
    (fusion, FUSION, _set("confirmed", (0,), 4), "confirmed = 4 is above count = 3"),             # at_most
    (counts, COUNTS, _set("b", (0,), 3), "b = 3 is above a = 2"),
    (counts, COUNTS, _set("a", (0,), 5), "a = 5 is outside 0..4"),                                  # capacity alone
    (lambda: {"r": np.zeros((2, 2), np.float32), "k": np.array([1], np.int32)}, {"r": {"rows": "k"}},
     _set("k", (0,), 3), "k = 3 is outside 0..2 (the rows of r)"),                                # rows alone
    (fusion, FUSION, _set("confirmed", (0,), 3), "ids not strictly increasing"),                 # split
    (fusion, FUSION, _set("count", (0,), 2), "rows past count = 2 are not empty"),               # rows
    (fusion, FUSION, _set("stamp", (0,), 12.4), "stamp = 12.4 is not odom[5]"),               # equals
    (fusion, FUSION, _set("hits", (1,), 2), "the rows at or above 3 are not exactly the first confirmed"),  # partition
    (fusion, FUSION, _set("next_id", (0,), 0), "next_id: 0 outside [1, 1000]"),                  # range, every element
    (fusion, FUSION, _set("paths", (3, 2, 1), 6.0), "a predicted step of"),                      # steps
    (lambda: {"trajectory": trajectory()}, KIN, _set("trajectory", (5, 3), 50.0), "speed"),     # kinematics
    (lambda: {"trajectory": trajectory(20.0, 0.0)}, {"trajectory": {"kinematics": {"dt": 0.1, "v_max": 25}}},
     lambda o: o.__setitem__("trajectory", trajectory(27.0, 0.0)), "a speed 27 m/s is outside 0..25"),   # v_max alone
    (lambda: {"trajectory": trajectory()}, KIN, _set("trajectory", (3, 4), 0.35), "grid"),
    (lambda: {"trajectory": trajectory()}, KIN, _set("trajectory", (10, 2), 0.4), "yaw"),
    (lambda: {"trajectory": trajectory()}, KIN, lambda o: o["trajectory"].__setitem__((10, 1), o["trajectory"][10, 1] + 0.1),
     "a position off the path"),
]


@pytest.mark.parametrize("make, spec, spoil, msg", CASES)
def test_each_check_is_flagged_and_keeps_its_message(make, spec, spoil, msg) -> None:
    checks = parse_checks(spec)
    screen = Screen(checks)
    good = make()
    assert violation(good, checks) is None
    assert screen.holds(good)   # clean outputs take the fast path
    bad = {k: v.copy() for k, v in good.items()}
    spoil(bad)
    why = violation(bad, checks)
    assert why is not None and msg in why, why
    assert not screen.holds(bad)


def test_the_cases_cover_every_check_kind() -> None:
    used = {key for _, spec, _, _ in CASES for out in spec.values() for key in out}
    assert set(CHECK_KEYS) - {"finite"} <= used   # finite: on by default (the inf case)


@pytest.mark.parametrize("make, spec", [(tracks, TRACKS), (fusion, FUSION),
                                        (lambda: {"trajectory": trajectory()}, KIN),
                                        (lambda: {"trajectory": trajectory(8.0, -4.0, 3.5)}, KIN)])
def test_no_bit_flip_the_checks_reject_passes_the_screen(make, spec) -> None:
    checks = parse_checks(spec)
    screen = Screen(checks)
    good = make()
    rejected = deferred = 0
    for name in {c.output for c in checks}:
        size = good[name].size
        for e in range(size):
            for bit in range(good[name].dtype.itemsize * 8):
                bad = {k: v.copy() for k, v in good.items()}
                flip_bit(bad[name], (e + 0.5) / size, bit)
                why = violation(bad, checks)
                if screen.holds(bad):
                    assert why is None, (name, e, bit, why)
                rejected += why is not None
                deferred += why is None and not screen.holds(bad)
    assert rejected > 0
    assert deferred <= rejected // 10, (deferred, rejected)   # the screen rarely sends clean outputs to the checks


def test_bounds_compare_in_the_outputs_float_type() -> None:
    # float32(0.1) is above the float64 0.1; numpy compares a float32 with the bound rounded to float32
    checks = parse_checks({"a": {"range": {0: [0, 0.1]}}, "b": {"range": [0, 0.1]}, "n": {"range": [0, 2.5]}})
    screen = Screen(checks)
    for value in (np.float32(0.1), np.nextafter(np.float32(0.1), np.float32(1))):
        for n in (2, 3):
            out = {"a": np.full((2, 1), value, np.float32), "b": np.full(3, value, np.float32),
                   "n": np.array([n], np.int32)}
            assert screen.holds(out) == (violation(out, checks) is None), (value, n)
    assert screen.holds({"a": np.full((2, 1), np.float32(0.1)), "b": np.zeros(3, np.float32),
                         "n": np.array([2], np.int32)})


def test_int32_ids_whose_difference_wraps_are_not_increasing() -> None:
    # np.diff of int32 ids wraps: -2**31 then 2**31 - 1 differ by -1, which the check rejects
    checks = parse_checks({"ids": {"increasing": 0}})
    out = {"ids": np.array([[-2 ** 31], [2 ** 31 - 1]], np.int32)}
    assert "ids not strictly increasing" in violation(out, checks)
    assert not Screen(checks).holds(out)
