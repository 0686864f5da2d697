"""Export a trace to the Chrome trace-event JSON format, which the Perfetto UI opens.

One track (thread) per worker, jobs as slices with their ops nested inside, a preempted job as
several slices; misses, overruns, watchdog reactions, stalls and drops as instant events on a
track of their own per task, so a user sees the schedule and where it broke.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..outpaths import write_atomic
from ..sched.events import EventKind as K
from .ring import TraceColumns

_PID = 1
_INSTANTS = {K.MISS: "deadline miss", K.OVERRUN: "budget overrun", K.REACTION: "watchdog reaction",
             K.STALL: "stalled worker", K.DROP: "drop", K.ABORT: "abort"}


def _worker_of(kind: int, a: int, b: int) -> int | None:
    """Which worker an execution event happened on (the column differs by kind)."""
    if kind in (K.START, K.PREEMPT, K.RESUME):
        return a
    if kind in (K.OP_START, K.OP_END, K.FINISH):
        return b
    return None


def to_chrome_events(cols: TraceColumns, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace as a list of trace-event dicts (timestamps in µs)."""
    ops: dict[str, list[str]] = meta.get("ops", {})
    workers = sorted({w for k, a, b in zip(cols.kind, cols.a, cols.b)
                      if (w := _worker_of(int(k), int(a), int(b))) is not None and w >= 0})
    events: list[dict[str, Any]] = [{"ph": "M", "pid": _PID, "name": "process_name", "args": {"name": "rt_runtime"}}]
    for w in workers:
        events.append({"ph": "M", "pid": _PID, "tid": w, "name": "thread_name", "args": {"name": f"worker {w}"}})
    task_tid = {name: 1000 + i for i, name in enumerate(cols.tasks)}
    for name, tid in task_tid.items():
        events.append({"ph": "M", "pid": _PID, "tid": tid, "name": "thread_name", "args": {"name": f"{name} events"}})

    # Emission order is causal but not always time order (on a VirtualClock the watchdog's verdict
    # inside a simulated op is emitted before the op's end): a stable sort by time keeps both.
    order = np.argsort(cols.t_ns, kind="stable")
    open_job: dict[int, tuple[str, int]] = {}  # worker -> (task, job) whose slice is open
    columns = (getattr(cols, f)[order].tolist() for f in ("kind", "t_ns", "task", "job", "a", "b"))
    for k, t, tid, job, a, b in zip(*columns):
        task = cols.tasks[tid]
        ts = t / 1e3
        w = _worker_of(k, a, b)
        if k in (K.START, K.RESUME):
            events.append({"ph": "B", "pid": _PID, "tid": w, "ts": ts, "name": f"{task}#{job}",
                           "cat": "job", "args": {"task": task, "job": job, "resumed": k == K.RESUME}})
            open_job[w] = (task, job)
        elif k in (K.PREEMPT, K.FINISH):
            events.append({"ph": "E", "pid": _PID, "tid": w, "ts": ts})
            open_job.pop(w, None)
        elif k in (K.OP_START, K.OP_END):
            names = ops.get(task, [])
            name = names[a] if 0 <= a < len(names) else f"op{a}"
            events.append({"ph": "B" if k == K.OP_START else "E", "pid": _PID, "tid": w, "ts": ts,
                           "name": name, "cat": "op"})
        elif k == K.ABORT and a >= 0 and open_job.get(a) == (task, job):
            events.append({"ph": "E", "pid": _PID, "tid": a, "ts": ts})
            open_job.pop(a, None)
        if k in _INSTANTS:
            events.append({"ph": "i", "s": "t", "pid": _PID, "tid": task_tid[task], "ts": ts,
                           "name": f"{_INSTANTS[K(k)]}: {task}#{job}", "cat": "fault",
                           "args": {"a": a, "b": b}})
        elif k == K.RELEASE:
            events.append({"ph": "i", "s": "t", "pid": _PID, "tid": task_tid[task], "ts": ts,
                           "name": f"release {task}#{job}", "cat": "release"})
    end_ts = int(cols.t_ns.max()) / 1e3 if len(cols) else 0.0
    for w in sorted(open_job):  # jobs still running when the trace ends
        events.append({"ph": "E", "pid": _PID, "tid": w, "ts": end_ts})
    return events


def write_perfetto(path: str | Path, cols: TraceColumns, meta: dict[str, Any]) -> Path:
    """Write the Chrome/Perfetto JSON file (atomically: through a temporary sibling); returns its path."""
    doc = {"traceEvents": to_chrome_events(cols, meta), "displayTimeUnit": "ms",
           "metadata": {k: v for k, v in meta.items() if k in ("config", "clock", "bag", "partial")}}
    return write_atomic(path, json.dumps(doc))
