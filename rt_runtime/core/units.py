"""Durations with units: configuration says "100ms", the runtime counts integer nanoseconds."""
from __future__ import annotations

import re

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ns|us|µs|ms|s)\s*$")


class DurationError(ValueError):
    """A duration that is not a number followed by a unit."""


def parse_duration(text: object, *, what: str = "duration") -> int:
    """Parse "4ms", "250us", "1.5s" or "500ns" into integer nanoseconds.

    A bare number is an error: the unit is what keeps a config readable and safe.
    """
    if isinstance(text, bool) or not isinstance(text, str):
        raise DurationError(
            f"{what}: expected a duration with a unit such as \"10ms\", found {text!r}"
            + (" (a bare number has no unit)" if isinstance(text, (int, float)) else "")
        )
    m = _DURATION.match(text)
    if m is None:
        raise DurationError(f"{what}: expected a duration such as \"10ms\", \"250us\" or \"1.5s\", found {text!r}")
    value, unit = m.groups()
    ns = round(float(value) * _UNITS_NS[unit])
    return int(ns)


def format_duration(ns: int | float) -> str:
    """Render nanoseconds with the largest unit that keeps it readable (for tables and errors)."""
    a = abs(ns)
    if a >= 1_000_000_000:
        return f"{ns / 1e9:.3g}s"
    if a >= 1_000_000:
        return f"{ns / 1e6:.3g}ms"
    if a >= 1_000:
        return f"{ns / 1e3:.3g}us"
    return f"{ns:.0f}ns"
