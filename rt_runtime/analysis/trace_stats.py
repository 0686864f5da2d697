"""Per-task job statistics from a trace: jobs, misses, response and execution times.

Pure functions over ``TraceColumns`` (numpy columns of events); used by the replay's summary and
by ``rt-runtime analyze``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..sched.events import EventKind as K
from ..trace.ring import TraceColumns


@dataclass
class TaskTimes:
    """What the trace says about one task's jobs."""

    name: str
    released: int = 0
    finished: int = 0
    misses: int = 0
    response_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    exec_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    release_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    finished_jobs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def percentiles_ms(self, values: np.ndarray | None = None) -> dict[str, float]:
        """p50, p90, p99 and max of response times (or ``values``) in milliseconds."""
        v = self.response_ns if values is None else values
        if len(v) == 0:
            return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
        p50, p90, p99 = np.percentile(v, [50, 90, 99])
        return {"p50": float(p50) / 1e6, "p90": float(p90) / 1e6, "p99": float(p99) / 1e6, "max": float(v.max()) / 1e6}


def task_times(cols: TraceColumns) -> dict[str, TaskTimes]:
    """Match each FINISH with its job's RELEASE; count MISS events; by task name."""
    out: dict[str, TaskTimes] = {}
    kind, task, job, t = cols.kind, cols.task, cols.job, cols.t_ns
    for tid, name in enumerate(cols.tasks):
        mine = task == tid
        rel = mine & (kind == K.RELEASE)
        fin = mine & (kind == K.FINISH)
        release_at = dict(zip(job[rel].tolist(), t[rel].tolist()))
        done = [(j, ft - release_at[j], e) for j, ft, e in zip(job[fin].tolist(), t[fin].tolist(), cols.a[fin].tolist())
                if j in release_at]  # a job released before the trace began has no release to match
        jobs, resp, exe = (np.array(c, np.int64) for c in zip(*done)) if done else (np.zeros(0, np.int64),) * 3
        out[name] = TaskTimes(name=name, released=int(rel.sum()), finished=int(fin.sum()),
                              misses=int((mine & (kind == K.MISS)).sum()), response_ns=resp, exec_ns=exe,
                              release_ns=t[rel], finished_jobs=jobs)
    return out
