"""Regression gates: bounds on dotted paths into a replay's JSON, checked per bag.

An expect file (YAML) maps a dotted path to its bounds::

    misses: {max: 0}
    quality.planning.collision_free_rate: {min: 1.0}
    tasks.planning.response_ms.p99: {max: 60}
    deterministic: {equal: true}

Each step of a path is a key of a mapping, or, in a list of mappings (``tasks``), the ``name`` of
one of them. A bag passes when every bound holds; a path the document does not have is a failure
(a gate that cannot be checked must not pass silently). Pure: plain data in, plain data out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..config.yamlfile import ConfigError, parse_yaml_text, read_text_limited

KINDS = ("min", "max", "equal")
_MISSING = object()


@dataclass(frozen=True)
class Bound:
    """One bound: the value at ``path`` must be >= min, <= max, or == equal."""

    path: str
    kind: str     # "min" | "max" | "equal"
    limit: Any

    def text(self) -> str:
        """The bound as the failure table shows it, e.g. ``<= 60``."""
        return {"min": ">=", "max": "<=", "equal": "=="}[self.kind] + f" {_show(self.limit)}"


@dataclass(frozen=True)
class GateFailure:
    """A bound that did not hold: the value found (None when the path is missing) and why."""

    bound: Bound
    found: Any
    why: str

    def to_json(self) -> dict[str, Any]:
        """The failure as plain JSON."""
        return {"path": self.bound.path, "bound": self.bound.text(), "found": self.found, "why": self.why}


def parse_expect(doc: Any, source: str) -> list[Bound]:
    """The bounds of an expect document; ConfigError naming the file and path for anything else."""
    if doc is None:
        raise ConfigError(source, "the file is empty, expected a mapping of dotted paths to bounds "
                                  "such as 'misses: {max: 0}'")
    if not isinstance(doc, dict):
        raise ConfigError(source, f"expected a mapping of dotted paths to bounds at the top level, "
                                  f"found {type(doc).__name__}")
    out: list[Bound] = []
    for path, spec in doc.items():
        if not isinstance(path, str) or not path or any(not step for step in path.split(".")):
            raise ConfigError(source, f"{path!r}: expected a dotted path such as 'tasks.planning.response_ms.p99'")
        if not isinstance(spec, dict) or not spec:
            raise ConfigError(source, f"{path}: expected bounds such as {{max: 0}} or {{min: 1.0}}, "
                                      f"found {spec!r}", field=path)
        for kind, limit in spec.items():
            if kind not in KINDS:
                raise ConfigError(source, f"{path}: unknown bound {kind!r}, expected one of "
                                          f"{', '.join(KINDS)}", field=path)
            numeric = kind != "equal"
            if numeric and (isinstance(limit, bool) or not isinstance(limit, (int, float))
                            or not math.isfinite(limit)):
                raise ConfigError(source, f"{path}.{kind}: expected a finite number, found {limit!r}", field=path)
            if not numeric and not isinstance(limit, (bool, int, float, str)):
                raise ConfigError(source, f"{path}.equal: expected a number, boolean or string, "
                                          f"found {type(limit).__name__}", field=path)
            out.append(Bound(path, kind, limit))
    return out


def load_expect(path: str | Path) -> list[Bound]:
    """Read an expect file (bounded YAML): its bounds, or ConfigError in one line."""
    source = str(path)
    return parse_expect(parse_yaml_text(read_text_limited(path, "an expect file (YAML)"), source), source)


def lookup(doc: Any, path: str) -> Any:
    """The value at a dotted path (a list step selects the element whose ``name`` is the step); _MISSING if none."""
    node = doc
    for step in path.split("."):
        if isinstance(node, Mapping):
            node = node.get(step, _MISSING)
        elif isinstance(node, list):
            node = next((e for e in node if isinstance(e, Mapping) and str(e.get("name")) == step), _MISSING)
        else:
            return _MISSING
        if node is _MISSING:
            return _MISSING
    return node


def check(doc: Mapping[str, Any], bounds: list[Bound]) -> list[GateFailure]:
    """Every bound that does not hold for one bag's replay document (empty: the bag passes)."""
    out = []
    for b in bounds:
        v = lookup(doc, b.path)
        if v is _MISSING:
            out.append(GateFailure(b, None, "not in the replay's results"))
        elif b.kind == "equal":
            if v != b.limit or isinstance(v, bool) != isinstance(b.limit, bool):
                out.append(GateFailure(b, v, f"{_show(v)} != {_show(b.limit)}"))
        elif isinstance(v, bool) or not isinstance(v, (int, float)):
            out.append(GateFailure(b, v, f"not a number: {_show(v)}"))
        elif math.isnan(v) or (b.kind == "max" and v > b.limit) or (b.kind == "min" and v < b.limit):
            out.append(GateFailure(b, v, f"{_show(v)} {'>' if b.kind == 'max' else '<'} {_show(b.limit)}"))
    return out


def format_failures(failed: list[tuple[str, list[dict[str, Any]]]], *, bags: bool = True) -> list[str]:
    """A text table, one line per broken bound: (bag, [GateFailure.to_json() ...]) pairs in.

    ``bags=False`` leaves the bag column out (one bag's replay)."""
    head = ("bag", "path", "bound", "found")
    rows = [(bag, f["path"], f["bound"], "-" if f["found"] is None else _show(f["found"]))
            for bag, fails in failed for f in fails]
    if not rows:
        return []
    if not bags:
        head, rows = head[1:], [r[1:] for r in rows]
    w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    line = "  ".join(f"{{:<{n}}}" for n in w)
    return [line.format(*head).rstrip()] + [line.format(*r).rstrip() for r in rows]


def _show(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def gate_verdict(doc: Mapping[str, Any], bounds: list[Bound]) -> dict[str, Any]:
    """``{"passed", "failures"}`` of one replay document: what ``replay --expect --json`` adds as ``"expect"``."""
    failures = [f.to_json() for f in check(doc, bounds)]
    return {"passed": not failures, "failures": failures}


def gate_lines(verdict: Mapping[str, Any], source: str) -> list[str]:
    """The gates' verdict for the replay summary: one line, then the broken bounds' table."""
    fails = verdict["failures"]
    if not fails:
        return [f"expect {source}: every bound holds"]
    return [f"expect {source}: {len(fails)} bound(s) broken"] + format_failures([("", fails)], bags=False)
