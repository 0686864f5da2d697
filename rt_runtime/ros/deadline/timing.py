"""A callback's timing keys, read from any of the three places that may give them, and merged.

Pure (no rclpy): the YAML file's entries (``config``), the ``@deadline`` decorator on the callback
function (``decorator``) and the node's ``rt.<callback>.<key>`` parameters (``params``) each give some
of the keys below; ``parse_fields`` checks the ones given (one line naming the source and the key),
``merge`` lays them over each other key by key (the later wins: decorator, then file, then
parameter) and checks what only the whole can say (a reaction to an overrun needs a budget, degrade
a fallback).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from ...config.fields import resolve
from ...config.yamlfile import ConfigError, suggest
from ...core.task import CRITICALITIES
from ...core.units import DurationError, clip, parse_duration
from .jobs import REACTIONS, Timing

DURATIONS = ("period", "deadline", "budget")
TIMING_KEYS = (*DURATIONS, "priority", "criticality", "on_miss", "on_overrun", "fallback")
OVERRUNS = ("none", "skip", "degrade")
LAYERS = ("decorator", "file", "parameter")   # lowest precedence first


def choice(source: str, where: str, value: Any, choices: tuple[str, ...]) -> str:
    """``value`` when it is one of ``choices``; else ConfigError naming them and a close one."""
    if isinstance(value, str) and value in choices:
        return value
    raise ConfigError(source, f"{where}: expected one of {', '.join(choices)}, found {clip(value)}"
                              f"{suggest(value, choices) if isinstance(value, str) else ''}", field=where)


def duration(source: str, where: str, value: Any) -> int:
    """A positive duration with its unit ("20ms") in ns; else ConfigError."""
    if isinstance(value, str) and value.strip().startswith("-"):
        raise ConfigError(source, f"{where}: must not be negative, found {clip(value)}", field=where)
    try:
        ns = parse_duration(value, what=where)
    except DurationError as e:
        raise ConfigError(source, str(e), field=where) from None
    if ns <= 0:
        raise ConfigError(source, f"{where}: must be positive, found {clip(value)}", field=where)
    return ns


def parse_fields(values: Mapping[str, Any], source: str, at: str = "") -> dict[str, Any]:
    """The timing keys ``values`` gives (None: not given), checked: durations in ns, ``fallback`` a callable
    (given as one, or as ``package.module:function``). Keys outside ``TIMING_KEYS`` are the caller's."""
    out: dict[str, Any] = {}
    for k in TIMING_KEYS:
        v = values.get(k)
        if v is None:
            continue
        where = f"{at}.{k}" if at else k
        if k in DURATIONS:
            out[k] = duration(source, where, v)
        elif k == "priority":
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(source, f"{where}: expected an integer, found {clip(v)}", field=k)
            out[k] = v
        elif k == "criticality":
            out[k] = choice(source, where, v, CRITICALITIES)
        elif k == "on_miss":
            out[k] = choice(source, where, v, REACTIONS)
        elif k == "on_overrun":
            out[k] = choice(source, where, v, OVERRUNS)
        else:
            out[k] = v if callable(v) else resolve(v, source, where)
    return out


def merge(layers: Mapping[str, Mapping[str, Any]], source: str, at: str = "", rule: int | None = None) -> Timing:
    """One Timing from the layers (``LAYERS``' names, lowest precedence first), key by key; ConfigError when
    the result is incomplete (a reaction to an overrun without a budget, degrade without a fallback)."""
    f: dict[str, Any] = {}
    given: dict[str, str] = {}
    for name in LAYERS:
        for k, v in (layers.get(name) or {}).items():
            f[k], given[k] = v, name
    pre = f"{at}: " if at else ""
    on_miss, on_overrun = f.get("on_miss", "none"), f.get("on_overrun", "none")
    if on_overrun != "none" and "budget" not in f:
        raise ConfigError(source, f"{pre}on_overrun: {on_overrun} (from the {given['on_overrun']}) needs a "
                                  f"'budget:' to overrun", field="on_overrun")
    if "degrade" in (on_miss, on_overrun) and "fallback" not in f:
        raise ConfigError(source, f"{pre}degrade needs 'fallback: package.module:function' (called instead of "
                                  f"the callback on the next release)", field="fallback")
    fallback: Callable[..., Any] | None = f.get("fallback")
    return Timing(f.get("period"), f.get("deadline"), f.get("budget"), f.get("priority"),
                  f.get("criticality", "low"), on_miss, on_overrun, fallback, rule)
