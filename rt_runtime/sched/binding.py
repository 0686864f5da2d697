"""TaskBinding: which graph a task runs, which channels feed and take it, and how it reacts to faults.

Also the cost models: where execution time comes from on a ``VirtualClock``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Mapping

from ..core.graph import Graph
from ..core.op import Op
from ..core.task import Task, TaskError
from ..exec.kernel import REQUESTS
from .meta import meta_inputs


class Reaction(str, Enum):
    """What the watchdog does to a job that misses its deadline or overruns its budget."""

    SKIP = "skip"        # let it finish, drop its late output, keep the channel's last value
    ABORT = "abort"      # cancel it at the next op boundary and give its resources back
    DEGRADE = "degrade"  # abort it and switch the task (or its group) to the fallback graph
    NONE = "none"        # count and trace only


class Publish(str, Enum):
    """When a job's outputs become visible."""

    LET = "let"              # at release + deadline: deterministic
    ON_FINISH = "on_finish"  # as soon as it finishes: lower latency, the run is marked non-deterministic


@dataclass(frozen=True)
class Join:
    """Release on several channels: when each (``all``) or any (``any``) has a message the task has not read.

    ``all`` pairs the newest messages: with ``window_ns`` they must also be stamped within that of
    each other (0: the same stamp, as message_filters' exact-time policy; more: its approximate-time
    one), else the task waits for the lagging channel to catch up. The channels must be inputs."""

    mode: str
    channels: tuple[str, ...]
    window_ns: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("all", "any"):
            raise ValueError(f"join: mode must be 'all' or 'any', found {self.mode!r}")
        if len(self.channels) < 2 or len(set(self.channels)) < len(self.channels):
            raise ValueError(f"join: needs two or more distinct channels, found {list(self.channels)}")
        if self.window_ns is not None and (self.window_ns < 0 or self.mode != "all"):
            raise ValueError("join: a window applies to 'all' and must not be negative")


COMPILE_MODES = REQUESTS   # what a task's ``compile:`` may ask (exec.kernel, which imports no torch)


@dataclass(frozen=True)
class TaskBinding:
    """A task with its graph, channel wiring (graph name -> channel name) and fault handling."""

    task: Task
    graph: Graph | None = None
    inputs: Mapping[str, str] = field(default_factory=dict)
    outputs: Mapping[str, str] = field(default_factory=dict)
    fallback: Graph | None = None
    on_miss: Reaction | str = Reaction.SKIP
    # An overrun that still meets its deadline changes nothing unless the user asks for a reaction.
    on_overrun: Reaction | str | None = None   # None: none (count and trace only)
    group: str | None = None                   # degrade switches the whole group
    recover_after: int = 3                     # clean cycles in fallback before switching back
    # The fallback graph's budget (None: the task's wcet): what a degraded task's reserved releases
    # cost under budget timing and what the analysis charges for them (docs/SAFETY.md, "Degraded mode").
    fallback_wcet_ns: int | None = None
    publish: Publish | str = Publish.LET
    compile: str | None = None                 # its kernels' mode (exec.kernel.REQUESTS); None: the default
    worker: int | None = None                  # explicit partition; None: first-fit decreasing
    # Builds the primary graph's executor instead of a plain GraphExecutor (e.g. the time-redundant
    # ``rt_runtime.safety.RedundantExecutor``): called as ``executor(binding, device, owner=...,
    # check_inputs=..., capture=..., urgency=...)`` (urgency: its device streams' in [0, 1]); it must offer
    # what the scheduler uses of a GraphExecutor.
    executor: Callable[..., Any] | None = None
    # Speculative execution of the next job on predicted inputs in slack time (on a VirtualClock, or
    # in worker threads): a ``rt_runtime.safety.speculation.Speculate``; None (the default): off.
    speculate: Any = None
    # Budgets of single ops (op name -> ns) for budget timing (``sched.budget``); the other ops share
    # the rest of the task's ``wcet``.
    op_budgets: Mapping[str, int] = field(default_factory=dict)
    # Released by several channels (``Join``) instead of the task's single ``trigger``.
    join: Join | None = None
    # Inputs a job may run without: with nothing on its channel yet, it reads a zero-filled default
    # (empty where a dimension is symbolic) and its ``x.meta`` says stale, seq -1.
    optional: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        t = self.task
        g = self.graph if self.graph is not None else t.graph
        if g is None:
            raise TaskError(t.name, "graph", "a task needs a graph to run (binding or task)")
        object.__setattr__(self, "graph", g)
        object.__setattr__(self, "inputs", dict(self.inputs))
        object.__setattr__(self, "outputs", dict(self.outputs))
        object.__setattr__(self, "op_budgets", dict(self.op_budgets))
        object.__setattr__(self, "optional", frozenset(self.optional))
        object.__setattr__(self, "on_miss", Reaction(self.on_miss))
        object.__setattr__(self, "on_overrun", Reaction(self.on_overrun if self.on_overrun is not None
                                                        else Reaction.NONE))
        object.__setattr__(self, "publish", Publish(self.publish))
        need = {s.name for s in g.inputs} - set(meta_inputs(s.name for s in g.inputs))   # x.meta follows x
        if set(self.inputs) != need:
            raise TaskError(t.name, "inputs", f"graph '{g.name}' reads {sorted(need)}; the binding maps "
                                              f"{sorted(self.inputs)}")
        if not self.optional <= set(self.inputs):
            raise TaskError(t.name, "inputs", f"optional {sorted(self.optional - set(self.inputs))} are not inputs")
        if self.join is not None:
            if not t.is_triggered:
                raise TaskError(t.name, "trigger", "a join releases an event-triggered task: give min_interarrival")
            missing = sorted(set(self.join.channels) - set(self.inputs.values()))
            if missing:
                raise TaskError(t.name, "trigger", f"join channels {missing} are not inputs of the task")
        have = {s.name for s in g.outputs}
        extra = set(self.outputs) - have
        if extra:
            raise TaskError(t.name, "outputs", f"graph '{g.name}' has no output(s) {sorted(extra)}")
        if self.fallback is not None:
            f = self.fallback
            f_need = {s.name for s in f.inputs} - set(meta_inputs(s.name for s in f.inputs))
            if not f_need <= need:
                raise TaskError(t.name, "fallback", f"graph '{f.name}' reads inputs the task does not map: "
                                                    f"{sorted(f_need - need)}")
            missing = set(self.outputs) - {s.name for s in f.outputs}
            if missing:
                raise TaskError(t.name, "fallback", f"graph '{f.name}' does not produce {sorted(missing)}")
        if Reaction.DEGRADE in (self.on_miss, self.on_overrun) and self.fallback is None:
            raise TaskError(t.name, "on_miss", "degrade needs a fallback graph")
        if self.recover_after < 1:
            raise TaskError(t.name, "recover_after", f"must be >= 1, found {self.recover_after}")

    @property
    def name(self) -> str:
        """The task's name."""
        return self.task.name


# (task, job index, op index, op, measured wall ns) -> virtual ns the op takes.
CostModel = Callable[[str, int, int, Op, int], int]


class MeasuredCost:
    """Virtual time advances by what ``measure`` read around the op: the cost is the measurement.

    ``measured`` tells the inline driver so (it books the measurement itself, no model call).
    """

    measured = True

    def __init__(self, measure: Callable[[], int], doc: str) -> None:
        self.measure = measure
        self.__doc__ = doc

    def __call__(self, task: str, job: int, op_index: int, op: Op, measured_ns: int) -> int:
        """The measurement, unchanged."""
        return measured_ns


measured_cost = MeasuredCost(time.monotonic_ns, "The op's real (wall) duration: a replay as slow as the hardware.")
cpu_time_cost = MeasuredCost(time.thread_time_ns, "The CPU time the op's thread used: immune to other processes on "
                             "a loaded machine (no spurious misses in a replay), blind to other threads or a GPU.")


def declared_cost(task: str, job: int, op_index: int, op: Op, measured_ns: int) -> int:
    """Virtual time advances by the op's declared ``cost_us``: the simulator oracle's model."""
    return int(round(op.cost_us * 1000))


def zero_cost(task: str, job: int, op_index: int, op: Op, measured_ns: int) -> int:
    """Execution takes no virtual time: a replay's LET outputs do not depend on it anyway."""
    return 0

