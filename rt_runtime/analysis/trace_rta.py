"""Schedulability rerun with what a trace observed: worst execution times and longest ops.

The configured budgets (WCETs) are what ``rt-runtime check`` analyses; a trace shows what the
tasks really took. Here every task's WCET is replaced by its observed maximum execution time and
its blocking term by the longest op observed in the tasks that can block it (less urgent ones
under fixed priorities, longer relative deadlines under EDF), and ``analyze_taskset`` is rerun.
For a task that then misses, the analysis also says by how much: the response time past its
deadline (fixed priorities, from the same priority order), or under EDF the smallest deadline
extension with which it would pass (searched up to its period, where Spuri's analysis stops).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Collection, Mapping, Sequence

from ..core.task import Task, TaskError
from .chains import Chain
from .edf import spuri_response_times
from .rta import FIXED_PRIORITY_POLICIES, priority_order, response_time
from .schedulability import SchedulabilityReport, analyze_taskset

_RESOLUTION_NS = 10_000   # 10 µs is plenty for "needs Y ms more"


def observed_taskset(tasks: Sequence[Task], exec_max: Mapping[str, int], longest_op: Mapping[str, int],
                     policy: str) -> list[Task]:
    """The task set with WCET := observed max execution time and blocking := observed longest op."""
    tasks = [dataclasses.replace(t, wcet_ns=exec_max[t.name]) if exec_max.get(t.name, 0) > 0 else t for t in tasks]
    if policy in FIXED_PRIORITY_POLICIES:
        order = priority_order(tasks, policy)
        can_block = {tasks[i].name: [tasks[j].name for j in order[r + 1:]] for r, i in enumerate(order)}
    else:
        can_block = {t.name: [k.name for k in tasks if k.deadline > t.deadline] for t in tasks}
    return [t if t.blocking_ns is not None else dataclasses.replace(
        t, blocking_ns=max((longest_op.get(n, 0) for n in can_block[t.name]), default=0))
            for t in tasks]


def _needs_ns(tasks: list[Task], i: int, policy: str) -> tuple[int | None, str]:
    """How much longer than its deadline task i needs under the observed task set (None: no bound)."""
    t = tasks[i]
    if policy in FIXED_PRIORITY_POLICIES:
        order = priority_order(tasks, policy)
        higher = [tasks[j] for j in order[:order.index(i)]]
        loose = dataclasses.replace(t, deadline_ns=1 << 60)   # same priority order, no deadline cut-off
        r = response_time(loose, higher, t.blocking_ns or 0)
        if r.response_ns is None:
            return None, r.note or "no bound"
        return max(0, r.response_ns - t.deadline), ""
    lo, hi = t.deadline, t.period_ns

    def passes(d: int) -> bool:
        trial = list(tasks)
        trial[i] = dataclasses.replace(t, deadline_ns=d)
        return spuri_response_times(trial)[i].response_ns is not None

    if hi <= lo or not passes(hi):
        return None, "even a deadline equal to its period would not be enough"
    while hi - lo > _RESOLUTION_NS:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if passes(mid) else (mid, hi)
    return hi - t.deadline, ""


def observed_rta(tasks: Sequence[Task], exec_max: Mapping[str, int], longest_op: Mapping[str, int],
                 policy: str, chains: Sequence[Chain] = (),
                 writes: Mapping[str, Collection[str]] | None = None) -> dict[str, Any]:
    """The analysis with observed times, as a JSON-ready dict with a one-line ``verdict``."""
    tasks = list(tasks)
    try:
        obs = observed_taskset(tasks, exec_max, longest_op, policy)
        report: SchedulabilityReport = analyze_taskset(obs, policy, chains, writes)
        configured = analyze_taskset([dataclasses.replace(t, blocking_ns=o.blocking_ns) for t, o in zip(tasks, obs)],
                                     policy, chains, writes)
    except (TaskError, ValueError) as e:
        return {"policy": policy, "schedulable": None, "error": str(e),
                "verdict": f"no schedulability analysis with the observed times: {e}"}
    rows = []
    short: list[str] = []
    overloaded = report.utilization > 1
    for i, (base, r) in enumerate(zip(tasks, report.tasks)):
        # Past full utilization no deadline is long enough: say by how much each task outgrew its budget.
        need, why = (0, "") if r.schedulable else \
            (None, "the processor is overloaded") if overloaded else _needs_ns(obs, i, policy)
        row = {**r.to_json(), "budget_ms": base.wcet_ns / 1e6, "observed_wcet_ms": obs[i].wcet_ns / 1e6,
               "observed": exec_max.get(base.name, 0) > 0, "needs_ms": None if need is None else need / 1e6}
        if why:
            row["note"] = (row["note"] + "; " if row["note"] else "") + why
        rows.append(row)
        if not r.schedulable and not overloaded:
            short.append(f"task {base.name} needs {need / 1e6:.2f} ms more" if need is not None else
                         f"task {base.name} cannot meet its deadline ({why or r.note})")
    if overloaded:
        over = [(t.name, o.wcet_ns - t.wcet_ns) for t, o in zip(tasks, obs) if o.wcet_ns > t.wcet_ns]
        short.append(f"the observed worst cases need {(report.utilization - 1) * 100:.1f}% more processor than "
                     f"there is" + ("; over budget: " + ", ".join(f"task {n} needs {d / 1e6:.2f} ms more than its "
                                                                  f"budget" for n, d in over) if over else ""))
    unobserved = [t.name for t in tasks if exec_max.get(t.name, 0) <= 0]
    verdict = (f"with what was observed, this configuration is {'' if report.schedulable else 'not '}schedulable"
               f" under {policy} (utilization {report.utilization:.3f})" + (": " + "; ".join(short) if short else ""))
    if unobserved:
        verdict += f" [budgets kept for tasks that never ran: {', '.join(unobserved)}]"
    return {"policy": policy, "schedulable": report.schedulable, "utilization": report.utilization,
            "configured_schedulable": configured.schedulable, "tasks": rows,
            "chains": [c.to_json() for c in report.chains], "bounds": report.bounds, "notes": list(report.notes),
            "verdict": verdict}
