"""Jobs and op intervals rebuilt from a trace's event columns, vectorized (no per-event loop).

A trace is a flat stream of ``(kind, t_ns, task, job, a, b)`` events (``rt_runtime.sched.events``).
This module turns it into two tables: one row per job (release, start, finish, deadline,
execution time, worker, fate) and one row per executed op (job row, op index, worker, start,
end). Everything else in ``rt-runtime analyze`` is computed from these two tables.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..sched.events import DROP_NO_INPUT, REACT_ABORT, REACT_DEGRADE
from ..sched.events import EventKind as K
from ..trace.ring import TraceColumns


@dataclass
class JobTable:
    """One row per job seen in the trace; times in ns, -1 where the trace has no such event."""

    names: list[str]             # task id -> name (the trace's table, channels included)
    task: np.ndarray             # task id
    job: np.ndarray              # job index within its task
    release: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    deadline: np.ndarray         # absolute deadline (-1 when the relative deadline is unknown)
    exec_ns: np.ndarray          # FINISH's execution time, else the sum of the ops it ran
    worker: np.ndarray           # from RELEASE (-1: unknown)
    miss_t: np.ndarray           # instant of its MISS event
    abort_t: np.ndarray          # instant of its ABORT event
    watchdog_abort: np.ndarray   # bool: a REACTION abort/degrade of this job came before the abort
    overrun_t: np.ndarray        # instant of its OVERRUN event
    dropped: np.ndarray          # bool: released, then dropped for want of input (never ran)
    stale_inputs: np.ndarray     # SNAPSHOT b: inputs that were not new at release
    ops_done: np.ndarray         # ops completed (OP_END events)
    fallback: np.ndarray         # START b: 1 if the job ran the task's fallback graph

    def __len__(self) -> int:
        return len(self.task)

    def rows_of(self, task_id: int) -> np.ndarray:
        """Row indices of one task's jobs, by job index."""
        return np.flatnonzero(self.task == task_id)


@dataclass
class OpTable:
    """One row per executed op, sorted by (worker, start)."""

    row: np.ndarray     # job row in the JobTable
    task: np.ndarray    # task id
    op: np.ndarray      # op index in the graph the job ran
    graph: np.ndarray   # 0: the task's graph, 1: its fallback graph (op indices differ)
    worker: np.ndarray
    t0: np.ndarray
    t1: np.ndarray

    def __len__(self) -> int:
        return len(self.row)

    @property
    def dur(self) -> np.ndarray:
        """Op durations in ns."""
        return self.t1 - self.t0


@dataclass
class Trace:
    """A trace made ready for analysis: time-sorted columns, the job and op tables, its metadata."""

    cols: TraceColumns
    meta: dict[str, Any]
    jobs: JobTable
    ops: OpTable
    tasks: list[str]             # the real tasks (not channel names) in trace order
    relative_deadline: dict[str, int]
    span_ns: tuple[int, int]     # first and last event instant

    def task_id(self, name: str) -> int:
        """The trace's id of a task name."""
        return self.cols.tasks.index(name)


def _sorted_by_time(cols: TraceColumns) -> TraceColumns:
    # Emission order is causal but not time order (an op's events are emitted when it completes):
    # a stable sort by time keeps the causal order of events at one instant.
    order = np.argsort(cols.t_ns, kind="stable")
    return TraceColumns(*(getattr(cols, f)[order] for f in ("kind", "t_ns", "task", "job", "a", "b")),
                        tasks=list(cols.tasks))


def real_tasks(cols: TraceColumns, meta: Mapping[str, Any]) -> list[str]:
    """Task names in trace order: those with releases or in the run's configuration (DROP events also
    name channels in the task column, which are not tasks)."""
    configured = set(meta.get("tasks_config", {})) | set(meta.get("ops", {}))
    released = {cols.tasks[i] for i in np.unique(cols.task[cols.kind == K.RELEASE]).tolist()}
    names = [n for n in cols.tasks if n in configured or n in released]
    return names + sorted(configured - set(names))


def relative_deadlines(cols: TraceColumns, meta: Mapping[str, Any], tasks: list[str]) -> dict[str, int]:
    """Relative deadline per task: from the run's configuration, else inferred from on-time publishes."""
    out = {n: int(c["deadline_ns"]) for n, c in meta.get("tasks_config", {}).items() if "deadline_ns" in c}
    missing = [n for n in tasks if n not in out and n in cols.tasks]
    for name in missing:  # a trace without tasks_config: a LET publish (b == 0) happens at r + D
        tid = cols.tasks.index(name)
        mine = cols.task == tid
        rel = mine & (cols.kind == K.RELEASE)
        pub = mine & (((cols.kind == K.PUBLISH) & (cols.b == 0)) | (cols.kind == K.MISS))
        if rel.any() and pub.any():
            r = dict(zip(cols.job[rel].tolist(), cols.t_ns[rel].tolist()))
            d = [t - r[j] for j, t in zip(cols.job[pub].tolist(), cols.t_ns[pub].tolist()) if j in r]
            if d:
                out[name] = int(np.median(d))
    return out


def _pair_ops(kind: np.ndarray, row: np.ndarray, a: np.ndarray, t: np.ndarray, b: np.ndarray,
              task: np.ndarray, fallback: np.ndarray) -> OpTable:
    """Match each OP_START with its OP_END by (job, op index, occurrence); unmatched ones are dropped."""
    s = np.flatnonzero((kind == K.OP_START) & (row >= 0))
    e = np.flatnonzero((kind == K.OP_END) & (row >= 0))
    width = int(max(a[s].max(initial=0), a[e].max(initial=0))) + 1
    ks, ke = row[s] * width + a[s], row[e] * width + a[e]
    os_, oe = np.argsort(ks, kind="stable"), np.argsort(ke, kind="stable")
    if len(s) != len(e) or not np.array_equal(ks[os_], ke[oe]):
        # A lossy trace (ring lapped) or a redundant job running an op twice: match by occurrence.
        def ranked(k: np.ndarray, o: np.ndarray) -> np.ndarray:
            sk = k[o]
            rank = np.arange(len(sk)) - np.searchsorted(sk, sk, "left")
            return sk * (len(sk) + 1) + rank
        _, i_s, i_e = np.intersect1d(ranked(ks, os_), ranked(ke, oe), assume_unique=True, return_indices=True)
        os_, oe = os_[i_s], oe[i_e]
    si, ei = s[os_], e[oe]
    ops = OpTable(row[si], task[si], a[si], fallback[row[si]], b[si], t[si], t[ei])
    order = np.lexsort((ops.t0, ops.worker))
    return OpTable(*(getattr(ops, f)[order] for f in ("row", "task", "op", "graph", "worker", "t0", "t1")))


def build(cols: TraceColumns, meta: Mapping[str, Any]) -> Trace:
    """The job and op tables of a trace (columns in any order; sorted by time here)."""
    cols = _sorted_by_time(cols)
    kind, t, task, job, a, b = cols.kind, cols.t_ns, cols.task, cols.job, cols.a, cols.b
    tasks = real_tasks(cols, meta)
    is_task = np.zeros(len(cols.tasks) + 1, bool)
    is_task[[cols.tasks.index(n) for n in tasks if n in cols.tasks]] = True
    valid = is_task[task] & (job >= 0)
    stride = int(job.max(initial=0)) + 1
    key = np.where(valid, task * stride + job, -1)
    keys = np.unique(key[valid])
    row = np.where(valid, np.searchsorted(keys, key), -1)
    n = len(keys)

    def at(k: K, values: np.ndarray = t, fill: int = -1) -> np.ndarray:
        out = np.full(n, fill, np.int64)
        m = (kind == k) & valid
        out[row[m]] = values[m]   # one such event per job, so no assignment conflicts
        return out

    rel_d = relative_deadlines(cols, meta, tasks)
    task_of, job_of = keys // stride, keys % stride
    release = at(K.RELEASE)
    dl = np.array([rel_d.get(nm, -1) for nm in cols.tasks] + [-1], np.int64)[task_of]
    deadline = np.where((release >= 0) & (dl >= 0), release + dl, -1)
    fallback = at(K.START, b, 0)
    ops = _pair_ops(kind, row, a, t, b, task, fallback)
    op_exec = np.bincount(ops.row, weights=(ops.t1 - ops.t0), minlength=n).astype(np.int64)
    fin_exec = at(K.FINISH, a)
    finish = at(K.FINISH)
    react = (kind == K.REACTION) & valid & ((a == REACT_ABORT) | (a == REACT_DEGRADE))
    wd = np.zeros(n, bool)
    wd[row[react]] = True
    dropped = np.zeros(n, bool)
    no_input = (kind == K.DROP) & valid & (a == DROP_NO_INPUT)   # released, but never ran
    dropped[row[no_input]] = True
    jobs = JobTable(list(cols.tasks), task_of, job_of, release, at(K.START), finish, deadline,
                    np.where(finish >= 0, fin_exec, op_exec), at(K.RELEASE, a), at(K.MISS), at(K.ABORT), wd,
                    at(K.OVERRUN), dropped, at(K.SNAPSHOT, b, 0),
                    np.bincount(ops.row, minlength=n).astype(np.int64), fallback)
    span = (int(t[0]), int(t[-1])) if len(t) else (0, 0)
    return Trace(cols, dict(meta), jobs, ops, tasks, rel_d, span)


def op_names(meta: Mapping[str, Any], task: str, graph: int = 0) -> list[str]:
    """Op names of a task's graph (``ops``) or fallback graph (``fallback_ops``) from the metadata."""
    return list(meta.get("fallback_ops" if graph else "ops", {}).get(task, []))


def op_name(meta: Mapping[str, Any], task: str, op: int, graph: int = 0) -> str:
    """One op's name; ``op<i>`` (``fallback/op<i>``) when the metadata does not name it."""
    names = op_names(meta, task, graph)
    if 0 <= op < len(names):
        return names[op]
    return f"fallback/op{op}" if graph else f"op{op}"


def percentiles_ms(values: np.ndarray, qs: tuple[int, ...] = (50, 90, 99)) -> dict[str, float]:
    """p50/p90/p99 (as asked) and max of ns values in ms; zeros for no values (as the replay does)."""
    out = {f"p{q}": 0.0 for q in qs}
    out["max"] = 0.0
    if len(values):
        for q, v in zip(qs, np.percentile(values, list(qs))):
            out[f"p{q}"] = float(v) / 1e6
        out["max"] = float(values.max()) / 1e6
    return out
