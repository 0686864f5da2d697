"""The hardware timeline: what this machine would have done with the same releases.

Under budget timing (``rt_runtime.sched.budget``) the outputs follow a logical schedule in which
every op takes its budget. Beside it the trace records what each step of a job really took here
(``EventKind.MEASURED``: CPU time). This module replays the same releases with those times through
the dispatcher's rules (per worker, the policy's ready-queue key, limited preemption at op
boundaries, late jobs run on) and says which jobs would miss, by how much, and why:

* ``overrun``: the job's own execution exceeded its budget (``wcet``);
* ``interference``: more urgent jobs ran between its release and its finish;
* ``blocking``: a less urgent job's op was running (ops are not interrupted).

The cause of a miss is the largest of the three (overrun counts the excess over the budget). A
report, never an input to the outputs. Pure functions over trace columns; the replay's summary and
``rt-runtime analyze`` both call ``hardware_report``. Where the trace has no MEASURED events (a run
on the wall clock, where the real timeline is the only one) the report is read off the real jobs.
"""
from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..sched.events import EventKind as K
from ..sched.policy import as_policy
from ..trace.ring import TraceColumns


@dataclass
class HwJob:
    """One job on the hardware timeline."""

    task: str
    index: int
    release_ns: int
    deadline_ns: int
    budget_ns: int
    worker: int
    key: tuple
    ops: list[int] = field(default_factory=list)   # measured ns of each step, in order
    start_ns: int = -1
    finish_ns: int = -1
    interference_ns: int = 0
    blocking_ns: int = 0

    @property
    def exec_ns(self) -> int:
        """What the job's steps took on this machine."""
        return sum(self.ops)

    @property
    def late_ns(self) -> int:
        """Finish past the deadline (<= 0: on time)."""
        return self.finish_ns - self.deadline_ns

    @property
    def cause(self) -> str:
        """The largest of overrun (excess over the budget), interference and blocking."""
        parts = {"overrun": self.exec_ns - self.budget_ns, "interference": self.interference_ns,
                 "blocking": self.blocking_ns}
        return max(parts, key=lambda k: (parts[k], k == "overrun"))


def measured_jobs(cols: TraceColumns, meta: Mapping[str, Any]) -> list[HwJob]:
    """The jobs that ran at least one step, with the measured time of each step, in release order."""
    cfg = meta.get("tasks_config") or {}
    policy = as_policy(meta.get("policy") or "edf")
    kind, task, job, t, a, b = cols.kind, cols.task, cols.job, cols.t_ns, cols.a, cols.b
    jobs: dict[tuple[int, int], HwJob] = {}
    rel = np.flatnonzero(kind == K.RELEASE)
    for i in rel.tolist():
        tid, j = int(task[i]), int(job[i])
        name = cols.tasks[tid]
        c = cfg.get(name, {})
        r = int(t[i])
        d = r + int(c.get("deadline_ns", 0))
        jobs[(tid, j)] = HwJob(name, j, r, d, int(c.get("wcet_ns", 0)), int(a[i]),
                               policy.key(int(c.get("rank", 0)), d, name, r))
    meas = np.flatnonzero(kind == K.MEASURED)
    for tid, j, ns in zip(task[meas].tolist(), job[meas].tolist(), b[meas].tolist()):
        hj = jobs.get((tid, j))
        if hj is not None:   # a job released before the trace began has no release to match
            hj.ops.append(ns)
    return sorted((hj for hj in jobs.values() if hj.ops), key=lambda h: (h.release_ns, h.key))


def simulate(jobs: list[HwJob]) -> None:
    """Schedule the jobs with their measured step times (fills start, finish, interference, blocking)."""
    by_worker: dict[int, list[HwJob]] = {}
    for hj in jobs:
        by_worker.setdefault(hj.worker, []).append(hj)
    for mine in by_worker.values():
        _simulate_worker(mine)


def _simulate_worker(jobs: list[HwJob]) -> None:
    pending = sorted(jobs, key=lambda h: (h.release_ns, h.key))
    ready: list[tuple[tuple, int, HwJob]] = []
    nxt = [0] * len(pending)          # next step of each job, by position in ``pending``
    pos = {id(h): k for k, h in enumerate(pending)}
    i, t, n = 0, 0, len(pending)
    current: HwJob | None = None
    while i < n or ready or current is not None:
        if current is None and not ready and pending[i].release_ns > t:
            t = pending[i].release_ns
        while i < n and pending[i].release_ns <= t:
            h = pending[i]
            heapq.heappush(ready, (h.key, i, h))
            i += 1
        if current is not None and ready and ready[0][0] < current.key:   # preempted at the op boundary
            heapq.heappush(ready, (current.key, pos[id(current)], current))
            current = None
        if current is None:
            current = heapq.heappop(ready)[2]
            if current.start_ns < 0:
                current.start_ns = t
        k = pos[id(current)]
        t0 = t
        t += current.ops[nxt[k]]
        nxt[k] += 1
        while i < n and pending[i].release_ns < t:   # released while the op ran: they waited from release
            h = pending[i]
            heapq.heappush(ready, (h.key, i, h))
            i += 1
        for _, _, w in ready:
            waited = t - max(t0, w.release_ns)
            if waited > 0:
                if current.key < w.key:
                    w.interference_ns += waited
                else:
                    w.blocking_ns += waited
        if nxt[k] == len(current.ops):
            current.finish_ns = t
            current = None


def _ms(values: list[int] | np.ndarray) -> dict[str, float]:
    v = np.asarray(values, dtype=np.float64)
    if len(v) == 0:
        return {"p50": 0.0, "p99": 0.0, "max": 0.0}
    p50, p99 = np.percentile(v, [50, 99])
    return {"p50": round(float(p50) / 1e6, 4), "p99": round(float(p99) / 1e6, 4), "max": round(float(v.max()) / 1e6, 4)}


def hardware_report(cols: TraceColumns, meta: Mapping[str, Any], worst: int = 10,
                    jobs: list[HwJob] | None = None) -> dict[str, Any]:
    """``{"source", "overruns", "misses", "tasks": [...], "missed": [worst misses]}`` (see the module docstring).

    ``source`` is ``"simulated"`` (measured step times on the logical releases) or ``"real"`` (the
    trace's own timeline, e.g. on the wall clock)."""
    jobs = measured_jobs(cols, meta) if jobs is None else [dataclasses.replace(h, ops=list(h.ops)) for h in jobs]
    if not jobs:
        return _real_report(cols, meta)
    simulate(jobs)
    names = sorted({*cols.tasks, *(meta.get("tasks_config") or {})})
    per: dict[str, list[HwJob]] = {n: [] for n in names}
    for hj in jobs:
        per.setdefault(hj.task, []).append(hj)
    tasks = []
    for name in sorted(per):
        mine = per[name]
        if not mine and name not in cols.tasks:
            continue
        tasks.append({"name": name, "overruns": sum(h.exec_ns > h.budget_ns for h in mine),
                      "misses": sum(h.late_ns > 0 for h in mine),
                      "exec_ms": _ms([h.exec_ns for h in mine]),
                      "response_ms": _ms([h.finish_ns - h.release_ns for h in mine])})
    late = sorted((h for h in jobs if h.late_ns > 0), key=lambda h: (-h.late_ns, h.release_ns, h.task))
    return {"source": "simulated", "overruns": sum(t["overruns"] for t in tasks),
            "misses": sum(t["misses"] for t in tasks), "tasks": tasks,
            "missed": [{"task": h.task, "job": h.index, "release_ms": round(h.release_ns / 1e6, 4),
                        "late_ms": round(h.late_ns / 1e6, 4), "cause": h.cause,
                        "exec_ms": round(h.exec_ns / 1e6, 4), "budget_ms": round(h.budget_ns / 1e6, 4),
                        "interference_ms": round(h.interference_ns / 1e6, 4),
                        "blocking_ms": round(h.blocking_ns / 1e6, 4)} for h in late[:worst]]}


def _real_report(cols: TraceColumns, meta: Mapping[str, Any]) -> dict[str, Any]:
    from .trace_stats import task_times

    tasks = []
    for name, tt in sorted(task_times(cols).items()):
        tid = cols.tasks.index(name)
        mine = cols.task == tid
        tasks.append({"name": name, "overruns": int((mine & (cols.kind == K.OVERRUN)).sum()), "misses": tt.misses,
                      "exec_ms": _ms(tt.exec_ns), "response_ms": _ms(tt.response_ns)})
    return {"source": "real", "overruns": sum(t["overruns"] for t in tasks),
            "misses": sum(t["misses"] for t in tasks), "tasks": tasks, "missed": []}


def format_hardware(hw: Mapping[str, Any], indent: str = "") -> list[str]:
    """The hardware timeline as text lines: a table per task and the worst misses."""
    head = ("this machine (measured step times on the same releases)" if hw["source"] == "simulated"
            else "this machine (the real timeline)")
    out = [f"{indent}{head}: {hw['misses']} miss(es), {hw['overruns']} overrun(s) of the budget",
           f"{indent}{'task':<22} {'overruns':>8} {'misses':>7} {'exec p50':>9} {'p99':>7} {'max':>7} "
           f"{'resp p50':>9} {'p99':>7} {'max':>7}"]
    for t in hw["tasks"]:
        e, r = t["exec_ms"], t["response_ms"]
        out.append(f"{indent}{t['name']:<22} {t['overruns']:>8} {t['misses']:>7} {e['p50']:>9.2f} {e['p99']:>7.2f} "
                   f"{e['max']:>7.2f} {r['p50']:>9.2f} {r['p99']:>7.2f} {r['max']:>7.2f}")
    for m in hw.get("missed", []):
        out.append(f"{indent}would miss: {m['task']} job {m['job']} (released {m['release_ms']:.1f} ms) by "
                   f"{m['late_ms']:.2f} ms, because of {m['cause']} (exec {m['exec_ms']:.2f} of a "
                   f"{m['budget_ms']:.2f} ms budget, interference {m['interference_ms']:.2f} ms, "
                   f"blocking {m['blocking_ms']:.2f} ms)")
    return out
