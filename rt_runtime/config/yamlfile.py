"""Reading a YAML configuration with limits: one readable error line, never a hang or a traceback.

``ConfigError`` (every configuration error: the file first, then what and where) and ``suggest``
(its "did you mean") live here, with the loader every config reader shares: duplicate keys refused, the file's size, node count, nesting
and alias expansion bounded. ``taskset`` re-exports all of it.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Iterable

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from ..core.units import clip


# Every character ``str.splitlines`` ends a line at (a value can hold any: "\x1e" from a generated config),
# written as its escape in a message.
_LINE_BREAKS = {c: repr(chr(c))[1:-1] for c in (0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029)}


class ConfigError(ValueError):
    """An invalid configuration; the message starts with the file it came from."""

    def __init__(self, source: str, message: str, *, task: str | None = None, field: str | None = None) -> None:
        message = message.translate(_LINE_BREAKS)   # one readable line, whatever the file holds
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 1] + "…"
        super().__init__(f"{source}: {message}")
        self.source, self.task, self.field = source, task, field


def suggest(name: object, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known``, or ``""``."""
    close = difflib.get_close_matches(str(name), sorted(set(known)), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


# Limits on what a configuration may be, so that reading one always ends within a few seconds: the
# file is read whole, so it is bounded (the reference stack is 8 KiB); so are its values and their
# nesting; aliases may share values but not multiply them (a "billion laughs" document is a few
# lines that expand to billions of nodes); the schedulability analysis is quadratic in the task count.
MAX_YAML_BYTES = 1024 * 1024
MAX_YAML_NODES = 200_000
MAX_YAML_DEPTH = 100
MAX_ALIAS_EXPANSION = 10_000   # nodes an alias may add beyond the document's own (a shared value counted each time)
MAX_TASKS = 1_000
MAX_CHAINS = 1_000
MAX_NAME = 200
MAX_MESSAGE = 600


class _YamlLimit(Exception):
    """A document beyond MAX_YAML_NODES or MAX_YAML_DEPTH (raised while composing, so it stops early)."""


try:
    from yaml._yaml import CParser
except ImportError:   # pragma: no cover - PyYAML built without libyaml
    CParser = None

if CParser is not None:
    # libyaml scans and parses (fast, in C); composition stays in Python so that it can count nodes
    # and depth as it goes: libyaml's own composer recurses in C and crashes on deep nesting.
    class _SafeBase(Composer, CParser, SafeConstructor, Resolver):   # Composer first: its methods win
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
else:   # pragma: no cover - PyYAML built without libyaml
    _SafeBase = yaml.SafeLoader   # type: ignore[misc,assignment]


class _UniqueKeyLoader(_SafeBase):
    """Safe loader that rejects a key given twice in one mapping (PyYAML keeps the last one silently),
    stops beyond MAX_YAML_NODES values or MAX_YAML_DEPTH levels, and records where aliases are used
    (``_expansion_problem`` then bounds what they expand to)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases: list[tuple[yaml.Mark, yaml.Node]] = []
        self.nodes = 0
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        self.nodes += 1
        mark = self.peek_event().start_mark
        if self.nodes > MAX_YAML_NODES:
            raise _YamlLimit(f"line {mark.line + 1}: more than {MAX_YAML_NODES} values, too many for a configuration")
        if self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            self.aliases.append((mark, node))
            return node
        self.depth += 1
        try:
            if self.depth > MAX_YAML_DEPTH:
                raise _YamlLimit(f"line {mark.line + 1}: nested deeper than {MAX_YAML_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _expansion_problem(root: yaml.Node, aliases: list[tuple[yaml.Mark, yaml.Node]]) -> str | None:
    """Why the composed document is refused (a recursive alias, or aliases expanding it too far); None: fine.

    Iterative and linear in the distinct nodes: each node's expanded size is computed once.
    """
    if not aliases:
        return None
    size: dict[int, int] = {}
    entered: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        k = id(node)
        if leaving:
            size[k] = 1 + sum(size[id(c)] for c in _children(node))
            continue
        if k in size:
            continue
        if k in entered:   # entered and not left: an ancestor of itself
            return f"line {node.start_mark.line + 1}: a YAML alias refers to a value that contains it (recursive)"
        entered.add(k)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)
    if size[id(root)] - len(size) > MAX_ALIAS_EXPANSION:
        mark, _ = max(aliases, key=lambda a: size.get(id(a[1]), 0))
        return (f"line {mark.line + 1}: YAML aliases expand the document by more than {MAX_ALIAS_EXPANSION} "
                f"nodes (an alias bomb?); write the values out")
    return None


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        try:
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found key {clip(key)} twice (first on line {seen[key] + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        except TypeError:
            pass  # unhashable keys are reported by the base constructor
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml_text(text: str, source: str) -> Any:
    """A YAML document (safe types only) within the limits above; ConfigError naming the line otherwise."""
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        problem = _expansion_problem(node, loader.aliases)
        if problem is not None:
            raise ConfigError(source, problem)
        return loader.construct_document(node)
    except _YamlLimit as e:
        raise ConfigError(source, str(e)) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = "; ".join(x for x in (e.context, e.problem) if x)
        raise ConfigError(source, f"{where}YAML syntax error: {what}") from None
    except yaml.YAMLError as e:
        raise ConfigError(source, f"YAML syntax error: {e}") from None
    except RecursionError:
        raise ConfigError(source, "YAML nested too deeply") from None
    finally:
        loader.dispose()


def read_text_limited(path: str | Path, what: str = "a YAML file", limit: int = MAX_YAML_BYTES) -> str:
    """The file's text, at most ``limit`` bytes; ConfigError for a missing, unreadable or too big file."""
    source = str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise ConfigError(source, "file not found") from None
    except IsADirectoryError:
        raise ConfigError(source, f"is a directory, expected {what}") from None
    except OSError as e:
        raise ConfigError(source, f"cannot read: {e.strerror or e}") from None
    if len(data) > limit:
        raise ConfigError(source, f"more than {limit / (1024 * 1024):g} MiB, too big for {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(source, f"not UTF-8 text (byte {e.start}): expected {what}") from None


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML file into a dict; ConfigError for a missing file, a syntax error (with line), or a non-mapping.

    Bounded: at most MAX_YAML_BYTES, aliases expanding it by at most MAX_ALIAS_EXPANSION nodes.
    """
    source = str(path)
    doc = parse_yaml_text(read_text_limited(path), source)
    if doc is None:
        raise ConfigError(source, "the file is empty, expected a mapping with 'policy:' and 'tasks:'")
    if not isinstance(doc, dict):
        raise ConfigError(source, f"expected a mapping with 'policy:' and 'tasks:' at the top level, "
                                  f"found {type(doc).__name__}")
    return doc
