"""``analyze_trace``: everything ``rt-runtime analyze`` reports about a trace, as plain data.

Per task: jobs, misses, response and execution times against the budget, release jitter, slack.
Per op: execution time distributions, and which ops dominate each task's worst jobs. Per missed
job: the accounting of its response time and its cause (``trace_causes``). Per chain: latency and
data age (``trace_chains``). And the schedulability analysis rerun with the observed execution
times (``trace_rta``). Pure functions over the trace's numpy columns; no I/O, no printing.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..core.chain import apply_chains
from ..core.task import Task, TaskError
from ..sched.events import REACT_SPEC_HIT, REACT_SPEC_MISS
from ..sched.events import EventKind as K  # noqa: N814
from ..sched.policy import Policy, partition
from ..trace.ring import TraceColumns
from .chains import Chain
from .cpa import Activation
from .hardware import hardware_report, measured_jobs
from .trace_causes import Attributor, MissAccount
from .trace_chains import ChainTimes, chain_times, wiring_chains
from .trace_jobs import Trace, build, op_name, percentiles_ms
from .trace_rta import SystemModel, observed_rta


@dataclass
class TaskStats:
    """One task's jobs as the trace shows them (ns arrays over finished jobs)."""

    name: str
    jobs: int                     # releases (RELEASE events), as the runtime counts them
    misses: int                   # MISS events, as the runtime counts them
    finished: int
    aborted: int                  # ABORT events (watchdog or a failing op)
    watchdog_aborted: int         # aborted before their deadline by a watchdog reaction (no MISS)
    aborted_after_miss: int       # aborted by the reaction to their MISS
    failed: int                   # aborted without a watchdog reaction: an op raised
    dropped: int                  # released without input: never ran
    overruns: int
    response_ns: np.ndarray
    exec_ns: np.ndarray
    budget_ns: int | None
    deadline_ns: int | None
    jitter_ns: int | None         # spread (max - min) of the intervals between consecutive releases
    min_slack_ns: int | None      # min(deadline - response) over finished jobs
    start_delay_ns: np.ndarray    # start - release
    worst_ops: list[dict[str, Any]] = field(default_factory=list)
    causes: dict[str, int] = field(default_factory=dict)
    spec_hits: int = 0            # jobs committed from a speculative result (REACTION, a = 5)
    spec_misses: int = 0          # releases whose hypotheses all missed (REACTION, a = 6)

    def to_json(self) -> dict[str, Any]:
        """The documented task entry plus extra keys."""
        ms = lambda ns: None if ns is None else ns / 1e6  # noqa: E731
        exec_ms = percentiles_ms(self.exec_ns, (50, 99))
        return {"name": self.name, "jobs": self.jobs, "misses": self.misses,
                "miss_ratio": self.misses / self.jobs if self.jobs else 0.0,
                "response_ms": percentiles_ms(self.response_ns), "exec_ms": exec_ms,
                "finished": self.finished, "aborted": self.aborted, "watchdog_aborted": self.watchdog_aborted,
                "aborted_after_miss": self.aborted_after_miss, "failed": self.failed,
                "dropped_no_input": self.dropped, "overruns": self.overruns, "budget_ms": ms(self.budget_ns),
                "deadline_ms": ms(self.deadline_ns),
                "exec_over_budget": (exec_ms["max"] * 1e6 > self.budget_ns) if self.budget_ns else None,
                "release_jitter_ms": ms(self.jitter_ns), "min_slack_ms": ms(self.min_slack_ns),
                "start_delay_ms": percentiles_ms(self.start_delay_ns, (50, 99)),
                "worst_case_ops": self.worst_ops, "miss_causes": self.causes,
                "speculation": {"hits": self.spec_hits, "misses": self.spec_misses}}


@dataclass
class TraceReport:
    """The whole analysis of one trace."""

    trace: Trace
    policy: str                       # "unknown" when neither the trace nor a configuration names it
    tasks: list[TaskStats]
    ops: list[dict[str, Any]]
    misses: list[MissAccount]
    chains: list[ChainTimes]
    chain_bounds: dict[str, dict[str, Any]]
    rta: dict[str, Any] | None
    notes: list[str]
    hardware: dict[str, Any] | None = None   # analysis.hardware: this machine's timeline, when the trace measured it

    def to_json(self) -> dict[str, Any]:
        """The documented JSON document (``tasks``, ``misses``) plus ops, chains, rta and trace facts."""
        m = self.trace.meta
        return {"tasks": [t.to_json() for t in self.tasks], "misses": [a.to_json() for a in self.misses],
                "ops": self.ops, "chains": [c.to_json(self.chain_bounds.get(c.name)) for c in self.chains],
                "rta": self.rta,
                "trace": {"events": len(self.trace.cols), "start_ms": self.trace.span_ns[0] / 1e6,
                          "end_ms": self.trace.span_ns[1] / 1e6, "policy": self.policy,
                          "clock": m.get("clock"), "timing": m.get("timing"), "workers": m.get("workers"),
                          "config": m.get("config"),
                          "bag": m.get("bag"), "lost_events": m.get("lost_events", 0), "device": m.get("device")},
                "graphs": m.get("graphs", {}), "notes": self.notes, **({"hardware": self.hardware} if self.hardware is not None else {})}


def _group_stats(keys: np.ndarray, values: np.ndarray) -> dict[int, np.ndarray]:
    """Values split by integer key (one sort, then slices)."""
    order = np.lexsort((values, keys))
    k, v = keys[order], values[order]
    uk, first = np.unique(k, return_index=True)
    ends = np.append(first[1:], len(k))
    return {int(key): v[a:b] for key, a, b in zip(uk, first, ends)}


def _op_table(tr: Trace) -> tuple[list[dict[str, Any]], dict[tuple[int, int, int], int], dict[str, int]]:
    """Per (task, graph, op) distributions; medians by (task id, graph, op); longest op per task."""
    ops = tr.ops
    width = int(ops.op.max(initial=0)) + 1
    groups = _group_stats((ops.task * 2 + ops.graph) * width + ops.op, ops.dur)
    rows, med, longest = [], {}, {}
    for key, d in groups.items():
        tg, op = divmod(key, width)
        tid, graph = divmod(tg, 2)
        task = tr.jobs.names[tid]
        p50, p90, p99 = np.percentile(d, [50, 90, 99])
        med[(tid, graph, op)] = int(round(p50))
        longest[task] = max(longest.get(task, 0), int(d[-1]))
        rows.append({"task": task, "op": op_name(tr.meta, task, op, graph), "index": op, "fallback": bool(graph),
                     "count": len(d), "p50_ms": p50 / 1e6, "p90_ms": p90 / 1e6, "p99_ms": p99 / 1e6,
                     "max_ms": int(d[-1]) / 1e6, "total_ms": int(d.sum()) / 1e6})
    return rows, med, longest


def _worst_ops(tr: Trace, tid: int, rows: np.ndarray, exec_ns: np.ndarray,
               med: Mapping[tuple[int, int, int], int]) -> list[dict[str, Any]]:
    """Share of each op in the task's worst jobs (execution time at or above its p99)."""
    if len(rows) == 0:
        return []
    worst = rows[exec_ns >= np.percentile(exec_ns, 99)]
    m = np.isin(tr.ops.row, worst)
    key, dur = tr.ops.graph[m] * (1 << 32) + tr.ops.op[m], tr.ops.dur[m]
    total = float(dur.sum()) or 1.0
    out = []
    for k in np.unique(key).tolist():
        d = dur[key == k]
        graph, op = divmod(k, 1 << 32)
        median = med.get((tid, graph, op), 0)
        out.append({"op": op_name(tr.meta, tr.jobs.names[tid], op, graph), "share": float(d.sum()) / total,
                    "mean_ms": float(d.mean()) / 1e6, "median_ms": median / 1e6,
                    "excess_ms": (float(d.mean()) - median) / 1e6})
    return sorted(out, key=lambda e: -e["share"])


def _task_stats(tr: Trace, name: str, budget: int | None, med: Mapping[tuple[int, int], int]) -> TaskStats:
    """Counts and distributions of one task (one pass of masks over its rows)."""
    empty = np.zeros(0, np.int64)
    if name not in tr.cols.tasks:
        return TaskStats(name, 0, 0, 0, 0, 0, 0, 0, 0, 0, empty, empty, budget, tr.relative_deadline.get(name),
                         None, None, empty)
    tid = tr.task_id(name)
    j = tr.jobs
    rows = j.rows_of(tid)
    rel, fin = j.release[rows], j.finish[rows]
    done = rows[(fin >= 0) & (rel >= 0)]   # as the replay's summary: finished jobs whose release is in the trace
    resp = j.finish[done] - j.release[done]
    exe = j.exec_ns[done]
    released = rows[rel >= 0]
    r, k = j.release[released], j.job[released]
    step = np.diff(r)[np.diff(k) == 1]
    slack = j.deadline[done] - j.finish[done]
    slack = slack[j.deadline[done] >= 0]
    started = rows[(j.start[rows] >= 0) & (rel >= 0)]
    aborted, missed, wd = j.abort_t[rows] >= 0, j.miss_t[rows] >= 0, j.watchdog_abort[rows]
    c = tr.cols
    react = (c.kind == K.REACTION) & (c.task == tid)
    stats = TaskStats(
        name, len(released), int(missed.sum()), len(done), int(aborted.sum()),
        int((aborted & wd & ~missed).sum()), int((aborted & missed).sum()), int((aborted & ~wd & ~missed).sum()),
        int(j.dropped[rows].sum()),
        int((j.overrun_t[rows] >= 0).sum()), resp, exe, budget, tr.relative_deadline.get(name),
        int(step.max() - step.min()) if len(step) else None, int(slack.min()) if len(slack) else None,
        j.start[started] - j.release[started], _worst_ops(tr, tid, done, exe, med))
    stats.spec_hits = int((react & (c.a == REACT_SPEC_HIT)).sum())
    stats.spec_misses = int((react & (c.a == REACT_SPEC_MISS)).sum())
    return stats


def _taskset(tr: Trace, config_tasks: Sequence[Task] | None) -> tuple[list[Task], list[str]]:
    """Tasks for the analysis: the configuration's, with the timing the run used (``tasks_config``). Without
    a configuration, a periodic task's release offset is read off its releases (the runtime releases it at
    offset + k T): the analysis pins periodic tasks to their release instants, so a wrong phase would mislead."""
    tc = tr.meta.get("tasks_config", {})
    by_name = {t.name: t for t in config_tasks or ()}
    out, notes = [], []
    for name in tr.tasks:
        c = tc.get(name)
        base = by_name.get(name)
        try:
            if base is not None:
                out.append(base if c is None else dataclasses.replace(
                    base, period_ns=int(c["period_ns"]), deadline_ns=int(c["deadline_ns"]), wcet_ns=int(c["wcet_ns"])))
            elif c is not None:
                trigger = c.get("trigger")
                rel = tr.jobs.release[tr.jobs.rows_of(tr.task_id(name))] if name in tr.cols.tasks else \
                    np.zeros(0, np.int64)
                rel = rel[rel >= 0]
                offset = int(rel.min()) % int(c["period_ns"]) if rel.size and not trigger else 0
                out.append(Task(name, period_ns=int(c["period_ns"]), wcet_ns=int(c["wcet_ns"]),
                                deadline_ns=int(c["deadline_ns"]), offset_ns=offset,
                                trigger=str(trigger) if trigger else None))
            else:
                notes.append(f"task '{name}': no period/deadline/budget in the trace or the configuration")
        except (TaskError, KeyError, TypeError) as e:
            notes.append(f"task '{name}': {e}")
    return out, notes


def _partition(tr: Trace, tasks: Sequence[Task], chains: Sequence[Chain], policy: str,
               explicit: Mapping[str, int] | None) -> dict[str, int] | None:
    """Task -> worker as the run had it: the worker a task's jobs were released on, where the trace says so;
    else as the runtime partitions (``sched.policy.partition``: explicit ``worker:`` first, a run-time chain
    kept together) over the run's worker count. None for one worker."""
    workers = int(tr.meta.get("workers") or 1)
    if workers <= 1:
        return None
    where = partition(apply_chains(tasks, chains, policy), workers, explicit,
                      together=[c.tasks for c in chains if c.deadline_ns is not None])
    j = tr.jobs
    for t in tasks:
        if t.name in tr.cols.tasks:
            seen = np.unique(j.worker[j.rows_of(tr.task_id(t.name))])
            seen = seen[seen >= 0]
            if seen.size == 1:
                where[t.name] = int(seen[0])
    return where


def _chain_bounds(rta: Mapping[str, Any], tasks: Mapping[str, Task]) -> dict[str, dict[str, Any]]:
    """Per chain: the bounds ``rt-runtime check`` gives (configured budgets), the reaction bound (the LET one,
    or chain-LET plus the head's sampling wait, whichever is lower) and the response bound with the observed
    times."""
    observed = {c["name"]: c for c in rta.get("chains", [])}
    out = {}
    for c in (rta.get("check") or {}).get("chains", []):
        head = tasks.get(c["tasks"][0])
        wait = None if head is None else 0 if head.is_triggered else (head.period_ns + head.jitter_ns) / 1e6
        cands = [x for x in (c.get("let_reaction_ms"), None if wait is None or c.get("chain_let_ms") is None
                             else c["chain_let_ms"] + wait) if x is not None]
        out[c["name"]] = {**{k: c.get(k) for k in ("chain_let_ms", "per_hop_let_ms", "response_ms", "let_reaction_ms",
                                                   "let_data_age_ms", "davare_ms", "note")},
                          "reaction_bound_ms": min(cands) if cands else None,
                          "observed_response_ms": observed.get(c["name"], {}).get("response_ms")}
    return out


def analyze_trace(cols: TraceColumns, meta: Mapping[str, Any], *, tasks: Sequence[Task] | None = None,
                  chains: Sequence[Chain] | None = None, wiring: Mapping[str, Mapping[str, Any]] | None = None,
                  policy: str | None = None, system: SystemModel | None = None) -> TraceReport:
    """Analyse a trace; ``tasks``/``chains``/``wiring``/``policy`` come from a configuration when one is known,
    and ``system`` (what releases each task, who publishes on finish, explicit workers as ``partition``) too."""
    tr = build(cols, meta)
    pol = str(meta.get("policy") or policy or "unknown")
    notes: list[str] = []
    if meta.get("lost_events"):
        notes.append(f"{meta['lost_events']} events were lost (the ring lapped its drain): early jobs may lack "
                     f"their release and are left out of response times")
    taskset, tnotes = _taskset(tr, tasks)
    notes += tnotes
    budgets = {n: int(c["wcet_ns"]) for n, c in meta.get("tasks_config", {}).items() if "wcet_ns" in c}
    budgets.update({t.name: t.wcet_ns for t in taskset if t.name not in budgets})
    op_rows, med, longest = _op_table(tr)
    stats = [_task_stats(tr, name, budgets.get(name), med) for name in tr.tasks]
    ranks: dict[str, int] | None = None
    if pol == "unknown":
        notes.append("the trace names no policy: an op running at a release is judged from the schedule, "
                     "and there is no schedulability rerun")
    elif pol != "edf":
        try:
            ranks = Policy(pol).priorities(taskset)
        except ValueError as e:
            notes.append(f"priorities unknown ({e}); an op running at a release is judged from the schedule")
    exec_med = {tr.task_id(s.name): int(np.median(s.exec_ns)) for s in stats if len(s.exec_ns)}
    att = Attributor(tr, budgets, ranks, pol, med, exec_med)
    j = tr.jobs
    early_abort = (j.abort_t >= 0) & j.watchdog_abort & (j.miss_t < 0) & (j.finish < 0)
    missed = np.flatnonzero(((j.miss_t >= 0) | early_abort) & (j.release >= 0))
    missed = missed[np.lexsort((j.task[missed], j.release[missed]))]
    accounts = [att.account(int(r)) for r in missed]
    for s in stats:
        for a in accounts:
            if a.task == s.name:
                key = "+".join(a.cause)
                s.causes[key] = s.causes.get(key, 0) + 1

    # measured_jobs walks every release in Python: only worth it when the run measured steps (budget timing).
    hw_jobs = measured_jobs(cols, meta) if bool(np.any(cols.kind == K.MEASURED)) else []
    chain_list = [(c.name, c.tasks) for c in chains] if chains else wiring_chains(wiring or {})
    chain_res = [chain_times(tr, n, ts) for n, ts in chain_list if all(t in tr.tasks for t in ts)]
    rta = None
    bounds: dict[str, dict[str, Any]] = {}
    if taskset and pol != "unknown":
        exec_max = {s.name: int(max(s.exec_ns.max(initial=0), j.exec_ns[j.rows_of(tr.task_id(s.name))].max(
            initial=0))) if s.name in tr.cols.tasks else 0 for s in stats}
        if hw_jobs:   # budget timing: the trace's execution times are the budgets; what ran here was measured
            exec_max, longest = {}, {}
            for h in hw_jobs:
                exec_max[h.task] = max(exec_max.get(h.task, 0), h.exec_ns)
                longest[h.task] = max(longest.get(h.task, 0), max(h.ops))
        names = {t.name for t in taskset}
        deadlines = {c.name: c.deadline_ns for c in chains or ()}
        rchains = [Chain(n, tuple(ts), deadlines.get(n)) for n, ts in chain_list if all(t in names for t in ts)]
        writes = {n: {str(v) for v in (e.get("outputs") or {}).values()} for n, e in (wiring or {}).items()}
        sm = system or SystemModel()
        try:
            where = _partition(tr, taskset, rchains, pol, sm.partition)
        except (TaskError, ValueError):   # e.g. a chain that cannot run: the analysis below names it
            where = None
        # A writer the trace does not know (a task of the configuration that is not in this run) releases
        # nothing here: its reader is taken as released by ingress.
        acts = {n: a if all(w in names for w in a.writers) else Activation("ingress")
                for n, a in (sm.activations or {}).items() if n in names}
        sm = dataclasses.replace(sm, activations=acts, partition=where, writes=writes)
        rta = observed_rta(taskset, exec_max, longest, pol, rchains, writes, sm)
        cut = [f"{s.name} ({s.aborted})" for s in stats if s.aborted]
        if cut:
            notes.append("observed execution times are lower bounds where jobs were aborted before their last op: "
                         + ", ".join(cut))
        bounds = _chain_bounds(rta, {t.name: t for t in taskset})
    hw = hardware_report(cols, meta, jobs=hw_jobs) if hw_jobs else None
    return TraceReport(tr, pol, stats, op_rows, accounts, chain_res, bounds, rta, notes, hw)
