"""Argument types shared by the subcommands: numbers checked by argparse itself.

Each function takes the flag's text and returns the value, or raises ``ArgumentTypeError`` with
what was expected; ``OneLineParser`` prints that as one line naming the flag, e.g.
``rt-runtime replay: error: argument --speed: expected 'max' or a factor from 0.001 to 1000, found 'inf'``,
and exits with status 2 (no usage block, no traceback). Non-finite values (inf, nan) never pass.
"""
from __future__ import annotations

import argparse
import math
import sys
from typing import Any, Callable, NoReturn

MAX_WORKERS = 1024                 # the config's own limit (config/stack.py)
MAX_SECONDS = 365 * 86_400.0       # a duration flag in seconds: at most a year
MIN_SPEED, MAX_SPEED = 0.001, 1000.0


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str, prog: str | None = None) -> NoReturn:
        prog = prog or self.prog
        message = " ".join(message.split())   # argparse may wrap; keep it one line
        self.exit(2, f"{prog}: error: {message} (see {prog} --help)\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """As argparse's, but an unknown argument is named with the subcommand it was given to."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(ns, "command", None)
            self.error(f"unrecognized arguments: {' '.join(extras)}",
                       prog=f"{self.prog} {command}" if command else None)
        return ns


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:39] + "…")


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, found {_shown(text)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {what}, found {_shown(text)} (not a finite number)")
    return value


def _integer(text: str, what: str) -> int:
    try:
        return int(text.strip(), 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, found {_shown(text)}") from None


def float_range(low: float, high: float, *, low_open: bool = False, what: str = "") -> Callable[[str], float]:
    """A type: a finite float with low <= x <= high (low < x when ``low_open``); ``what`` describes it."""
    what = what or f"a number {'above' if low_open else 'from'} {low:g} {'up ' if low_open else ''}to {high:g}"

    def parse(text: str) -> float:
        value = _number(text, what)
        if value > high or value < low or (low_open and value == low):
            raise argparse.ArgumentTypeError(f"expected {what}, found {_shown(text)}")
        return value

    return parse


def int_range(low: int, high: int, *, what: str = "") -> Callable[[str], int]:
    """A type: an integer with low <= n <= high; ``what`` describes it."""
    what = what or f"an integer from {low} to {high}"

    def parse(text: str) -> int:
        value = _integer(text, what)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {what}, found {_shown(text)}")
        return value

    return parse


def positive_float(text: str) -> float:
    """A finite number > 0 (at most 1e9)."""
    return float_range(0.0, 1e9, low_open=True, what="a positive number (at most 1e9)")(text)


def finite_nonneg_float(text: str) -> float:
    """A finite number >= 0 (at most 1e9)."""
    return float_range(0.0, 1e9, what="a number from 0 to 1e9")(text)


def seconds(text: str) -> float:
    """A duration in seconds: finite, > 0, at most a year."""
    return float_range(0.0, MAX_SECONDS, low_open=True, what="a positive number of seconds (at most a year)")(text)


def nonneg_seconds(text: str) -> float:
    """A wait in seconds: finite, >= 0, at most a year."""
    return float_range(0.0, MAX_SECONDS, what="a number of seconds from 0 to a year")(text)


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return int_range(1, sys.maxsize, what="a positive integer")(text)


def nonneg_int(text: str) -> int:
    """An integer >= 0."""
    return int_range(0, sys.maxsize, what="a non-negative integer")(text)


def workers(text: str) -> int:
    """A worker count: 1 to MAX_WORKERS (0 is not "the default": leave the flag out for that)."""
    return int_range(1, MAX_WORKERS, what=f"a worker count from 1 to {MAX_WORKERS}")(text)


def workers_or_auto(text: str) -> int | str:
    """``auto`` or a worker count."""
    if text.strip() == "auto":
        return "auto"
    return int_range(1, MAX_WORKERS, what=f"'auto' or a worker count from 1 to {MAX_WORKERS}")(text)


def factor(text: str) -> float:
    """A speed factor of real time: MIN_SPEED to MAX_SPEED."""
    return float_range(MIN_SPEED, MAX_SPEED, what=f"a factor from {MIN_SPEED:g} to {MAX_SPEED:g}")(text)


def speed(text: str) -> str | float:
    """``max`` or a speed factor of real time (MIN_SPEED to MAX_SPEED)."""
    if text.strip() == "max":
        return "max"
    try:
        return factor(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected 'max' or a factor from {MIN_SPEED:g} to {MAX_SPEED:g}, "
                                         f"found {_shown(text)}") from None


def duration_text(text: str) -> str:
    """A duration with a unit ("500ms"), checked here and passed on as written."""
    from ..core.units import DurationError, parse_duration

    try:
        ns = parse_duration(text, what="duration")
    except DurationError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("duration: ")) from None
    if ns <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration, found {_shown(text)}")
    return text


def device(text: str) -> str:
    """``cpu``, ``cpu-async`` (the asynchronous twin of CUDA), ``cuda`` or ``cuda:N`` present on this machine."""
    from ..config.stack import check_device
    from ..config.yamlfile import ConfigError

    try:
        return check_device(text.strip(), "--device")
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).rsplit("device: ", 1)[-1]) from None
