"""The field readers that reading a stack file (``stack.py``) and building it (``build.py``) share.

Each turns one field of a task or route entry into a value, or raises a ``ConfigError`` naming the
file, the entry and the field; none runs user code except ``resolve``, which imports what a
``package.module:function`` reference names.
"""
from __future__ import annotations

import importlib
import re
from typing import Any, Callable, Mapping

from ..core.units import DurationError, clip, parse_duration
from .yamlfile import ConfigError

MODULE_REF = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")   # the module part of a reference


def fail(source: str, where: str, message: str, *, task: str | None = None, fld: str | None = None) -> ConfigError:
    """The ConfigError for ``where`` in ``source`` (to raise): ``<file>: <where>: <message>``."""
    return ConfigError(source, f"{where}: {message}", task=task, field=fld)


def resolve(ref: object, source: str, where: str, task: str | None = None) -> Callable[..., Any]:
    """Import ``package.module:function`` named in a config; ConfigError (one line) for anything that fails."""
    module, _, name = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    if not MODULE_REF.fullmatch(module) or not name.isidentifier():
        why = " (a relative module path has no package to be relative to)" if module.startswith(".") else ""
        raise fail(source, where, f"expected 'package.module:function', found {clip(ref)}{why}", task=task)
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise fail(source, where, f"cannot import module '{module}' ({e})", task=task) from None
    except SyntaxError as e:
        raise fail(source, where, f"module '{module}' has a syntax error: {e.msg} ({e.filename}, line {e.lineno})",
                    task=task) from None
    except (Exception, SystemExit) as e:   # noqa: BLE001 - whatever the module does at import is the user's
        raise fail(source, where, f"importing module '{module}' failed: {type(e).__name__}: {e}", task=task) from None
    fn = getattr(mod, name, None)
    if fn is None:
        raise fail(source, where, f"module '{module}' has no '{name}'", task=task)
    if not callable(fn):
        raise fail(source, where, f"'{ref}' is not callable", task=task)
    return fn


def name_map(value: object, source: str, where: str, task: str | None = None) -> dict[str, str]:
    """A mapping of names to names (``inputs:``, ``outputs:``, ``channels:``); empty when absent."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise fail(source, where, f"expected a mapping of names to names, found {clip(value)}", task=task)
    return dict(value)


def parse_op_budgets(entry: Mapping[str, Any], source: str, task: str) -> dict[str, int]:
    """A task's ``op_budgets: {op: duration}`` in ns (op names are checked against the graph when it is built)."""
    raw = entry.get("op_budgets")
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise fail(source, f"task '{task}': op_budgets", f"expected a mapping of op names to durations, "
                    f"found {clip(raw)}", task=task, fld="op_budgets")
    out = {}
    for op, value in raw.items():
        try:
            ns = parse_duration(value, what=f"op_budgets.{op}")
        except DurationError as e:
            raise fail(source, f"task '{task}'", str(e), task=task, fld="op_budgets") from None
        if ns <= 0:
            raise fail(source, f"task '{task}': op_budgets.{op}", f"must be positive, found {clip(value)}",
                        task=task, fld="op_budgets")
        out[str(op)] = ns
    return out
