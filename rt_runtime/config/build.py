"""From a parsed stack file to what the Runtime runs: graphs built, bindings, initial values, chains.

``stack.py`` reads and validates the file (no user code runs there); this module calls the user's
graph builders, ``initial:`` functions and speculation factories, and checks what needs the built
graphs (channel specs between tasks, egress codecs, initial values), all problems reported together.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from ..analysis.chains import Chain
from ..core.graph import Graph
from ..core.task import TaskError
from ..core.units import clip
from ..device.base import tensor_device
from ..sched import TaskBinding
from ..sched.budget import check_op_budgets
from .fields import fail, name_map, parse_op_budgets, resolve
from .model import StackConfig
from .taskset import ConfigError, fallback_budget, parse_join
from .wiring import channel_problems, egress_problems, initial_problems, raise_all


def _graph(cfg: StackConfig, task: str, key: str, device: str) -> Graph | None:
    e = cfg.entries[task]
    if e.get(key) is None:
        return None
    build = resolve(e[key], cfg.source, f"task '{task}': {key}", task)
    args_key = "args" if key == "graph" else "fallback_args"
    args = e.get(args_key) or {}
    try:
        graph = build(device=device, **args)
    except Exception as e_:  # noqa: BLE001 - a builder is the user's code: name it, the task and what it raised
        why = f"{type(e_).__name__}: {e_}"
        path = _culprit(lambda **kw: build(device=device, **kw), args) if isinstance(e_, (TypeError, ValueError)) \
            else None
        if path is not None:   # the argument whose value the builder could not use, named as the file has it
            value: Any = args
            for part in path:
                value = value[part]
            raise fail(cfg.source, f"task '{task}': {'.'.join([args_key, *path])}", f"{e[key]} cannot use "
                        f"{clip(value)} ({why})", task=task, fld=args_key) from None
        said = f"rejected its arguments ({e_})" if isinstance(e_, TypeError) else f"raised {why}"
        raise fail(cfg.source, f"task '{task}': {key}", f"{e[key]} {said}", task=task) from None
    if not isinstance(graph, Graph):
        raise fail(cfg.source, f"task '{task}': {key}", f"{e[key]} returned {type(graph).__name__}, not a Graph",
                    task=task)
    return graph


def _culprit(build: Callable[..., Any], args: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The argument a builder failed on: the one it builds without (its default taken), followed into a
    mapping value (``road`` -> ``road.lane_width``); None when no single argument is the cause."""
    for key, value in args.items():
        rest = {k: v for k, v in args.items() if k != key}
        if not _builds(build, rest):
            continue
        if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
            inner = _culprit(lambda **kw: build(**rest, **{key: kw}), value)
            return (key, *inner) if inner is not None else (key,)
        return (key,)
    return None


def _builds(build: Callable[..., Any], args: Mapping[str, Any]) -> bool:
    """Whether ``build(**args)`` returns a graph (only on a builder's failure path, to find its cause)."""
    try:
        return isinstance(build(**args), Graph)
    except Exception:  # noqa: BLE001 - the user's code: any failure means "not without this argument"
        return False


def _initial(cfg: StackConfig, task: str, device: str) -> Mapping[str, Any]:
    """The task's ``initial:`` function called: its mapping of graph input names to initial values."""
    ref = cfg.entries[task]["initial"]
    fn = resolve(ref, cfg.source, f"task '{task}': initial", task)
    try:
        values = fn(device=device)
    except Exception as e:  # noqa: BLE001 - the user's code
        raise fail(cfg.source, f"task '{task}': initial", f"{ref} raised {type(e).__name__}: {e}", task=task,
                    fld="initial") from None
    if not isinstance(values, Mapping):
        raise fail(cfg.source, f"task '{task}': initial", f"{ref} returned {type(values).__name__}, not a mapping "
                    f"of input names to values", task=task, fld="initial")
    return values


def _speculate(cfg: StackConfig, task: str, on: bool | None, graph: Graph | None) -> Any:
    """The task's ``speculate:`` key as a ``Speculate`` (None when absent or off)."""
    from .safety_keys import parse_speculate

    spec = parse_speculate(cfg.entries[task].get("speculate"))   # validated by parse_task
    if spec is None or on is False or (on is None and not spec.enabled):
        return None
    from ..safety.speculation import Speculate

    factory = resolve(spec.hypotheses, cfg.source, f"task '{task}': speculate.hypotheses", task)
    try:
        hypotheses = factory(**spec.args)
    except (TypeError, ValueError) as e:
        raise fail(cfg.source, f"task '{task}': speculate.hypotheses", f"{spec.hypotheses} rejected its arguments "
                    f"({e})", task=task, fld="speculate") from None
    except Exception as e:  # noqa: BLE001 - the user's factory
        raise fail(cfg.source, f"task '{task}': speculate.hypotheses", f"{spec.hypotheses} raised "
                    f"{type(e).__name__}: {e}", task=task, fld="speculate") from None
    out = Speculate(hypotheses, k=spec.k, atol=spec.atol, rows=spec.rows, margin=spec.margin, wait_for=spec.wait_for)
    bad = out.problem(graph) if graph is not None else None
    if bad is not None:
        raise fail(cfg.source, f"task '{task}': speculate.{bad[0]}", bad[1], task=task, fld="speculate")
    return out


def build_bindings(cfg: StackConfig, device: str | None = None,
                   speculate: bool | None = None) -> tuple[list[TaskBinding], dict[str, Any]]:
    """Build every task's graph and binding, and the initial channel values (channel -> tensor).

    ``speculate``: None runs the ``speculate:`` keys as configured (``enabled``), True turns every
    declared one on, False turns them all off.
    """
    device = device or cfg.device
    device = tensor_device(device)   # where tensors live: the twin cpu-async keeps them on the host
    bindings: list[TaskBinding] = []
    initial: dict[str, Any] = {}
    fed = {ch for e in cfg.entries.values() for ch in (e.get("outputs") or {}).values()} | \
        {ch for r in cfg.ingress for ch in r.channels.values()}
    problems: list[ConfigError] = []   # wiring that needs the built graphs: all reported together
    for task in cfg.tasks:
        e = cfg.entries[task.name]
        graph = _graph(cfg, task.name, "graph", device)
        fallback = _graph(cfg, task.name, "fallback", device)
        inputs = name_map(e.get("inputs"), cfg.source, f"task '{task.name}': inputs", task.name)
        executor = None
        if e.get("redundancy") is not None:   # validated (and its budget multiplied) by parse_task
            from ..safety.redundancy import Redundant
            from .safety_keys import parse_redundancy

            spec = parse_redundancy(e["redundancy"])
            loose = [o.name for o in graph.ops if not o.deterministic] if graph is not None else []
            if spec is not None and spec.mode != "invariants" and spec.compare == "exact" and loose:
                raise fail(cfg.source, f"task '{task.name}': redundancy", f"exact comparison needs deterministic "
                            f"ops; {loose} are not (give atol/rtol)", task=task.name, fld="redundancy")
            if spec is not None and graph is not None and spec.checks:
                from ..safety.invariants import referenced, referenced_inputs

                outs = {s.name for s in graph.outputs}
                unknown = sorted((referenced(spec.checks) - outs)
                                 | (referenced_inputs(spec.checks) - outs - {s.name for s in graph.inputs}))
                if unknown:
                    raise fail(cfg.source, f"task '{task.name}': redundancy.checks", f"{unknown} are not outputs of "
                                f"graph '{graph.name}' (expected some of {sorted(s.name for s in graph.outputs)})",
                                task=task.name, fld="redundancy")
            executor = Redundant(spec) if spec is not None else None
        try:
            binding = TaskBinding(
                dataclasses.replace(task, graph=graph), graph, inputs=inputs,
                outputs=name_map(e.get("outputs"), cfg.source, f"task '{task.name}': outputs", task.name),
                fallback=fallback, fallback_wcet_ns=fallback_budget(e, cfg.source, task.name),
                on_miss=e.get("on_miss", "skip"), on_overrun=e.get("on_overrun"),
                group=e.get("group"), recover_after=e.get("recover_after", 3), publish=e.get("publish", "let"),
                compile=e.get("compile"),
                worker=e.get("worker"), executor=executor, speculate=_speculate(cfg, task.name, speculate, graph),
                op_budgets=parse_op_budgets(e, cfg.source, task.name), join=_join(e, cfg.source, task.name),
                optional=_optional(e, cfg.source, task.name))
            check_op_budgets(binding, binding.op_budgets)
        except (TaskError, ValueError) as err:
            raise ConfigError(cfg.source, str(err), task=task.name) from None
        bindings.append(binding)
        if e.get("initial") is not None:
            values = _initial(cfg, task.name, device)
            problems += initial_problems(cfg.source, task.name, inputs, e["initial"], values, fed, binding.optional)
            for name, value in values.items():
                if name in inputs:
                    initial[inputs[name]] = value
    problems += egress_problems(cfg.source, cfg.egress, bindings)   # before a run, not mid-run in the encoder
    problems += channel_problems(cfg.source, bindings)              # task -> task connections, when built
    raise_all(cfg.source, problems)
    return bindings, initial


def run_chains(cfg: StackConfig, bindings: list[TaskBinding]) -> tuple[list[Chain], list[str]]:
    """The chains the runtime executes (those with a deadline), and notes for the user.

    A member that speculates cannot wait for its predecessor (its next release must be known in
    advance): the chain is cut before it, and it runs on its own trigger or period."""
    speculating = {b.name for b in bindings if b.speculate is not None}
    out, notes = [], []
    for c in cfg.chains:
        if c.deadline_ns is None:
            continue
        cut = next((k for k, n in enumerate(c.tasks) if n in speculating), len(c.tasks))
        if cut < len(c.tasks):
            notes.append(f"task '{c.tasks[cut]}' speculates, so it runs on its own "
                         f"{'trigger' if cfg.entries[c.tasks[cut]].get('trigger') else 'period'}, outside chain "
                         f"'{c.name}'" + (f" (the chain keeps {list(c.tasks[:cut])})" if cut >= 2 else
                                          " (the chain is not run as one)"))
        if cut >= 2:
            out.append(dataclasses.replace(c, tasks=c.tasks[:cut]))
    return out, notes


def _join(entry: Mapping[str, Any], source: str, task: str) -> Any:
    """A ``trigger:`` mapping as a ``Join`` (validated by parse_task), else None."""
    trig = entry.get("trigger")
    if not isinstance(trig, Mapping):
        return None
    return parse_join(trig, lambda m: fail(source, f"task '{task}': trigger", m, task=task, fld="trigger"))


def _optional(entry: Mapping[str, Any], source: str, task: str) -> frozenset[str]:
    """``optional: [input, ...]``: inputs a job may run without (their empty default until a message)."""
    raw = entry.get("optional")
    if raw is None:
        return frozenset()
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise fail(source, f"task '{task}': optional", f"expected a list of input names, found {raw!r}", task=task,
                    fld="optional")
    return frozenset(raw)
