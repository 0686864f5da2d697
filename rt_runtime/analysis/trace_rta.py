"""Schedulability rerun with what a trace observed, by the analysis of ``rt-runtime check``.

``check`` analyses the system the way it runs (``analysis.e2e``: releases derived from what triggers
each task, jitter propagated along chains, release offsets, the runtime's workers). Here the same
analysis runs twice on the run's task set: once with the configured budgets (what ``check`` says, and
the chain bounds it gives), once with what the trace observed: every task's WCET replaced by its
observed maximum execution time and its blocking term by the longest op observed in the tasks on its
worker that can block it (less urgent ones in the runtime's priority order; later relative deadlines
under EDF, a run-time chain's members due at the chain's deadline). For a task that then misses it
also says by how much: under fixed priorities the response time past its deadline (with the derived
release models, in the same order); under EDF the smallest deadline extension with which it passes
(the chain's deadline for a member of a run-time chain), each trial a rerun of the whole analysis.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Sequence

from ..core.chain import apply_chains
from ..core.task import Task, TaskError
from .chains import Chain
from .cpa import Activation, runtime_order
from .e2e import analyze_system
from .rta import FIXED_PRIORITY_POLICIES, response_time
from .schedulability import SchedulabilityReport

_RESOLUTION_NS = 10_000   # 10 µs is plenty for "needs Y ms more"
MAX_SEARCHES = 6          # EDF deadline searches per report (each is ~15 reruns of the analysis)


@dataclass(frozen=True)
class SystemModel:
    """What the analysis needs beyond the tasks, as ``check`` reads it from the configuration: what
    releases each task, who publishes on finish, the worker of each task, the channels each task writes."""

    activations: Mapping[str, Activation] | None = None
    on_finish: Mapping[str, bool] | None = None
    partition: Mapping[str, int] | None = None
    writes: Mapping[str, Collection[str]] | None = None
    steal: bool = False   # work-conserving dispatch across workers (``cpa.holistic``)


def observed_taskset(tasks: Sequence[Task], exec_max: Mapping[str, int], longest_op: Mapping[str, int],
                     policy: str, chains: Sequence[Chain] = (),
                     partition: Mapping[str, int] | None = None) -> list[Task]:
    """The task set with observed WCETs and blocking terms (module docstring); a task never observed keeps
    its budget, an explicit ``blocking`` is kept."""
    obs = [dataclasses.replace(t, wcet_ns=exec_max[t.name]) if exec_max.get(t.name, 0) > 0 else t for t in tasks]
    run = apply_chains(obs, [c for c in chains if c.deadline_ns is not None], policy)
    where = {t.name: (partition or {}).get(t.name, 0) for t in tasks}
    if policy in FIXED_PRIORITY_POLICIES:
        rank = {n: k for k, n in enumerate(runtime_order(run, policy))}
        below: Callable[[Task, Task], bool] = lambda t, k: rank[k.name] > rank[t.name]  # noqa: E731
    else:
        below = lambda t, k: k.deadline > t.deadline  # noqa: E731
    return [o if o.blocking_ns is not None else dataclasses.replace(o, blocking_ns=max(
        (longest_op.get(k.name, 0) for k in run if where[k.name] == where[t.name] and below(t, k)), default=0))
        for o, t in zip(obs, run)]


def _worker_utilization(report: SchedulabilityReport) -> dict[int, float]:
    """Utilization per worker, with the derived release rates."""
    return {int(k.removeprefix("worker")): float(v["utilization"]) for k, v in report.bounds.items()
            if k.startswith("worker") and isinstance(v, dict)}


def _fp_needs(report: SchedulabilityReport, i: int) -> tuple[int | None, str]:
    """Fixed priorities: task i's response time past its deadline; past the bound the holistic analysis
    gave up at, RTA with the derived release models (same worker, same order) and no deadline cut-off."""
    r = report.tasks[i]
    if r.response_ns is not None:
        return max(0, r.response_ns - r.deadline_ns), ""
    mine = [x for x in report.tasks if x.worker == r.worker]
    as_task = {x.name: Task(x.name, period_ns=x.period_ns, wcet_ns=x.wcet_ns, deadline_ns=1 << 60,
                            jitter_ns=x.jitter_ns) for x in mine}
    higher = [as_task[x.name] for x in mine if (x.priority_rank or 0) < (r.priority_rank or 0)]
    res = response_time(as_task[r.name], higher, r.blocking_ns)
    if res.response_ns is None:
        return None, res.note or "no bound"
    return max(0, res.response_ns - r.deadline_ns), ""


def _edf_needs(tasks: list[Task], i: int, chains: Sequence[Chain],
               analyse: Callable[[list[Task], Sequence[Chain]], SchedulabilityReport]) -> tuple[int | None, str]:
    """EDF: the smallest extension of task i's deadline (of its run-time chain's, for a member) with which
    the analysis passes it, searched up to one more period (a chain: up to its head's period)."""
    t = tasks[i]
    chain = next((c for c in chains if c.deadline_ns is not None and t.name in c.tasks), None)
    if chain is not None:
        lo = int(chain.deadline_ns)   # type: ignore[arg-type]
        hi = next(k.period_ns for k in tasks if k.name == chain.tasks[0])
    else:
        lo, hi = t.deadline, t.deadline + t.period_ns

    def passes(d: int) -> bool:
        trial, cs = list(tasks), list(chains)
        if chain is None:
            trial[i] = dataclasses.replace(t, deadline_ns=d)
        else:
            cs = [dataclasses.replace(c, deadline_ns=d) if c is chain else c for c in chains]
        try:
            return analyse(trial, cs).task(t.name).schedulable
        except (TaskError, ValueError):
            return False

    if hi <= lo or not passes(hi):
        what = f"chain '{chain.name}' " if chain is not None else ""
        return None, f"even a {what}deadline of {hi / 1e6:g} ms would not be enough"
    while hi - lo > _RESOLUTION_NS:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if passes(mid) else (mid, hi)
    if chain is None:
        return hi - t.deadline, ""
    return hi - int(chain.deadline_ns), f"on the deadline of its chain '{chain.name}'"   # type: ignore[arg-type]


def observed_rta(tasks: Sequence[Task], exec_max: Mapping[str, int], longest_op: Mapping[str, int],
                 policy: str, chains: Sequence[Chain] = (), writes: Mapping[str, Collection[str]] | None = None,
                 system: SystemModel | None = None) -> dict[str, Any]:
    """The analysis with observed times, as a JSON-ready dict with a one-line ``verdict``, and ``check``'s
    answer with the configured budgets (``check``: its verdict and chain bounds)."""
    tasks = list(tasks)
    sm = system or SystemModel()
    wr = writes if writes is not None else sm.writes

    def analyse(ts: list[Task], cs: Sequence[Chain], ops: Mapping[str, int] | None = None) -> SchedulabilityReport:
        return analyze_system(ts, policy, cs, sm.activations, sm.on_finish, sm.partition, ops, wr, sm.steal)

    try:
        obs = observed_taskset(tasks, exec_max, longest_op, policy, chains, sm.partition)
        report = analyse(obs, chains, longest_op)
        configured = analyse(tasks, chains)   # what `rt-runtime check` says of the configuration
    except (TaskError, ValueError, OverflowError, RecursionError) as e:   # a set the analysis cannot take
        return {"policy": policy, "schedulable": None, "error": str(e),
                "verdict": f"no schedulability analysis with the observed times: {e}"}
    util = _worker_utilization(report)
    overloaded = {w for w, u in util.items() if u > 1}
    rows, short = [], []
    searched: dict[str, tuple[int | None, str]] = {}   # task, or run-time chain -> (needs, why)
    for i, (base, r) in enumerate(zip(tasks, report.tasks)):
        need: int | None = 0
        why = ""
        key = next((c.name for c in chains if c.deadline_ns is not None and base.name in c.tasks), base.name)
        if not r.schedulable:
            # Past full utilization no deadline is long enough: say by how much each task outgrew its budget.
            if (r.worker or 0) in overloaded:
                need, why = None, "its worker is overloaded"
            elif policy in FIXED_PRIORITY_POLICIES:
                need, why = _fp_needs(report, i)
            elif key in searched:   # another member of the same run-time chain: the same search
                need, why = searched[key]
            elif len(searched) < MAX_SEARCHES:
                need, why = searched[key] = _edf_needs(obs, i, chains, lambda ts, cs: analyse(ts, cs, longest_op))
            else:
                need, why = None, f"not searched (only the first {MAX_SEARCHES} tasks that miss are)"
        row = {**r.to_json(), "budget_ms": base.wcet_ns / 1e6, "observed_wcet_ms": obs[i].wcet_ns / 1e6,
               "observed": exec_max.get(base.name, 0) > 0, "needs_ms": None if need is None else need / 1e6,
               "configured_response_time_ms": configured.tasks[i].to_json()["response_time_ms"],
               "configured_schedulable": configured.tasks[i].schedulable}
        if why:
            row["note"] = (row["note"] + "; " if row["note"] else "") + why
        rows.append(row)
        if not r.schedulable and (r.worker or 0) not in overloaded:
            short.append(f"task {base.name} needs {need / 1e6:.2f} ms more" + (f" ({why})" if why else "")
                         if need is not None else f"task {base.name} cannot meet its deadline ({why or r.note})")
    for w in sorted(overloaded):
        over = [(t.name, o.wcet_ns - t.wcet_ns) for t, o, r in zip(tasks, obs, report.tasks)
                if (r.worker or 0) == w and o.wcet_ns > t.wcet_ns]
        where = f" on worker {w}" if len(util) > 1 else ""
        short.append(f"the observed worst cases need {(util[w] - 1) * 100:.1f}% more processor than there is{where}"
                     + ("; over budget: " + ", ".join(f"task {n} needs {d / 1e6:.2f} ms more than its budget"
                                                      for n, d in over) if over else ""))
    unobserved = [t.name for t in tasks if exec_max.get(t.name, 0) <= 0]
    load = f"utilization {report.utilization:.3f}" if len(util) <= 1 else \
        f"utilization {', '.join(f'{util[w]:.3f}' for w in sorted(util))} on {len(util)} workers"
    verdict = (f"with what was observed, this configuration is {'' if report.schedulable else 'not '}schedulable"
               f" under {policy} ({load})" + (": " + "; ".join(short) if short else ""))
    if unobserved:
        verdict += f" [budgets kept for tasks that never ran: {', '.join(unobserved)}]"
    missed = [r.name for r in configured.tasks if not r.schedulable]
    return {"policy": policy, "schedulable": report.schedulable, "utilization": report.utilization,
            "utilization_by_worker": {str(w): u for w, u in sorted(util.items())},
            "configured_schedulable": configured.schedulable, "tasks": rows,
            "chains": [c.to_json() for c in report.chains], "bounds": report.bounds, "notes": list(report.notes),
            "check": {"schedulable": configured.schedulable, "can_miss": missed,
                      "chains": [c.to_json() for c in configured.chains], "notes": list(configured.notes)},
            "verdict": verdict}
