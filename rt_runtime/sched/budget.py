"""Budget timing: on the virtual clock every op takes its declared budget, not what this machine took.

Under budget timing the logical timeline (releases, preemption points, misses, reactions, LET
publishes) follows from the inputs and the configuration alone: one schedule, hence one output
digest, on any machine, at any load, with any number of workers. What this machine really took is
recorded beside it (``EventKind.MEASURED``) and simulated by ``rt_runtime.analysis.hardware``.

How a task's budget ``C`` (its ``wcet``) is split over the ops of one run of its graph:

1. an op named in the task's ``op_budgets`` takes that budget;
2. the rest of one run's budget goes to the other ops in proportion to their declared ``cost_us``
   (all equal when no op declares one: an even split), in integer nanoseconds, the rounding
   remainder to the last of them, so one run takes exactly ``C`` (or the sum of the op budgets,
   when every op has one).

A time-redundant task's ``wcet`` already counts every run its job may take (``budget_factor``), so
one run's budget is ``C / budget_factor``. The fallback graph's ops follow the same rule with
``C``, or the task's ``fallback_wcet`` when it has one (what its degraded mode reserves). Speculative
ops are charged the budgets of the ops they run.
"""
from __future__ import annotations

import time
from typing import Iterable, Mapping

from ..core.graph import Graph
from ..core.op import Op
from ..core.task import TaskError
from .binding import TaskBinding


def runs_per_budget(binding: TaskBinding) -> int:
    """How many runs of the graph the task's ``wcet`` pays for (time redundancy: 2 or 3, else 1)."""
    spec = getattr(binding.executor, "spec", None)
    return max(1, int(getattr(spec, "budget_factor", 1)))


def split_budget(task: str, graph: Graph, budget_ns: int, op_budgets: Mapping[str, int]) -> list[int]:
    """One run's budget over the graph's ops, by the rule in the module docstring."""
    fixed = [op_budgets.get(o.name) for o in graph.ops]
    given = sum(b for b in fixed if b is not None)
    if given > budget_ns:
        raise TaskError(task, "op_budgets", f"graph '{graph.name}': the op budgets add up to {given / 1e6:.3f} ms, "
                                            f"more than one run's budget of {budget_ns / 1e6:.3f} ms (wcet)")
    free = [i for i, b in enumerate(fixed) if b is None]
    out = [b if b is not None else 0 for b in fixed]
    if free:
        rest = budget_ns - given
        weights = [max(graph.ops[i].cost_us, 0.0) for i in free]
        total = sum(weights)
        if total <= 0:
            weights, total = [1.0] * len(free), float(len(free))
        left = rest
        for i, w in zip(free[:-1], weights[:-1]):
            out[i] = int(rest * w / total)
            left -= out[i]
        out[free[-1]] = left
    return out


def check_op_budgets(binding: TaskBinding, op_budgets: Mapping[str, int]) -> None:
    """TaskError unless every named op exists in the task's graph or fallback and the sums fit."""
    graphs = [g for g in (binding.graph, binding.fallback) if g is not None]
    known = {o.name for g in graphs for o in g.ops}
    unknown = sorted(set(op_budgets) - known)
    if unknown:
        raise TaskError(binding.name, "op_budgets", f"no op named {unknown} in graph "
                        + " or ".join(f"'{g.name}'" for g in graphs) + f"; its ops: {sorted(known)}")
    for name, ns in op_budgets.items():
        if isinstance(ns, bool) or not isinstance(ns, int) or ns <= 0:
            raise TaskError(binding.name, "op_budgets", f"op '{name}': expected a positive duration, found {ns!r}")
    for g in graphs:
        split_budget(binding.name, g, run_budget(binding, g), op_budgets)


def run_budget(binding: TaskBinding, graph: Graph) -> int:
    """One run's budget of ``graph`` (the task's graph or its fallback): the fallback's own budget if given."""
    if graph is binding.fallback and binding.fallback_wcet_ns is not None:
        return binding.fallback_wcet_ns
    return binding.task.wcet_ns // runs_per_budget(binding)


class BudgetCost:
    """The cost model of budget timing: ``(task, job, op index, op, measured) -> the op's budget``.

    ``measure`` is what the driver reads around each op for the hardware timeline: the CPU time of
    the op's thread. ``logical`` tells the runtime that time no longer depends on this machine.
    """

    logical = True
    measure = staticmethod(time.thread_time_ns)

    def __init__(self, bindings: Iterable[TaskBinding], op_budgets: Mapping[str, Mapping[str, int]] | None = None) -> None:
        self.table: dict[str, dict[int, int]] = {}   # task -> op id -> ns: no key built per op on the hot path
        self._keep: list[Op] = []   # the ops whose ids key the table stay alive as long as it does
        for b in bindings:
            mine = dict((op_budgets or {}).get(b.name) or b.op_budgets)
            ops = self.table.setdefault(b.name, {})
            for g in (b.graph, b.fallback):
                if g is None:
                    continue
                for op, ns in zip(g.ops, split_budget(b.name, g, run_budget(b, g), mine)):
                    ops[id(op)] = ns
                    self._keep.append(op)

    def __call__(self, task: str, job: int, op_index: int, op: Op, measured_ns: int) -> int:
        """The op's budget; an op the table does not know (a custom executor's) takes its ``cost_us``."""
        ops = self.table.get(task)
        ns = ops.get(id(op)) if ops is not None else None
        return ns if ns is not None else int(round(op.cost_us * 1000))
