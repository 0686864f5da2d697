"""The ``policy:`` / ``tasks:`` / ``chains:`` part of a configuration (YAML reading: ``yamlfile``).

Every error is a ``ConfigError`` whose message starts with the file, then names the task (or
chain) and the field, and says what was expected and what was found: the user fixes the file
without reading a traceback. The rest of a full runtime config (graphs, channels, topics,
devices) is read by other modules of this package; here those top-level keys are left alone.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from ..analysis.schedulability import POLICIES, validate_for_policy
from ..core.chain import Chain, apply_chains
from ..core.task import Task, TaskError
from ..core.units import DurationError, clip, parse_duration
# The keys a task, a chain and a join trigger may carry are the models' fields (schema.py). The
# runtime-only task keys (RUNTIME_TASK_KEYS) configure how jobs run, not when: the analysis skips them.
from .schema import CHAIN_KEYS, JOIN_KEYS, RUNTIME_TASK_KEYS, TASK_KEYS
# The YAML side (ConfigError, the bounded loader) is yamlfile.py's; its importers find these two here too.
from .wiring import check_top_level_keys, check_wiring, task_entries
from .yamlfile import MAX_CHAINS, MAX_NAME, MAX_TASKS, ConfigError, load_yaml, suggest  # noqa: F401 - re-exported

DURATION_KEYS = ("period", "min_interarrival", "wcet", "deadline", "blocking", "jitter", "offset")
POSITIVE_KEYS = ("period", "min_interarrival", "wcet", "deadline")


def _key(key: object) -> str:
    """A key as written when it is a short printable string, else its clipped repr."""
    return key if isinstance(key, str) and key.isprintable() and len(key) <= 80 else clip(key)


def _duration(source: str, task: str, key: str, value: object) -> int:
    if isinstance(value, str) and value.strip().startswith("-"):
        raise ConfigError(source, f"task '{task}': {key}: must not be negative, found {clip(value)}", task=task,
                          field=key)
    try:
        ns = parse_duration(value, what=key)
    except DurationError as e:
        raise ConfigError(source, f"task '{task}': {e}", task=task, field=key) from None
    if ns == 0 and key in POSITIVE_KEYS:
        raise ConfigError(source, f"task '{task}': {key}: must be positive, found {clip(value)}", task=task, field=key)
    return ns


def parse_task(entry: Mapping[str, Any], source: str, index: int) -> Task:
    """One ``tasks:`` entry into a Task (its ``graph`` etc. are left to the runtime config)."""
    label = f"tasks[{index}]"
    if not isinstance(entry, Mapping):
        raise ConfigError(source, f"{label}: expected a mapping with name, period, wcet..., found "
                                  f"{type(entry).__name__}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(source, f"{label}: name: expected a non-empty string, found {clip(name)}", field="name")
    if len(name) > MAX_NAME or not name.isprintable():
        raise ConfigError(source, f"{label}: name: expected at most {MAX_NAME} printable characters (no line breaks "
                                  f"or control characters), found {clip(name)}", field="name")
    for key in entry:
        if key not in TASK_KEYS and key not in RUNTIME_TASK_KEYS:
            raise ConfigError(source, f"task '{name}': {_key(key)}: unknown key{suggest(str(key), TASK_KEYS)}; "
                                      f"expected one of {', '.join(TASK_KEYS + RUNTIME_TASK_KEYS)}",
                              task=name, field=str(key))
    d = {k: _duration(source, name, k, entry[k]) for k in DURATION_KEYS if entry.get(k) is not None}

    def fail(key: str, message: str) -> ConfigError:
        return ConfigError(source, f"task '{name}': {key}: {message}", task=name, field=key)

    trigger = entry.get("trigger")
    if isinstance(trigger, Mapping):   # a join: {all: [a, b], window: "5ms"} or {any: [a, b]}
        trigger = join_label(parse_join(trigger, lambda m: fail("trigger", m)))
    elif trigger is not None and (not isinstance(trigger, str) or not trigger.strip()):
        raise fail("trigger", f"expected a topic or channel name, or {{all: [...]}} / {{any: [...]}}, "
                              f"found {clip(trigger)}")
    if "min_interarrival" in d:
        if trigger is None:
            raise fail("min_interarrival", "only for a task with a 'trigger'; a periodic task gives 'period'")
        if "period" in d:
            raise fail("min_interarrival", "give either 'period' or 'min_interarrival', not both")
        d["period"] = d.pop("min_interarrival")
    if "period" not in d:
        raise fail("period", "missing" + (" (or min_interarrival, the minimum time between triggering messages)"
                                          if trigger is not None else ""))
    if "wcet" not in d:
        raise fail("wcet", "missing (the worst-case execution time, e.g. \"2ms\")")
    if entry.get("redundancy") is not None:
        from .safety_keys import parse_redundancy

        try:
            spec = parse_redundancy(entry["redundancy"])
        except ValueError as e:
            raise fail("redundancy", str(e)) from None
        if spec is not None:   # wcet is one run; a redundant job runs 1-3, plus its checks (docs/SAFETY.md, "Budgets")
            d["wcet"] = spec.budget_ns(d["wcet"])
    if entry.get("speculate") is not None:
        from .safety_keys import parse_speculate

        try:
            parse_speculate(entry["speculate"])
        except ValueError as e:
            raise fail("speculate", str(e)) from None
        if trigger is not None:
            raise fail("speculate", "speculation needs a periodic task (a triggered task's next release is not "
                                    "known in advance)")
    priority = entry.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise fail("priority", f"expected an integer (a lower number is a higher priority), found {clip(priority)}")
    criticality = entry.get("criticality", "medium")
    if not isinstance(criticality, str):
        raise fail("criticality", f"expected a string, found {clip(criticality)}")
    try:
        return Task(name=name, period_ns=d["period"], wcet_ns=d["wcet"], deadline_ns=d.get("deadline"),
                    offset_ns=d.get("offset", 0), priority=priority, jitter_ns=d.get("jitter", 0),
                    blocking_ns=d.get("blocking"), trigger=trigger, criticality=criticality)
    except TaskError as e:
        raise ConfigError(source, str(e), task=e.task, field=e.field) from None


def fallback_budget(entry: Mapping[str, Any], source: str, task: str) -> int | None:
    """A task entry's ``fallback_wcet`` in ns (None when absent: the fallback costs its task's wcet)."""
    value = entry.get("fallback_wcet")
    if value is None:
        return None
    if entry.get("fallback") is None:
        raise ConfigError(source, f"task '{task}': fallback_wcet: the budget of a fallback graph, but the task has "
                                  f"no fallback (found fallback_wcet {clip(value)} without fallback:)",
                          task=task, field="fallback_wcet")
    ns = _duration(source, task, "fallback_wcet", value)
    if ns == 0:
        raise ConfigError(source, f"task '{task}': fallback_wcet: must be positive, found {clip(value)}", task=task,
                          field="fallback_wcet")
    return ns


def _task_entries(raw: Any, source: str) -> list[Mapping[str, Any]]:
    """Accept a list of task mappings, or a mapping from task name to its fields."""
    if isinstance(raw, Mapping):
        entries = []
        for name, fields in raw.items():
            if not isinstance(fields, Mapping):
                raise ConfigError(source, f"task '{_key(name)}': expected a mapping of fields, found "
                                          f"{type(fields).__name__}", task=str(name))
            if "name" in fields and fields["name"] != name:
                raise ConfigError(source, f"task '{_key(name)}': name: the key says '{_key(name)}' but name says "
                                          f"{clip(fields['name'])}", task=str(name), field="name")
            entries.append({"name": name, **fields})
        return entries
    if isinstance(raw, list):
        return raw
    raise ConfigError(source, f"tasks: expected a list of tasks, found {type(raw).__name__}", field="tasks")


def parse_chains(raw: Any, names: set[str], source: str) -> list[Chain]:
    """The optional ``chains:`` list of {name, tasks: [task names]}."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(source, f"chains: expected a list of {{name, tasks}}, found {type(raw).__name__}",
                          field="chains")
    chains: list[Chain] = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            raise ConfigError(source, f"chains[{i}]: expected a mapping with name and tasks, found "
                                      f"{type(entry).__name__}")
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(source, f"chains[{i}]: name: expected a non-empty string, found {name!r}", field="name")
        for key in entry:
            if key not in CHAIN_KEYS:
                raise ConfigError(source, f"chain '{name}': {key}: unknown key{suggest(str(key), CHAIN_KEYS)}; "
                                          f"expected one of {', '.join(CHAIN_KEYS)}", field=str(key))
        if any(c.name == name for c in chains):
            raise ConfigError(source, f"chain '{name}': name: two chains have this name", field="name")
        members = entry.get("tasks")
        if not isinstance(members, list) or not members or not all(isinstance(m, str) for m in members):
            raise ConfigError(source, f"chain '{name}': tasks: expected a non-empty list of task names, found "
                                      f"{members!r}", field="tasks")
        for m in members:
            if m not in names:
                raise ConfigError(source, f"chain '{name}': tasks: no task is named '{m}'"
                                          f"{suggest(m, tuple(sorted(names)))}", task=m, field="tasks")
        _check_acyclic(source, name, members)
        deadline = None
        if entry.get("deadline") is not None:
            deadline = _chain_deadline(source, name, entry["deadline"], members)
        chains.append(Chain(name, tuple(members), deadline))
    return chains


def _check_acyclic(source: str, name: str, members: list[str]) -> None:
    """A chain is a path: data flows from each task to the next, so no task appears twice in it."""
    seen: set[str] = set()
    for m in members:
        if m in seen:
            raise ConfigError(source, f"chain '{name}': tasks: '{m}' appears twice; a chain lists distinct tasks "
                                      f"in data-flow order (a cycle has no end-to-end latency)", task=m,
                              field="tasks")
        seen.add(m)


def _chain_deadline(source: str, name: str, value: object, members: list[str]) -> int:
    """A run-time chain's end-to-end deadline: a positive duration over two or more distinct tasks."""
    try:
        ns = parse_duration(value, what="deadline")
    except DurationError as e:
        raise ConfigError(source, f"chain '{name}': {e}", field="deadline") from None
    if ns <= 0:
        raise ConfigError(source, f"chain '{name}': deadline: must be positive, found {value!r}", field="deadline")
    if len(members) < 2 or len(set(members)) < len(members):
        raise ConfigError(source, f"chain '{name}': tasks: a chain with a deadline runs two or more distinct tasks "
                                  f"in order, found {members!r}", field="tasks")
    return ns


def parse_taskset(doc: Mapping[str, Any], source: str) -> tuple[str, list[Task], list[Chain]]:
    """Validate ``policy``, ``tasks`` and ``chains`` of a config; return (policy, tasks, chains)."""
    if not isinstance(doc, Mapping):
        raise ConfigError(source, f"expected a mapping at the top level, found {type(doc).__name__}")
    policy = doc.get("policy")
    if policy is None:
        raise ConfigError(source, f"policy: missing; expected one of {', '.join(POLICIES)}", field="policy")
    if not isinstance(policy, str) or policy.strip().lower() not in POLICIES:
        raise ConfigError(source, f"policy: unknown policy {clip(policy)}; expected one of {', '.join(POLICIES)}",
                          field="policy")
    policy = policy.strip().lower()
    if doc.get("tasks") is None:
        raise ConfigError(source, "tasks: missing; expected a list of tasks with name, period, wcet", field="tasks")
    entries = _task_entries(doc["tasks"], source)
    if not entries:
        raise ConfigError(source, "tasks: the list is empty", field="tasks")
    if len(entries) > MAX_TASKS:
        raise ConfigError(source, f"tasks: {len(entries)} tasks; at most {MAX_TASKS} are supported (the "
                                  f"schedulability analysis takes time quadratic in the task count)", field="tasks")
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        task = parse_task(entry, source, i)
        if task.name in seen:
            raise ConfigError(source, f"task '{task.name}': name: duplicate task name (tasks[{seen[task.name]}] "
                                      f"and tasks[{i}])", task=task.name, field="name")
        seen[task.name] = i
        tasks.append(task)
    try:
        validate_for_policy(tasks, policy)
    except TaskError as e:
        msg = str(e) if f"policy {policy}" in str(e) else f"{e} (policy {policy})"
        raise ConfigError(source, msg, task=e.task, field=e.field) from None
    raw_chains = doc.get("chains")
    if isinstance(raw_chains, list) and len(raw_chains) > MAX_CHAINS:
        raise ConfigError(source, f"chains: {len(raw_chains)} chains; at most {MAX_CHAINS} are supported",
                          field="chains")
    chains = parse_chains(raw_chains, set(seen), source)
    try:
        apply_chains(tasks, chains, policy)   # a chain that cannot run (budgets above its deadline, ...) fails here
    except TaskError as e:
        raise ConfigError(source, str(e), task=e.task, field="chains") from None
    return policy, tasks, chains


def load_taskset(path: str | Path) -> tuple[str, list[Task], list[Chain]]:
    """``load_yaml``, the keys checked as ``parse_stack`` checks them, ``parse_taskset``, then (a full
    stack) its channels' wiring as ``parse_stack`` checks it (``wiring.py``: no graphs built)."""
    doc = load_yaml(path)
    check_top_level_keys(doc, str(path))
    out = parse_taskset(doc, str(path))
    check_wiring(doc, str(path))
    return out


def task_writes(path: str | Path) -> dict[str, set[str]]:
    """Task -> the channels its ``outputs:`` write, for a full config (empty for a bare task set).

    The analysis uses it to see which tasks are released by what the task before them publishes."""
    raw = load_yaml(path).get("tasks")
    entries = [{"name": n, **f} for n, f in raw.items() if isinstance(f, Mapping)] if isinstance(raw, Mapping) \
        else [e for e in raw or [] if isinstance(e, Mapping)] if isinstance(raw, list) else []
    return {str(e.get("name")): {str(v) for v in (e.get("outputs") or {}).values()} for e in entries
            if isinstance(e.get("outputs"), Mapping)}


def fallback_budgets(path: str | Path, tasks: Iterable[Task]) -> dict[str, int]:
    """Task -> its fallback's budget (``fallback_wcet``, else its wcet) for every task with a ``fallback:``,
    of a file ``load_taskset`` read into ``tasks`` (the analysis of the degraded mode, ``analysis.modes``)."""

    wcet = {t.name: t.wcet_ns for t in tasks}
    out = {}
    for name, e in task_entries(load_yaml(path)).items():
        if e.get("fallback") is not None and name in wcet:
            own = fallback_budget(e, str(path), name)
            out[name] = wcet[name] if own is None else own
    return out


def task_releases(path: str | Path) -> tuple[dict[str, Any], dict[str, bool], dict[str, int], int]:
    """What releases each task, for the holistic analysis (``analysis.cpa``): (task -> ``Activation``,
    task -> publishes on finish, task -> explicit worker, workers). Reads a file ``load_taskset``
    already validated; a trigger channel no task writes is ingress."""
    from ..analysis.cpa import Activation

    doc = load_yaml(path)
    entries = list(task_entries(doc).values())
    writer = {ch: str(e.get("name")) for e in entries if isinstance(e.get("outputs"), Mapping)
              for ch in map(str, e["outputs"].values())}
    acts: dict[str, Any] = {}
    for e in entries:
        trig, name = e.get("trigger"), str(e.get("name"))
        if trig is None:
            acts[name] = Activation("periodic")
            continue
        mode, chans = ("trigger", [trig]) if isinstance(trig, str) else \
            next(((m, list(trig[m])) for m in ("all", "any") if m in trig), ("trigger", []))
        writers = tuple(writer[c] for c in chans if c in writer)
        acts[name] = Activation(mode, writers) if writers and len(writers) == len(chans) else Activation("ingress")
    on_finish = {str(e.get("name")): e.get("publish") == "on_finish" for e in entries}
    explicit = {str(e.get("name")): int(e["worker"]) for e in entries if isinstance(e.get("worker"), int)}
    workers = doc.get("workers")
    return acts, on_finish, explicit, workers if isinstance(workers, int) and workers >= 1 else 1


def parse_join(value: Mapping[str, Any], fail: Any) -> Any:
    """``trigger: {all: [a, b], window: "5ms" | pairing: exact}`` or ``{any: [a, b]}`` as a ``Join``."""
    from ..sched.binding import Join

    unknown = [k for k in value if k not in JOIN_KEYS]
    if unknown:
        raise fail(f"unknown key {clip(unknown[0])}{suggest(str(unknown[0]), JOIN_KEYS)}; expected "
                   f"{', '.join(JOIN_KEYS)}")
    modes = [m for m in ("all", "any") if m in value]
    if len(modes) != 1:
        raise fail("a join names its channels under exactly one of 'all' or 'any'")
    chans = value[modes[0]]
    if not isinstance(chans, list) or not all(isinstance(c, str) and c for c in chans):
        raise fail(f"{modes[0]}: expected a list of channel names, found {clip(chans)}")
    window = None
    if value.get("pairing") not in (None, "exact", "approximate", "latest"):
        raise fail(f"pairing: expected exact, approximate or latest, found {clip(value.get('pairing'))}")
    if value.get("pairing") == "exact":
        window = 0
    if value.get("window") is not None:
        try:
            window = parse_duration(value["window"], what="window")
        except DurationError as e:
            raise fail(str(e)) from None
    elif value.get("pairing") == "approximate":
        raise fail("pairing: approximate needs a window (e.g. window: \"10ms\")")
    try:
        return Join(modes[0], tuple(chans), window)
    except ValueError as e:
        raise fail(str(e)) from None


def join_label(join: Any) -> str:
    """The task's ``trigger`` as the analysis sees it: a description (no channel has this name)."""
    return f"{join.mode}({', '.join(join.channels)})"
