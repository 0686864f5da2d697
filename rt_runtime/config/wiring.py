"""How a stack file's parts connect: the keys of every entry, and channels from writers to readers.

A miswired stack used to run and "succeed" (0 trajectories out, exit 0): a typo in an ``inputs:``
channel, two tasks writing one channel, ``polcy: latest`` in a channel entry. Here that is refused
before anything runs, in the pass that ``check``, ``replay``, ``run``, ``faults`` and ``calibrate``
share; each problem is one line, and all the problems of a pass are reported together (a first
line says how many):

- ``key_problems``: a key a configuration does not have, at the top level or inside a task, chain,
  ``channels:``, ``ingress:`` or ``egress:`` entry, ``safety:`` (and its ``hysteresis:``),
  ``speculate:`` or ``redundancy:`` ("did you mean", from the keys that exist there).
- ``wiring_problems`` (no graphs needed): every channel has one writer (a task's output or an ingress
  route); every channel a task reads (``inputs:``) is written, fed by ingress, or may come from the
  task's ``initial:`` (checked once it is called) or is one of its ``optional:`` inputs; every ``trigger:`` is written or fed (an initial
  value releases a task once, not periodically); every egress channel is written by a task (egress
  publishes what tasks publish, not ingress); every ``channels:`` entry names a channel in use, once.
- ``channel_problems`` (``build_bindings``): each channel between tasks, writer spec against reader spec.
- ``initial_problems`` and ``egress_problems`` (``build_bindings``, with the graphs built): a channel
  fed only by ``initial:`` gets a value from it; each egress codec reads the layout (shape, columns,
  dtype) that the writer graph's output spec declares (``io.egress.Layout``).

The ingress codecs' message types are checked against a bag's topics by ``replay`` (the bag is
known only there).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..core.units import clip
from .schema import (CHAIN_KEYS, CHANNEL_KEYS, EGRESS_KEYS, HYSTERESIS_KEYS, INGRESS_KEYS,  # the models' fields
                     REDUNDANCY_KEYS, RUNTIME_TASK_KEYS, SAFETY_KEYS, SPECULATE_KEYS, STACK_KEYS,
                     TASK_KEYS)
from .yamlfile import ConfigError, suggest


class ConfigErrors(ConfigError):
    """Several problems found in one pass: a line saying how many, then one line each (each a ConfigError)."""

    def __init__(self, source: str, problems: list[ConfigError]) -> None:
        ValueError.__init__(self, f"{source}: {len(problems)} problems, one per line:\n"
                                  + "\n".join(str(p) for p in problems))
        self.source, self.task, self.field = source, problems[0].task, problems[0].field
        self.problems = problems


def check_top_level_keys(doc: Mapping[str, Any], source: str) -> None:
    """ConfigError for every key a configuration does not have: at the top level (a typo such as
    ``chain:``) and inside its entries (tasks, chains, channels, ingress, egress, safety, speculate,
    redundancy; ``key_problems``), all of them at once.

    ``parse_stack`` and ``load_taskset`` (``check``, ``analyze``, ``calibrate``) both call it first, so
    a file one of them refuses the other refuses too, with the same lines.
    """
    raise_all(source, key_problems(doc, source))


def raise_all(source: str, problems: list[ConfigError]) -> None:
    """Nothing when ``problems`` is empty; the one problem; or all of them in one ``ConfigErrors``."""
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise ConfigErrors(source, problems)


def _shown(key: object) -> str:
    """A key as written when it is a short printable string, else its clipped repr."""
    return key if isinstance(key, str) and key.isprintable() and len(key) <= 80 else clip(key)


def task_entries(doc: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Task name -> its entry, for the well-formed entries (the others are parse_taskset's to refuse)."""
    raw = doc.get("tasks")
    if isinstance(raw, Mapping):
        return {str(n): {**f, "name": n} for n, f in raw.items() if isinstance(f, Mapping)}
    if not isinstance(raw, list):
        return {}
    return {e["name"]: e for e in raw if isinstance(e, Mapping) and isinstance(e.get("name"), str)}


def _items(value: object) -> list[tuple[str, str]]:
    """A name -> channel mapping's string pairs (anything else is left to the parser)."""
    return [(k, v) for k, v in value.items() if isinstance(k, str) and isinstance(v, str)] \
        if isinstance(value, Mapping) else []


def _list(doc: Mapping[str, Any], key: str) -> list[tuple[int, Mapping[str, Any]]]:
    value = doc.get(key)
    return [(i, e) for i, e in enumerate(value) if isinstance(e, Mapping)] if isinstance(value, list) else []


def _route_label(kind: str, i: int, r: Mapping[str, Any]) -> str:
    return f"{kind} {r['topic']}" if isinstance(r.get("topic"), str) and r["topic"].isprintable() else f"{kind}[{i}]"


def key_problems(doc: Mapping[str, Any], source: str) -> list[ConfigError]:
    """Every key the configuration does not have, each with "did you mean" from the keys that exist there."""

    out: list[ConfigError] = []

    def unknown(where: str, value: Mapping[str, Any], keys: tuple[str, ...], fld: str | None = None,
                task: str | None = None) -> None:
        for key in value:
            if key not in keys:
                out.append(ConfigError(source, f"{where}{_shown(key)}: unknown key{suggest(key, keys)}; expected "
                                               f"one of {', '.join(keys)}", task=task, field=fld or str(key)))

    def unknown_grouped(where: str, value: object, keys: tuple[str, ...], fld: str, task: str | None = None) -> None:
        """As ``config.basetypes.validate`` words it (``unknown key(s) [...]``), with "did you mean" for each."""
        if not isinstance(value, Mapping):
            return
        bad = [k for k in value if k not in keys]
        if bad:
            hints = "".join(suggest(k, keys).replace(" (did you mean", f" ({_shown(k)}: did you mean") for k in bad)
            out.append(ConfigError(source, f"{where}: unknown key(s) {sorted(map(str, bad))}{hints}; expected "
                                           f"{', '.join(keys)}", task=task, field=fld))

    if not isinstance(doc, Mapping):
        return out
    for key in doc:
        if key not in STACK_KEYS:
            out.append(ConfigError(source, f"{_shown(key)}: unknown top-level key{suggest(key, STACK_KEYS)}; "
                                           f"expected one of {', '.join(STACK_KEYS)}", field=_shown(key)))
    task_keys = TASK_KEYS + RUNTIME_TASK_KEYS
    for name, e in task_entries(doc).items():
        unknown(f"task '{_shown(name)}': ", e, task_keys, task=name)
        unknown_grouped(f"task '{_shown(name)}': speculate", e.get("speculate"), SPECULATE_KEYS, "speculate", name)
        unknown_grouped(f"task '{_shown(name)}': redundancy", e.get("redundancy"), REDUNDANCY_KEYS, "redundancy", name)
        if e.get("fallback_args") is not None and e.get("fallback") is None:
            out.append(ConfigError(source, f"task '{_shown(name)}': fallback_args: given, but the task has no "
                                           f"fallback: graph to pass them to", task=name, field="fallback_args"))
    for i, c in _list(doc, "chains"):
        unknown(f"chain '{_shown(c['name'])}': " if isinstance(c.get("name"), str) else f"chains[{i}]: ", c,
                CHAIN_KEYS)
    for i, c in _list(doc, "channels"):
        unknown(f"channel '{_shown(c['name'])}': " if isinstance(c.get("name"), str) else f"channels[{i}]: ",
                c, CHANNEL_KEYS)
    for kind, keys in (("ingress", INGRESS_KEYS), ("egress", EGRESS_KEYS)):
        for i, r in _list(doc, kind):
            unknown(f"{_route_label(kind, i, r)}: ", r, keys)
            if kind == "ingress" and "channel" in r and "channels" in r:
                out.append(ConfigError(source, f"{_route_label(kind, i, r)}: channels: give 'channel' (a codec with "
                                               f"one output) or 'channels' (role -> channel), not both",
                                       field="channels"))
            if isinstance(r.get("codec"), str) and isinstance(r.get("channels"), Mapping):
                from ..io import EGRESS_CODECS, INGRESS_CODECS

                codecs: Mapping[str, Any] = INGRESS_CODECS if kind == "ingress" else EGRESS_CODECS
                roles = codecs[r["codec"]].roles if r["codec"] in codecs else ()
                verb = "produces" if kind == "ingress" else "reads"   # an extra egress role: never published
                for role in r["channels"] if roles else ():
                    if role not in roles:
                        out.append(ConfigError(source, f"{_route_label(kind, i, r)}: channels.{_shown(role)}: codec "
                                                       f"{r['codec']} {verb} no such role{suggest(role, roles)}; "
                                                       f"it {verb} {', '.join(roles)}", field="channels"))
    safety = doc.get("safety")
    unknown_grouped("safety", safety, SAFETY_KEYS, "safety")
    if isinstance(safety, Mapping):
        unknown_grouped("safety: hysteresis", safety.get("hysteresis"), HYSTERESIS_KEYS, "safety")
    return out


def _ingress_channels(r: Mapping[str, Any]) -> dict[str, str]:
    """An ingress route's role -> channel (``channel: X`` is the role ``value``)."""
    return {"value": r["channel"]} if isinstance(r.get("channel"), str) else dict(_items(r.get("channels")))


Writers = dict[str, list[tuple[str, "str | None"]]]


def _writers(doc: Mapping[str, Any], entries: Mapping[str, Mapping[str, Any]]) -> Writers:
    """Channel -> its writers in file order, each (who, task): ("task 'fusion' (outputs.tracks)", "fusion")."""
    out: Writers = {}
    for name, e in entries.items():
        for gout, ch in _items(e.get("outputs")):
            out.setdefault(ch, []).append((f"task '{name}' (outputs.{gout})", name))
    for i, r in _list(doc, "ingress"):
        for role, ch in _ingress_channels(r).items():
            out.setdefault(ch, []).append((_route_label("ingress", i, r) + ("" if role == "value" else
                                                                           f" (channels.{role})"), None))
    return out


def _fed(doc: Mapping[str, Any]) -> dict[str, str]:
    """Ingress topic -> the channel it feeds (for a trigger that names the topic instead)."""
    out = {}
    for _, r in _list(doc, "ingress"):
        chans = list(_ingress_channels(r).values())
        if isinstance(r.get("topic"), str) and chans:
            out[r["topic"]] = chans[0]
    return out


def wiring_problems(doc: Mapping[str, Any], source: str) -> list[ConfigError]:
    """Channels without a writer, with two, read but never written, declared but unused (no graphs needed)."""
    entries = task_entries(doc)
    writers = _writers(doc, entries)
    by_task = {ch for ch, ws in writers.items() if any(task is not None for _, task in ws)}
    known = set(writers)
    out: list[ConfigError] = []
    for ch, ws in writers.items():
        if len(ws) > 1:
            listed = ", ".join(who for who, _ in ws[:-1]) + f" and {ws[-1][0]}"
            task = next((t for _, t in ws if t is not None), None)
            out.append(ConfigError(source, f"channel '{ch}': written by {listed}; a channel has one writer (give "
                                           f"one of them a channel of its own)", task=task, field="outputs"))
    topics = _fed(doc)
    read: set[str] = set()
    for name, e in entries.items():
        optional = e.get("optional") if isinstance(e.get("optional"), list) else []
        for gin, ch in _items(e.get("inputs")):
            read.add(ch)
            # an optional input may have no writer at all: a sensor the vehicle lacks reads as its empty default
            if ch not in writers and e.get("initial") is None and gin not in optional:
                out.append(ConfigError(source, f"task '{name}': inputs.{gin}: channel '{ch}' is written by no task, "
                                               f"fed by no ingress and given no initial: value{suggest(ch, known)}",
                                       task=name, field="inputs"))
        trigger = e.get("trigger")
        if isinstance(trigger, str) and trigger.strip():
            read.add(trigger)
            if trigger not in writers:
                hint = f" (did you mean '{topics[trigger]}', the channel ingress {trigger} feeds?)" \
                    if trigger in topics else suggest(trigger, known)
                out.append(ConfigError(source, f"task '{name}': trigger: channel '{trigger}' is written by no task "
                                               f"and fed by no ingress, so the task is never released{hint}",
                                       task=name, field="trigger"))
    for i, r in _list(doc, "egress"):
        for role, ch in _items(r.get("channels")):
            read.add(ch)
            if ch not in by_task:
                why = "is only fed by ingress" if ch in writers else "is written by no task"
                out.append(ConfigError(source, f"{_route_label('egress', i, r)}: channels.{role}: channel '{ch}' "
                                               f"{why}; egress publishes what tasks write{suggest(ch, by_task)}",
                                       field="channels"))
    first: dict[str, int] = {}
    for i, c in _list(doc, "channels"):
        name = c.get("name")
        if not isinstance(name, str):
            continue
        if name in first:
            out.append(ConfigError(source, f"channel '{name}': declared twice (channels[{first[name]}] and "
                                           f"channels[{i}])", field="channels"))
        elif name not in writers and name not in read:
            hint = suggest(name, known | read)
            out.append(ConfigError(source, f"channel '{name}': channels[{i}] configures a channel that no task "
                                           f"reads or writes and no ingress or egress uses{hint}", field="channels"))
        first.setdefault(name, i)
    return out


def is_stack(doc: object) -> bool:
    """A runnable stack file, not a task set: every task has a graph, its inputs and outputs are mappings,
    ``channels``/``ingress``/``egress`` lists of mappings (what ``parse_stack`` accepts). ``check`` reads
    other files too, a task set with some run-time keys among them: their wiring is not checked."""
    if not isinstance(doc, Mapping):
        return False
    entries = task_entries(doc)
    raw = doc.get("tasks")
    if not entries or len(entries) != (len(raw) if isinstance(raw, (list, Mapping)) else -1):
        return False
    for e in entries.values():
        if e.get("graph") is None or not all(isinstance(e.get(k) or {}, Mapping) for k in ("inputs", "outputs")):
            return False
    return all(isinstance(doc.get(k) or [], list) and all(isinstance(x, Mapping) for x in doc.get(k) or [])
               for k in ("channels", "ingress", "egress"))


def check_wiring(doc: Mapping[str, Any], source: str) -> None:
    """ConfigError (all the problems) when a full stack's channels are miswired; nothing for a bare task set."""
    if is_stack(doc):
        raise_all(source, wiring_problems(doc, source))


def initial_problems(source: str, task: str, inputs: Mapping[str, str], ref: str, values: Mapping[str, Any],
                     fed: set[str], optional: Iterable[str] = ()) -> list[ConfigError]:
    """A task's inputs (but its ``optional`` ones) on channels nothing else feeds, for which its ``initial:``
    function gave no value; values it gives for names that are not the task's inputs (they would be dropped)."""
    out = []
    extra = sorted(str(k) for k in values if k not in inputs)
    if extra:
        out.append(ConfigError(source, f"task '{task}': initial: {ref} gives value(s) for {extra}, which are not "
                                       f"inputs of the task; its inputs are {sorted(inputs)}", task=task,
                               field="initial"))
    for gin, ch in sorted(inputs.items()):
        if ch not in fed and gin not in values and gin not in optional:
            out.append(ConfigError(source, f"task '{task}': inputs.{gin}: channel '{ch}' is written by no task and "
                                           f"fed by no ingress, and initial: {ref} gives no value for '{gin}' (it "
                                           f"gives {sorted(map(str, values))}){suggest(ch, fed)}",
                                   task=task, field="inputs"))
    return out


def _spec_text(spec: Any) -> str:
    dims = ", ".join(str(d) for d in spec.shape) + ("," if len(spec.shape) == 1 else "")
    return f"({dims}) {spec.dtype}"


def _written(bindings: Iterable[Any]) -> dict[str, tuple[str, str, Any]]:
    """Channel -> (writer task, its graph output, that output's spec)."""
    written: dict[str, tuple[str, str, Any]] = {}
    for b in bindings:
        specs = {s.name: s for s in b.graph.outputs}
        for gout, ch in b.outputs.items():
            if gout in specs:
                written.setdefault(ch, (b.name, gout, specs[gout]))
    return written


def egress_problems(source: str, routes: Iterable[Any], bindings: Iterable[Any]) -> list[ConfigError]:
    """Each egress route's channels against what its codec reads (``EgressCodec.layouts``): the writer
    graph's output spec (shape, columns, dtype) must be what the codec expects."""
    from ..io.egress import EGRESS_CODECS

    written = _written(bindings)
    out = []
    for r in routes:
        codec = EGRESS_CODECS[r.codec]
        for role, ch in r.channels.items():
            need, have = codec.layouts.get(role), written.get(ch)
            if need is None or have is None:
                continue
            task, gout, spec = have
            if not need.accepts(spec.shape, spec.dtype):
                out.append(ConfigError(source, f"egress {r.topic}: codec {codec.name} reads {role} from channel "
                                               f"'{ch}' as {need}; found {_spec_text(spec)} (task '{task}', output "
                                               f"{gout})", task=task, field="egress"))
    return out


def feeds(producer: Any, consumer: Any) -> str | None:
    """Why a task's output spec cannot feed another task's input spec, or None: same dtype, device and
    rank; each of the reader's fixed dims equal, each bounded dim at least the writer's bound."""
    from ..core.tensor import Dim

    for f in ("dtype", "device", "layout"):
        if getattr(producer, f) != getattr(consumer, f):
            return f"{f} {getattr(consumer, f)} expected, {getattr(producer, f)} written"
    if len(producer.shape) != len(consumer.shape):
        return f"{len(consumer.shape)} dimensions expected, {len(producer.shape)} written"
    for k, (w, r) in enumerate(zip(producer.shape, consumer.shape)):
        w_max = w.max if isinstance(w, Dim) else int(w)
        if isinstance(r, Dim):
            if w_max > r.max:
                return f"dim {k} at most {r.max} expected, up to {w_max} written"
        elif isinstance(w, Dim) or w_max != int(r):
            return f"dim {k} of {int(r)} expected, {w} written"
    return None


def channel_problems(source: str, bindings: Iterable[Any]) -> list[ConfigError]:
    """Every channel between two tasks: the writer graph's output spec against each reader graph's input
    spec, when the stack is built (as Drake's DiagramBuilder checks a connection), not at the first job."""
    bindings = list(bindings)
    written = _written(bindings)
    out = []
    for b in bindings:
        for g in (b.graph, b.fallback):
            if g is None:
                continue
            for spec in g.inputs:
                ch = b.inputs.get(spec.name)
                if ch is None or ch not in written or written[ch][0] == b.name:
                    continue   # ingress, a meta input, or the task's own state
                task, gout, have = written[ch]
                why = feeds(have, spec)
                if why is not None:
                    out.append(ConfigError(source, f"task '{b.name}': input {spec.name} reads channel '{ch}' as "
                                                   f"{_spec_text(spec)}; task '{task}' writes it (output {gout}) as "
                                                   f"{_spec_text(have)}: {why}", task=b.name, field="inputs"))
    return out
