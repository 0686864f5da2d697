"""Durations with units: configuration says "100ms", the runtime counts integer nanoseconds."""
from __future__ import annotations

import re
import reprlib

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ns|us|µs|ms|s)\s*$")

# The longest duration a configuration may give (one day): periods, budgets and deadlines up to it
# keep every analysis sum and hyperperiod far from overflow, and a longer one is a typo.
MAX_DURATION_NS = 86_400 * 1_000_000_000
MAX_DURATION_TEXT = "1 day (86400s)"

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict, _SHORT.maxset = 3, 6, 6, 4, 6
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 100, 100, 60


def clip(value: object, limit: int = 80) -> str:
    """``repr(value)`` for an error message: one line, at most ``limit`` characters ("…" where cut).

    Never walks a whole nested value (a YAML alias bomb is millions of entries deep), and a
    string's newlines are escaped, so the message stays one short line.
    """
    try:
        text = _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is still named
        text = f"<{type(value).__name__}>"
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= limit else text[: limit - 1] + "…"


class DurationError(ValueError):
    """A duration that is not a number followed by a unit, or one longer than MAX_DURATION_NS."""


def parse_duration(text: object, *, what: str = "duration") -> int:
    """Parse "4ms", "250us", "1.5s" or "500ns" into integer nanoseconds (at most one day).

    A bare number is an error: the unit is what keeps a config readable and safe.
    """
    if isinstance(text, bool) or not isinstance(text, str):
        raise DurationError(
            f"{what}: expected a duration with a unit such as \"10ms\", found {clip(text)}"
            + (" (a bare number has no unit)" if isinstance(text, (int, float)) else "")
        )
    m = DURATION_RE.match(text)
    if m is None:
        raise DurationError(f"{what}: expected a duration such as \"10ms\", \"250us\" or \"1.5s\", found {clip(text)}")
    value, unit = m.groups()
    number = float(value)
    if number * _UNITS_NS[unit] > MAX_DURATION_NS:
        raise DurationError(f"{what}: at most {MAX_DURATION_TEXT}, found {clip(text)}")
    return int(round(number * _UNITS_NS[unit]))


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
