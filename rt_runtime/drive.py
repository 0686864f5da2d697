"""The driver: the one adapter between a stack file (``StackConfig``) and the pure ``Runtime``.

Replay (``replay.run``), the live node (``ros.node``), the fault campaign (``faults.harness``)
and the leak soak (``bench/leak_audit.py``) each feed a stack's ingress into a runtime and take its egress
out; what they share lives here, so device, capture and stream rules are wired once:

* ``open_stack`` builds the ``Runtime`` from the config (policy, workers, steal, channels, chains,
  the device ``device:`` names, ``realtime:`` on the wall clock) and the caller's options (clock,
  cost, trace sink, egress callback, threads, parallel computing, ingress adoption, stall limit);
* ``StackRuntime.warm_up`` runs every graph on synthetic inputs before the first deadline counts;
* ``StackRuntime.push_initial`` pushes the stack's initial channel values at time 0;
* ``ingress_tensor`` turns a decoded numpy array into a tensor on the stack's device (no copy on
  the host); ``host_copy`` turns a published value into a numpy copy the caller may keep;
* ``StackRuntime.trace_meta`` is the trace metadata every driver writes; ``close`` stops the
  runtime and the device (cpu-async: its stream threads).

What stays with each caller is only how its inputs arrive (a bag, ROS topics, a scenario with
faults) and where its outputs go (digest and bag, ROS publishers, the campaign's records).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .config.realtime import runtime_kwargs
from .config.stack import StackConfig, run_chains
from .core.chain import Chain
from .device.base import Device, device_for, tensor_device
from .exec.compile import DEFAULT_JOBS
from .exec.warmup import warm_up
from .sched import CostModel, Runtime, TaskBinding
from .sched.clock import Clock
from .sched.events import EventSink, Observer
from .sched.scheduler import Egress


def ingress_tensor(a: np.ndarray, device: str) -> Any:
    """A decoded array as a tensor where the stack's tensors live (``tensor_device``): no copy on the host.

    A read-only array (a view of a message's bytes) is wrapped as it is: the runtime only reads an
    ingress value (a channel copies it into its slot, or adopts it and never writes to it).
    """
    import torch

    if a.flags.writeable:
        t = torch.from_numpy(a)
    else:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            t = torch.from_numpy(a)
    return t if device == "cpu" else t.to(device, non_blocking=True)


def host_copy(data: Any) -> np.ndarray:
    """A numpy copy of a published value (the view the runtime lends is only valid during the call)."""
    if isinstance(data, np.ndarray):
        return data.copy()
    if data.device.type == "cpu":   # numpy's copy holds the GIL: no wait to get it back (torch's releases it)
        return data.detach().numpy().copy()
    return data.detach().to("cpu", copy=True).numpy()


@dataclass
class StackRuntime:
    """A stack file's runtime, built: its bindings, initial values, the runtime and its device."""

    cfg: StackConfig
    bindings: list[TaskBinding]
    initial: dict[str, Any]
    rt: Runtime
    device: Device

    @property
    def tensors(self) -> str:
        """Where ingress tensors live, as torch names it (the twin cpu-async keeps them on the host)."""
        return tensor_device(self.cfg.device)

    def to_tensor(self, a: np.ndarray) -> Any:
        """``ingress_tensor`` on this stack's device."""
        return ingress_tensor(a, self.tensors)

    def warm_up(self, seconds: float | None = None) -> None:
        """Run every executor (primary and fallback) on synthetic inputs in its task's compile mode, then let it
        capture its graph; ``seconds``: how long the stack will run (a replay: its bag's), which at each task's
        rate is the jobs ``auto`` weighs a compiled kernel's cost against (None: ``exec.compile.DEFAULT_JOBS``)."""
        for ts in self.rt.sched.tasks.values():
            jobs = DEFAULT_JOBS if seconds is None else max(1.0, seconds * 1e9 / ts.binding.task.period_ns)
            for ex in ts.executors:
                if ex is not None:
                    warm_up(ex, compile=ts.binding.compile, expected_jobs=jobs)

    def push_initial(self) -> None:
        """The stack's initial channel values, visible at time 0."""
        for channel, value in self.initial.items():
            self.rt.push(channel, 0, value)

    def safety_monitor(self) -> Any:
        """The config's ``safety:`` supervisor installed on the runtime, or None without one."""
        if self.cfg.safety is None:
            return None
        from .safety.monitor import SafetyMonitor

        return SafetyMonitor.from_spec(self.rt, self.cfg.safety).install()

    def observe(self, observers: Sequence[Observer], stamp: Callable[[int], int] | None = None) -> list[Any]:
        """Let ``observers`` (the live view) hear every event, after the safety monitor is installed (they hear
        its SAFETY events too), told the tasks and ``stamp`` first; their egress taps (``on_output``), which
        the caller's egress adapter calls with its host copy of each published value."""
        for o in observers:
            o.attach(sorted(self.rt.sched.tasks), stamp)
            self.rt.sched.listen(o, hot=True)
        return [o.on_output for o in observers if callable(getattr(o, "on_output", None))]

    def trace_meta(self, **extra: Any) -> dict[str, Any]:
        """What a saved trace says of the stack (ops, tasks, policy, workers), with ``extra`` keys."""
        b, rt = self.bindings, self.rt
        return {"ops": {x.name: [o.name for o in x.graph.ops] for x in b},
                "fallback_ops": {x.name: [o.name for o in x.fallback.ops] for x in b if x.fallback is not None},
                **extra, "config": self.cfg.source, "policy": self.cfg.policy, "workers": len(rt.sched.workers),
                "tasks_config": {x.name: {"period_ns": x.task.period_ns, "deadline_ns": x.task.deadline,
                                          "wcet_ns": x.task.wcet_ns, "priority": x.task.priority,
                                          "rank": rt.sched.tasks[x.name].prio, "trigger": x.task.trigger}
                                 for x in b},
                "device": self.device.name, "graphs": self.graph_stats()}

    def graph_stats(self) -> dict[str, dict[str, int]]:
        """Per task graph (``task``, and ``task/fallback`` for a degraded mode's), its executor's counters:
        runs (warm-up included), CUDA graph captures, replays, eager fallbacks, arena bytes (what
        ``analyze`` shows under "graphs")."""
        keys = ("jobs", "captures", "replays", "fallbacks", "arena_bytes", "graph_pool_bytes")
        out = {}
        for name, ts in sorted(self.rt.sched.tasks.items()):
            for label, ex in zip((name, f"{name}/fallback"), ts.executors):
                if ex is not None and hasattr(ex, "stats"):
                    st = ex.stats()
                    out[label] = {k: int(st.get(k, 0)) for k in keys}
        return out

    def close(self) -> list[int]:
        """Stop the runtime, then the device's threads; returns the workers stuck in an op."""
        stuck = self.rt.close()
        close = getattr(self.device, "close", None)   # cpu-async: its stream threads (queued work finishes)
        if close is not None and not stuck:
            close()
        return stuck


def open_stack(cfg: StackConfig, bindings: Sequence[TaskBinding], initial: dict[str, Any], *, clock: Clock,
               workers: int | None = None, cost: CostModel | None = None, sink: EventSink | None = None,
               egress: Egress | None = None, threaded: bool = False, realtime: bool = False,
               parallel: int | None = None, adopt_ingress: bool = False, stall_after_ns: int | None = None,
               chains: Sequence[Chain] | None = None, optimistic: bool = False) -> StackRuntime:
    """The runtime for ``cfg``'s ``bindings`` (from ``build_bindings``, possibly wrapped) and the caller's options.

    ``workers``: None takes the config's. ``realtime``: on the wall clock, what applies where the
    file has no ``realtime:`` (which wins); on a virtual clock never. ``chains``: None takes the
    config's (``run_chains``). The device is opened here, one per runtime, and closed by ``close``.
    """
    bindings = list(bindings)
    device = device_for(cfg.device)
    try:
        rt = Runtime(bindings, policy=cfg.policy, clock=clock, workers=workers or cfg.workers, steal=cfg.steal,
                     channels=cfg.channels, device=device, cost=cost, sink=sink, egress=egress, threaded=threaded,
                     parallel=parallel, optimistic=optimistic, adopt_ingress=adopt_ingress,
                     stall_after_ns=stall_after_ns,
                     chains=run_chains(cfg, bindings)[0] if chains is None else chains,
                     **(runtime_kwargs(cfg.realtime, default=realtime) if not clock.virtual else {"realtime": False}))
    except BaseException:
        close = getattr(device, "close", None)   # a stack that fails to build leaves no stream threads behind
        if close is not None:
            close()
        raise
    return StackRuntime(cfg, bindings, dict(initial), rt, device)
