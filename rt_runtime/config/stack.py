"""The full runtime configuration: the task set plus graphs, channels, ingress and egress.

A stack file is a task set (``policy``, ``tasks``, ``chains``; see ``taskset.py``) whose tasks
also name the graph they run and how its inputs and outputs map onto channels::

    tasks:
      - name: lidar_objects
        period: "100ms"
        wcet: "40ms"
        graph: pipelines.lidar:build_lidar_graph     # module:function(device=..., **args) -> Graph
        inputs: {points: lidar/points}                # graph input -> channel
        outputs: {boxes: lidar/boxes}                 # graph output -> channel
    ingress:                                          # topic -> codec -> channel
      - {topic: /sensing/lidar/points, codec: lidar_points, channel: lidar/points}
    egress:                                           # channels -> codec -> topic
      - {topic: /planning/trajectory, codec: path, channels: {trajectory: planning/trajectory}}

Topics are remappable (``--remap /sensing/lidar/points=/my/points``), so a bag recorded by
someone else's vehicle replays against the same configuration.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from ..core.units import DurationError, clip, parse_duration
from ..io import EGRESS_CODECS, INGRESS_CODECS
from ..sched import ChannelConfig, ChannelPolicy
from ..sched.binding import COMPILE_MODES, Publish, Reaction
# The records of a parsed file are model.py's and the graphs are built by build.py (which reads only
# model.py and fields.py): the names stay importable from here, where a stack file is read.
from .build import build_bindings, run_chains  # noqa: F401 - re-exported
from .fields import MODULE_REF, fail, name_map, parse_op_budgets, resolve  # noqa: F401 - resolve re-exported
from .model import EgressRoute, IngressRoute, StackConfig  # noqa: F401 - re-exported
from .realtime import parse_realtime
from .taskset import ConfigError, fallback_budget, load_yaml, parse_taskset
from .wiring import check_top_level_keys, check_wiring, suggest

DEVICE = re.compile(r"(cpu|cpu-async|cuda(:[0-9]{1,4})?)")   # what `device:` may name (cuda:N checked against this machine)
MAX_WORKERS = 1024
MIN_DIAGNOSTICS_PERIOD_NS = 1_000_000             # 1 ms: diagnostics are a status message, not a data stream


def parse_remap(items: list[str] | None) -> dict[str, str]:
    """``["/a=/b", ...]`` into ``{"/a": "/b"}``; a malformed item is a ValueError naming it."""
    out: dict[str, str] = {}
    for item in items or []:
        old, sep, new = item.partition("=")
        if not sep or not old or not new:
            raise ValueError(f"--remap: expected FROM=TO, found {item!r}")
        out[old] = new
    return out


def parse_stack(doc: Mapping[str, Any], source: str, remap: Mapping[str, str] | None = None) -> StackConfig:
    """Validate a stack document; graphs are not built yet (see ``build_bindings``)."""
    check_top_level_keys(doc, source)
    policy, tasks, chains = parse_taskset(doc, source)
    raw_tasks = doc["tasks"]
    entries = {e["name"]: e for e in raw_tasks} if not isinstance(raw_tasks, Mapping) else \
        {n: {"name": n, **f} for n, f in raw_tasks.items()}
    for name, e in entries.items():
        if "graph" not in e:
            raise fail(source, f"task '{name}': graph", "missing: 'package.module:function' building the task's graph",
                        task=name, fld="graph")
        name_map(e.get("inputs"), source, f"task '{name}': inputs", name)
        name_map(e.get("outputs"), source, f"task '{name}': outputs", name)
        parse_op_budgets(e, source, name)
        _runtime_keys(e, source, name)

    channels = []
    for i, c in enumerate(_list(doc, "channels", source)):
        where = f"channels[{i}]"
        if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
            raise fail(source, where, f"expected a mapping with a name, found {clip(c)}")
        try:
            pol = ChannelPolicy(c.get("policy", "latest"))
        except ValueError:
            raise fail(source, f"channel '{c['name']}': policy", f"expected one of "
                        f"{', '.join(p.value for p in ChannelPolicy)}, found {clip(c.get('policy'))}") from None
        depth = c.get("depth", 1)
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise fail(source, f"channel '{c['name']}': depth", f"expected a positive integer, found {clip(depth)}")
        channels.append(ChannelConfig(c["name"], pol, depth))

    remap = dict(remap or {})
    ingress = []
    for i, r in enumerate(_list(doc, "ingress", source)):
        where = f"ingress[{i}]"
        if not isinstance(r, Mapping) or not isinstance(r.get("topic"), str):
            raise fail(source, where, f"expected topic, codec and channel (or channels), found {clip(r)}")
        if not isinstance(r.get("codec"), str) or r["codec"] not in INGRESS_CODECS:
            raise fail(source, f"{where}: codec", f"expected one of {', '.join(INGRESS_CODECS)}, found "
                                                   f"{clip(r.get('codec'))}")
        codec = INGRESS_CODECS[r["codec"]]
        chans = {"value": r["channel"]} if isinstance(r.get("channel"), str) else \
            name_map(r.get("channels"), source, f"{where}: channels")
        if set(chans) != set(codec.roles):
            extra = sorted(set(chans) - set(codec.roles))
            raise fail(source, f"{where}: channels", f"codec {codec.name} produces {list(codec.roles)}; "
                                                      f"found {sorted(chans)}"
                                                      f"{suggest(extra[0], codec.roles) if extra else ''}")
        ingress.append(IngressRoute(remap.get(r["topic"], r["topic"]), r["codec"], chans))
    egress = []
    for i, r in enumerate(_list(doc, "egress", source)):
        where = f"egress[{i}]"
        if not isinstance(r, Mapping) or not isinstance(r.get("topic"), str):
            raise fail(source, where, f"expected topic, a codec among {', '.join(EGRESS_CODECS)}, and channels; "
                                       f"found {clip(r)}")
        if not isinstance(r.get("codec"), str) or r["codec"] not in EGRESS_CODECS:
            raise fail(source, f"{where}: codec", f"expected one of {', '.join(EGRESS_CODECS)}, found "
                                                   f"{clip(r.get('codec'))}")
        chans = name_map(r.get("channels"), source, f"{where}: channels")
        missing = set(EGRESS_CODECS[r["codec"]].roles) - set(chans)
        if missing:
            raise fail(source, f"{where}: channels", f"codec {r['codec']} needs {sorted(missing)}")
        egress.append(EgressRoute(remap.get(r["topic"], r["topic"]), r["codec"], chans))

    workers, threads = doc.get("workers", 1), doc.get("threads", 1)
    for key, value in (("workers", workers), ("threads", threads)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKERS:
            raise fail(source, key, f"expected an integer from 1 to {MAX_WORKERS}, found {clip(value)}", fld=key)
    steal = doc.get("steal", False)
    if not isinstance(steal, bool):
        raise fail(source, "steal", f"expected true or false, found {clip(steal)}", fld="steal")
    try:
        diag = parse_duration(doc.get("diagnostics_period", "1s"), what="diagnostics_period")
    except DurationError as e:
        raise ConfigError(source, str(e), field="diagnostics_period") from None
    if diag < MIN_DIAGNOSTICS_PERIOD_NS:
        raise fail(source, "diagnostics_period", f"must be at least 1ms, found {clip(doc.get('diagnostics_period'))}",
                    fld="diagnostics_period")
    check_wiring(doc, source)   # one writer per channel, every read channel fed, ... (wiring.py)
    return StackConfig(source, policy, tasks, entries, chains, channels, ingress, egress,
                       device=check_device(doc.get("device", "cpu"), source), workers=workers, threads=threads,
                       steal=steal, frame=str(doc.get("frame", "map")),
                       diagnostics_period_ns=diag, remap=remap, safety=_safety(doc, source, entries, ingress),
                       realtime=parse_realtime(doc.get("realtime"), lambda m: fail(source, "realtime", m,
                                                                                      fld="realtime")))


def _list(doc: Mapping[str, Any], key: str, source: str) -> list[Any]:
    """An optional top-level list (``channels``, ``ingress``, ``egress``)."""
    value = doc.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise fail(source, key, f"expected a list, found {type(value).__name__} {clip(value)}", fld=key)
    return value


def _runtime_keys(e: Mapping[str, Any], source: str, name: str) -> None:
    """The run-time keys of a task entry whose wrong type would otherwise fail deep inside the runtime."""
    for key in ("graph", "fallback", "initial"):
        ref = e.get(key)
        module, _, fn = ref.partition(":") if isinstance(ref, str) else ("", "", "")
        if ref is not None and (not MODULE_REF.fullmatch(module) or not fn.isidentifier()):
            why = " (a relative module path has no package to be relative to)" if module.startswith(".") else ""
            raise fail(source, f"task '{name}': {key}", f"expected 'package.module:function', found {clip(ref)}{why}",
                        task=name, fld=key)
    for key in ("args", "fallback_args"):
        args = e.get(key)
        if args is not None and (not isinstance(args, Mapping) or not all(isinstance(k, str) for k in args)):
            raise fail(source, f"task '{name}': {key}", f"expected a mapping of argument names to values, found "
                        f"{clip(args)}", task=name, fld=key)
    fallback_budget(e, source, name)   # a positive duration, and only beside a fallback
    for key, choices in (("on_miss", Reaction), ("on_overrun", Reaction), ("publish", Publish), ("compile", COMPILE_MODES)):
        value = e.get(key)
        names = [getattr(c, "value", c) for c in choices]
        if value is not None and value not in names:
            raise fail(source, f"task '{name}': {key}", f"expected one of {', '.join(names)}, found {clip(value)}"
                        f"{suggest(value, names) if isinstance(value, str) else ''}", task=name, fld=key)
    recover = e.get("recover_after")
    if recover is not None and (isinstance(recover, bool) or not isinstance(recover, int) or recover < 1):
        raise fail(source, f"task '{name}': recover_after", f"expected a positive integer (clean jobs in a row "
                    f"before leaving the fallback), found {clip(recover)}", task=name, fld="recover_after")
    worker = e.get("worker")
    if worker is not None and (isinstance(worker, bool) or not isinstance(worker, int) or worker < 0):
        raise fail(source, f"task '{name}': worker", f"expected a worker index (0, 1, ...), found {clip(worker)}",
                    task=name, fld="worker")


def check_device(value: object, source: str) -> str:
    """``device:``: cpu, cpu-async, cuda or cuda:N; a CUDA device is checked against this machine (torch asked only then)."""
    if not isinstance(value, str) or not DEVICE.fullmatch(value):
        raise fail(source, "device", f"expected cpu, cpu-async, cuda or cuda:N, found {clip(value)}", fld="device")
    if value.startswith("cuda"):
        import torch

        try:
            n = torch.cuda.device_count()
        except Exception:  # noqa: BLE001 - a broken driver is no device
            n = 0
        index = int(value.partition(":")[2] or 0)
        if n == 0:
            raise fail(source, "device", f"{value}: this machine has no CUDA device torch can use "
                                          f"(torch.cuda.device_count() is 0); use cpu", fld="device")
        if index >= n:
            raise fail(source, "device", f"{value}: this machine has {n} CUDA device(s), cuda:0 to cuda:{n - 1}",
                        fld="device")
    return value


def _safety(doc: Mapping[str, Any], source: str, entries: Mapping[str, Any], ingress: list[IngressRoute]) -> Any:
    """The ``safety:`` key, checked against the tasks and the ingress channels."""
    from .safety_keys import parse_safety

    def duration(value: object, what: str) -> int:
        try:
            return parse_duration(value, what=what)
        except DurationError as e:
            raise ValueError(str(e)) from None

    try:
        spec = parse_safety(doc.get("safety"), duration)
    except ValueError as e:
        raise fail(source, "safety", str(e), fld="safety") from None
    if spec is None:
        return None
    if spec.planner not in entries:
        raise fail(source, "safety: planner", f"no task named {clip(spec.planner)}; tasks: {sorted(entries)}",
                    fld="safety")
    fed = {ch for r in ingress for ch in r.channels.values()}
    unknown = sorted(set(spec.sensors) - fed)
    if unknown:
        raise fail(source, "safety: sensors", f"{unknown} are not ingress channels; they are {sorted(fed)}"
                    f"{suggest(unknown[0], fed)}", fld="safety")
    return spec


def load_stack(path: str | Path, remap: Mapping[str, str] | None = None) -> StackConfig:
    """Read and validate a stack file."""
    return parse_stack(load_yaml(path), str(path), remap)

