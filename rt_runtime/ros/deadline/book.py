"""The DeadlineExecutor's book of callbacks: each rclpy entity's ``Callback``, its name, and its timing from
the three layers (``timing.merge``: ``@deadline`` on the function, then the executor's file, then the
node's ``rt.<callback>.<key>`` parameters).

Parameters. For each callback whose function has a name (a method or a ``def``, not a lambda), the
book declares ``rt.<name>.<key>`` on the node for every timing key (``period``, ``deadline``, ``budget``
as durations with units, "20ms"; ``priority`` an integer; ``criticality``, ``on_miss``, ``on_overrun``
names; ``fallback`` ``package.module:function``), unset unless a launch file, a parameter file or
``--ros-args -p`` gives a value, as rclpy's own ``qos_overrides.<topic>...`` are. A value given at
start-up is checked when the node is added (``ConfigError``: one line naming the node and the
parameter); ``ros2 param set`` later is checked by the node's set-parameters callback (a bad value is
refused with that line as the reason) and applies to the callback's next release. Two callbacks of a
node with the same function name share the parameters. The file's ``parameters: false`` turns it off.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult

from ...config.yamlfile import ConfigError
from .config import ExecutorConfig
from .decorator import declared
from .entities import describe
from .jobs import Callback
from .timing import TIMING_KEYS, merge, parse_fields

PREFIX = "rt"
_HELP = {"period": "release period the analysis assumes (a duration, e.g. 100ms)",
         "deadline": "relative deadline (a duration, e.g. 20ms)", "budget": "execution budget (a duration)",
         "priority": "fixed priority under policy fp (an integer, smaller is more urgent)",
         "criticality": "low, medium, high or safety", "on_miss": "none, skip, abort or degrade",
         "on_overrun": "none, skip or degrade", "fallback": "package.module:function run on a degraded release"}


_OWN = ("rclpy.", "rt_runtime.ros.deadline.")   # rclpy's parameter and type services, the executor's diagnostics


def callback_key(fn: Any) -> str | None:
    """The name a callback's parameters go by: its function's ``__name__``; None for a lambda, a partial, or a
    callback of rclpy's own (a node's parameter services) or the executor's."""
    name, module = getattr(fn, "__name__", None), getattr(fn, "__module__", None) or ""
    if not isinstance(name, str) or not name.isidentifier() or module.startswith(_OWN):
        return None
    return name


@dataclass
class _Origin:
    """What one callback's timing was merged from, kept to merge it again when a parameter changes."""

    node: Any
    key: str | None
    layers: dict[str, dict[str, Any]]
    rule: int | None
    selector: dict[str, Any]   # what the file's entries select it by: node names, kind, topic/period/service


@dataclass
class Book:
    """Entity -> Callback, with unique names and the layers of each one's timing."""

    config: ExecutorConfig
    changed: Callable[[], None]                  # the executor re-ranks and re-keys its queue
    callbacks: dict[Any, Callback] = field(default_factory=dict)
    _names: set[str] = field(default_factory=set)
    _origins: dict[str, _Origin] = field(default_factory=dict)
    _params: dict[int, tuple[Any, Any]] = field(default_factory=dict)   # id(node) -> its (check, apply) callbacks
    _declaring: bool = False

    def get(self, entity: Any, node: Any) -> Callback:
        """The entity's Callback, made (named, its timing merged) the first time it is seen."""
        cb = self.callbacks.get(entity)
        if cb is not None:
            return cb
        kind, key, part = describe(entity)
        names = (node.get_name(), node.get_fully_qualified_name()) if node is not None else ("",)
        name = f"{names[0]}/{part}" if node is not None else part
        base, n = name, 2
        while name in self._names:
            name, n = f"{base}#{n}", n + 1
        fn = getattr(entity, "callback", None)
        rule, from_file = self.config.select(names, kind, key)
        pkey = callback_key(fn) if node is not None and kind in ("timer", "subscription", "service") else None
        layers = {"decorator": declared(fn), "file": from_file,
                  "parameter": self._declare(node, pkey) if pkey is not None else {}}
        timing = merge(layers, self._source(node), f"callback {name}", rule)
        self._names.add(name)
        cb = Callback(name, kind, timing, self.config.default_deadline_ns, period_ns=key if kind == "timer" else None)
        self.callbacks[entity] = cb
        self._origins[name] = _Origin(node, pkey, layers, rule, {"node": list(names), "kind": kind, "key": key})
        self.changed()
        return cb

    def add_node(self, node: Any) -> None:
        """Book the node's callbacks now (a bad parameter is refused here, not in the spin), then listen
        for its parameters' changes."""
        for entity in (*node.timers, *node.subscriptions, *node.services):
            self.get(entity, node)
        if self.config.parameters and id(node) not in self._params:
            check, apply = partial(self._check, node), partial(self._apply, node)
            node.add_on_set_parameters_callback(check)
            node.add_post_set_parameters_callback(apply)
            self._params[id(node)] = (check, apply)

    def remove_node(self, node: Any) -> None:
        """Stop listening to the node's parameters (its callbacks stay booked: their counts are the run's)."""
        held = self._params.pop(id(node), None)
        if held is not None:
            node.remove_on_set_parameters_callback(held[0])
            node.remove_post_set_parameters_callback(held[1])

    def described(self) -> dict[str, dict[str, Any]]:
        """Per callback: what a file's entries select it by, and the keys its node's parameters gave (for
        the trace: ``rt-runtime check --trace`` applies another file as this run would have)."""
        return {n: {**o.selector, "parameter": sorted(o.layers.get("parameter") or {})}
                for n, o in sorted(self._origins.items())}

    # --- parameters ---------------------------------------------------------------------------------------
    def _source(self, node: Any) -> str:
        return f"node {node.get_fully_qualified_name()}" if node is not None else "DeadlineExecutor"

    def _declare(self, node: Any, key: str) -> dict[str, Any]:
        if not self.config.parameters:
            return {}
        raw: dict[str, Any] = {}
        self._declaring = True
        try:
            for k in TIMING_KEYS:
                pname = f"{PREFIX}.{key}.{k}"
                if not node.has_parameter(pname):
                    node.declare_parameter(pname, None, ParameterDescriptor(
                        dynamic_typing=True, description=f"rt_runtime DeadlineExecutor: {key}'s {_HELP[k]}"))
                raw[k] = node.get_parameter(pname).value
        finally:
            self._declaring = False
        return parse_fields(raw, self._source(node), f"parameter {PREFIX}.{key}")

    def _changes(self, params: list[Any]) -> dict[str, dict[str, Any]]:
        """The callbacks' keys the parameters touch -> their new raw values."""
        out: dict[str, dict[str, Any]] = {}
        for p in params:
            parts = p.name.split(".")
            if len(parts) == 3 and parts[0] == PREFIX and parts[2] in TIMING_KEYS:
                out.setdefault(parts[1], {})[parts[2]] = p.value
        return out

    def _merged(self, node: Any, key: str, raw: dict[str, Any]) -> list[tuple[Callback, Any, dict]]:
        """Each booked callback of ``node`` under ``key``, its timing merged again with ``raw`` over the node's
        current parameters; ConfigError (one line) on a bad value or an incomplete whole."""
        current = {k: node.get_parameter(f"{PREFIX}.{key}.{k}").value for k in TIMING_KEYS
                   if node.has_parameter(f"{PREFIX}.{key}.{k}")}
        fields = parse_fields({**current, **raw}, self._source(node), f"parameter {PREFIX}.{key}")
        out = []
        for cb in self.callbacks.values():
            o = self._origins.get(cb.name)
            if o is not None and o.node is node and o.key == key:
                layers = {**o.layers, "parameter": fields}
                out.append((cb, merge(layers, self._source(node), f"callback {cb.name}", o.rule), layers))
        return out

    def _check(self, node: Any, params: list[Any]) -> SetParametersResult:
        if not self._declaring:
            try:
                for key, raw in self._changes(params).items():
                    self._merged(node, key, raw)
            except ConfigError as e:
                return SetParametersResult(successful=False, reason=str(e))
        return SetParametersResult(successful=True)

    def _apply(self, node: Any, params: list[Any]) -> None:
        keys = [] if self._declaring else list(self._changes(params))
        for key in keys:
            for cb, timing, layers in self._merged(node, key, {}):
                cb.timing = timing
                self._origins[cb.name].layers = layers
        if keys:
            self.changed()
