"""Config overrides ``KEY=VALUE`` (``--set`` and the node's ``overrides`` parameter) applied to a stack file.

Keys are dotted paths; a list of named mappings (``tasks``, ``channels``) is indexed by name::

    tasks.planning.wcet=5ms           # the planning task's budget
    tasks.planning.recover_after=100
    workers=2
    tasks.lidar_objects.args.mount=[1.2, 0.0, 1.9, 0.0]

Values are YAML scalars or flow collections. The result goes through the same validation as the
file (``parse_stack``), so a bad override fails with the same clear error as a bad file.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..config import ConfigError
from ..config.stack import StackConfig, parse_stack
from ..config.yamlfile import load_yaml, parse_yaml_text
from ..core.units import clip


def _step(node: Any, key: str, where: str) -> Any:
    if isinstance(node, Mapping):
        if key not in node:
            raise ValueError(f"override {where}: no key {key!r} (have: {', '.join(map(str, node)) or 'none'})")
        return node[key]
    if isinstance(node, list):
        named = [e for e in node if isinstance(e, Mapping) and e.get("name") == key]
        if named:
            return named[0]
        if key.isdigit() and int(key) < len(node):
            return node[int(key)]
        names = [str(e.get("name")) for e in node if isinstance(e, Mapping) and "name" in e]
        raise ValueError(f"override {where}: no entry named {key!r} (have: {', '.join(names) or 'none'})")
    raise ValueError(f"override {where}: {key!r} is inside a {type(node).__name__}, not a mapping or list")


def apply_overrides(doc: Mapping[str, Any], items: Sequence[str]) -> dict[str, Any]:
    """A copy of ``doc`` with each ``dotted.key=value`` set (the last key may be new)."""
    out = copy.deepcopy(dict(doc))
    for item in items:
        key, sep, text = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ValueError(f"override {item!r}: expected dotted.key=value")
        try:   # bounded like a config file: no alias bombs, no runaway nesting
            value = parse_yaml_text(text, "value") if text.strip() else ""
        except ConfigError as e:
            raise ValueError(f"override {clip(item)}: value is not YAML we read ({e})") from None
        node: Any = out
        for i, part in enumerate(parts[:-1]):
            node = _step(node, part, ".".join(parts[: i + 1]))
        last = parts[-1]
        if isinstance(node, dict):
            node[last] = value
        elif isinstance(node, list) and last.isdigit() and int(last) < len(node):
            node[int(last)] = value
        else:
            raise ValueError(f"override {item!r}: cannot set {last!r} inside a {type(node).__name__}")
    return out


def load_config(path: str | Path, overrides: Sequence[str] = (), remap: Mapping[str, str] | None = None) -> StackConfig:
    """Load a stack file, apply overrides, validate; ConfigError for any problem, naming the override."""
    doc = load_yaml(path)
    try:
        doc = apply_overrides(doc, overrides)
    except ValueError as e:
        raise ConfigError(str(path), str(e)) from None
    return parse_stack(doc, str(path), remap)
