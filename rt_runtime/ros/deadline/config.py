"""The DeadlineExecutor's YAML file: per-callback timing, selected by node name and topic, timer or service.

    policy: edf                    # edf (default), rm, dm or fp
    workers: 1                     # threads running callbacks (1: the spinning thread itself)
    default_deadline: 100ms        # a callback with no period to derive a deadline from
    poll: 100ms                    # with jobs queued, wait again (timeout 0) when the last wait is this old
    trace: run.rttrace             # write the .rttrace at shutdown (rt-runtime analyze reads it)
    diagnostics: 1s                # each callback's counts on /diagnostics
    parameters: true               # declare rt.<callback>.<key> on each node (book.py; timing.py: precedence)
    realtime: {enabled: true, priority: 50, cpus: [1]}
    callbacks:
      - {node: "planner*", timer: 100ms, deadline: 80ms, budget: 20ms, on_miss: skip}
      - {node: fusion, topic: "/perception/*", deadline: 30ms, on_overrun: degrade, fallback: "my.mod:cheap"}

An entry selects callbacks by ``node`` (a glob on the node's name) plus at most one of ``topic``
(subscriptions, glob), ``timer`` (the timer's period), ``service`` or ``client`` (glob on the name);
with none of them it selects all of the node's callbacks. The first entry that selects a callback
gives its timing. Validated as the stack file is (``config.taskset``): one line naming the file, the
entry, the key, what was expected and a close match, never a traceback.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

# the torch-free pieces of the stack file's reading (config.basetypes): an executor must import quickly
from ...config.basetypes import Duration, Model, Realtime, Ref, keys
from ...config.realtime import RealtimeSpec, parse_realtime
from ...config.yamlfile import ConfigError, load_yaml, suggest
from ...core.task import CRITICALITIES
from ...core.units import clip
from .jobs import REACTIONS, Timing
from .timing import choice as _choice
from .timing import duration as _dur
from .timing import merge, parse_fields

POLICIES = ("edf", "rm", "dm", "fp")
SELECTORS = ("topic", "timer", "service", "client")
SELECTOR_KIND = {"topic": "subscription", "timer": "timer", "service": "service", "client": "client"}
DEFAULT_DEADLINE_NS = 100_000_000
DEFAULT_POLL_NS = 100_000_000   # how long a queued message may go unseen by a wait while jobs run
# The reactions in sched.binding.Reaction's order: typing's Literal compares as a set and pydantic reuses the
# first one built, so if this file is imported first the stack schema would list them in this order
_ON_MISS = Literal[tuple(sorted(REACTIONS, key=("skip", "abort", "degrade", "none").index))]  # type: ignore[misc]


class CallbackEntry(Model):
    """The timing of the callbacks one entry selects."""

    node: str
    """Glob on the node's name (or its fully qualified name)."""
    topic: str | None = None
    """Subscriptions whose topic matches this glob."""
    timer: Duration | None = None
    """Timers of this period."""
    service: str | None = None
    """Services whose name matches this glob."""
    client: str | None = None
    """Clients (their responses) whose service name matches this glob."""
    period: Duration | None = None
    """The release period (or minimum inter-arrival) the analysis assumes."""
    deadline: Duration | None = None
    """Relative deadline (default: the period; for a subscription, the observed minimum inter-arrival)."""
    budget: Duration | None = None
    """Execution budget; a job running longer is an overrun."""
    priority: int | None = None
    """Fixed priority for policy fp (smaller is more urgent)."""
    criticality: Literal[CRITICALITIES] | None = None  # type: ignore[valid-type]
    """low, medium, high or safety."""
    on_miss: _ON_MISS | None = None  # type: ignore[valid-type]
    """none (count, trace), skip (the next release), abort (a job not started by its deadline), degrade."""
    on_overrun: Literal["none", "skip", "degrade"] | None = None
    """What an overrun owes the next release: none, skip, or degrade (the fallback runs instead)."""
    fallback: Ref | None = None
    """``package.module:function`` called instead of the callback on a degraded release (same arguments)."""


class ExecutorFile(Model):
    """The DeadlineExecutor's configuration file."""

    policy: Literal[POLICIES] | None = None  # type: ignore[valid-type]
    """edf (default), rm, dm or fp."""
    workers: Annotated[int, Field(ge=1)] | None = None
    """Threads running callbacks; 1 runs them in the spinning thread."""
    default_deadline: Duration | None = None
    """Deadline of a callback with nothing to derive one from (default 100ms)."""
    poll: Duration | None = None
    """With jobs queued, wait again (timeout 0) before a job once the last wait is this old (default 100ms)."""
    trace: str | None = None
    """.rttrace file written at shutdown."""
    diagnostics: Duration | None = None
    """Publish each callback's counts on /diagnostics at this period (default: not at all)."""
    realtime: bool | Realtime | None = None
    """SCHED_FIFO and pinning of the callback threads."""
    parameters: bool | None = None
    """Declare each named callback's rt.<callback>.<key> parameters on its node (default true)."""
    callbacks: list[CallbackEntry] | None = None
    """Per-callback timing, first match wins."""


TOP_KEYS, ENTRY_KEYS = keys(ExecutorFile), keys(CallbackEntry)


@dataclass(frozen=True)
class Rule:
    """One validated entry: what it selects and the timing it gives."""

    node: str
    selector: str | None
    pattern: str | None
    timer_ns: int | None
    timing: Timing
    fields: dict[str, Any] = field(default_factory=dict)   # the timing keys the entry gives (parse_fields)

    def selects(self, node_names: tuple[str, ...], kind: str, key: str | int | None) -> bool:
        """True when this entry selects the callback of ``kind`` named ``key`` (topic, service or period)."""
        if not any(fnmatch.fnmatchcase(n, self.node) for n in node_names):
            return False
        if self.selector is None:
            return True
        if SELECTOR_KIND[self.selector] != kind:
            return False
        if self.selector == "timer":
            return key == self.timer_ns
        return isinstance(key, str) and fnmatch.fnmatchcase(key, self.pattern or "")


@dataclass
class ExecutorConfig:
    """The executor's settings, validated."""

    policy: str = "edf"
    workers: int = 1
    default_deadline_ns: int = DEFAULT_DEADLINE_NS
    trace: str | None = None
    realtime: RealtimeSpec | None = None
    rules: list[Rule] = field(default_factory=list)
    source: str | None = None
    poll_ns: int = DEFAULT_POLL_NS
    diagnostics_ns: int | None = None
    parameters: bool = True

    def select(self, node_names: tuple[str, ...], kind: str, key: str | int | None) -> tuple[int | None, dict]:
        """The index of the first selecting entry and the timing keys it gives; (None, {}) when none does."""
        for i, r in enumerate(self.rules):
            if r.selects(node_names, kind, key):
                return i, r.fields
        return None, {}

    def timing(self, node_names: tuple[str, ...], kind: str, key: str | int | None) -> Timing:
        """The timing the first selecting entry gives (a fresh copy), or the defaults."""
        for i, r in enumerate(self.rules):
            if r.selects(node_names, kind, key):
                t = r.timing
                return Timing(t.period_ns, t.deadline_ns, t.budget_ns, t.priority, t.criticality, t.on_miss,
                              t.on_overrun, t.fallback, i)
        return Timing()


def _glob(source: str, where: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(source, f"{where}: expected a name or glob pattern, found {clip(value)}", field=where)
    return value


def _entry(source: str, i: int, e: Any) -> Rule:
    at = f"callbacks[{i}]"
    if not isinstance(e, dict):
        raise ConfigError(source, f"{at}: expected a mapping with 'node:' and timing keys, found {clip(e)}")
    for k in e:
        if k not in ENTRY_KEYS:
            raise ConfigError(source, f"{at}: unknown key {clip(k)}; expected {', '.join(ENTRY_KEYS)}"
                                      f"{suggest(k, ENTRY_KEYS)}", field=str(k))
    if "node" not in e:
        raise ConfigError(source, f"{at}: 'node:' is missing (a glob on the node's name)", field="node")
    node = _glob(source, f"{at}.node", e["node"])
    at = f"callbacks[{i}] (node {node})"
    given = [k for k in SELECTORS if e.get(k) is not None]
    if len(given) > 1:
        raise ConfigError(source, f"{at}: give at most one of {', '.join(SELECTORS)}, found {', '.join(given)}")
    selector = given[0] if given else None
    timer_ns = _dur(source, f"{at}.timer", e["timer"]) if selector == "timer" else None
    pattern = _glob(source, f"{at}.{selector}", e[selector]) if selector and selector != "timer" else None
    fields = parse_fields(e, source, at)
    # an entry is complete on its own (a decorator or parameter may add to it, see ExecutorConfig.select)
    return Rule(node, selector, pattern, timer_ns, merge({"file": fields}, source, at), fields)


def parse_config(doc: Any, source: str) -> ExecutorConfig:
    """A configuration from its YAML document (already loaded); ConfigError, one line, on anything wrong."""
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(source, f"expected a mapping with 'callbacks:', found {clip(doc)}")
    for k in doc:
        if k not in TOP_KEYS:
            raise ConfigError(source, f"unknown key {clip(k)}; expected {', '.join(TOP_KEYS)}{suggest(k, TOP_KEYS)}",
                              field=str(k))
    policy = doc.get("policy", "edf")
    policy = _choice(source, "policy", policy.lower() if isinstance(policy, str) else policy, POLICIES)
    workers = doc.get("workers", 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 64:
        raise ConfigError(source, f"workers: expected an integer from 1 to 64, found {clip(workers)}", field="workers")
    dd = _dur(source, "default_deadline", doc["default_deadline"]) if doc.get("default_deadline") is not None \
        else DEFAULT_DEADLINE_NS
    poll = _dur(source, "poll", doc["poll"]) if doc.get("poll") is not None else DEFAULT_POLL_NS
    diag = _dur(source, "diagnostics", doc["diagnostics"]) if doc.get("diagnostics") is not None else None
    trace = doc.get("trace")
    if trace is not None and (not isinstance(trace, str) or not trace):
        raise ConfigError(source, f"trace: expected a file path, found {clip(trace)}", field="trace")
    params = doc.get("parameters", True)
    if not isinstance(params, bool):
        raise ConfigError(source, f"parameters: expected true or false, found {clip(params)}", field="parameters")
    rt = parse_realtime(doc.get("realtime"), lambda m: ConfigError(source, f"realtime: {m}", field="realtime"))
    raw = doc.get("callbacks") or []
    if not isinstance(raw, list):
        raise ConfigError(source, f"callbacks: expected a list of entries, found {clip(raw)}", field="callbacks")
    rules = [_entry(source, i, e) for i, e in enumerate(raw)]
    if policy == "fp":
        missing = [i for i, r in enumerate(rules) if r.timing.priority is None]
        if missing:
            raise ConfigError(source, f"callbacks[{missing[0]}]: policy fp needs a 'priority:' on every entry",
                              field="priority")
    return ExecutorConfig(policy, workers, dd, trace, rt, rules, source, poll, diag, params)


def load_config(config: str | Path | dict[str, Any] | ExecutorConfig | None) -> ExecutorConfig:
    """The executor's configuration from a file path, a mapping, or None (every default)."""
    if config is None:
        return ExecutorConfig()
    if isinstance(config, ExecutorConfig):
        return config
    if isinstance(config, dict):
        return parse_config(config, "<config>")
    return parse_config(load_yaml(config), str(config))
