"""``rt-runtime check --trace RUN.rttrace [--executor CFG]``: the schedulability of a DeadlineExecutor's node graph.

The trace of a DeadlineExecutor run (``ros.deadline.record``) holds each callback's timing as the run
used it (``tasks_config``: period, deadline, budget; a derived deadline as last derived) and what a
file's entries would select it by (``deadline_executor.callbacks``: node names, kind, topic / period /
service, the keys its node's parameters gave). Each callback is a task with one non-preemptive op (a
Python callback runs to its end): the analysis of ``rt-runtime check`` (``analysis.e2e`` through
``trace_rta.observed_rta``) with the observed worst-case execution times, each callback's blocking the
longest observed execution among the less urgent ones, and once more with the budgets.

With ``--executor CFG`` (the executor's YAML file, the run's or another), the file's first selecting
entry replaces the run's ``period``, ``deadline``, ``budget`` and ``priority``, key by key, where the
run's node parameters did not give that key (parameters come first, as in the run), and its
``policy`` replaces the run's: so a configuration can be checked against what a run observed before
it is deployed. A callback whose rate is unknown (a service, a client: no period configured, none
observed) is left out, with a note. Every release is analysed as sporadic with its period as minimum inter-arrival and no
phase (the critical instant). ``workers`` > 1 is analysed as one processor (a note says so).
Pure functions of the trace's columns and metadata; no rclpy.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..core.task import Task
from ..ros.deadline.config import ExecutorConfig
from ..trace.ring import TraceColumns
from .trace_jobs import build

_LOWEST = 1 << 30   # an unnumbered callback under fp runs after every numbered one (ros.deadline.jobs)
_KEYS = {"period": "period_ns", "deadline": "deadline_ns", "budget": "wcet_ns"}


class NotExecutorTrace(ValueError):
    """A trace that a DeadlineExecutor did not write (no ``deadline_executor`` metadata)."""


def executor_taskset(meta: Mapping[str, Any], cfg: ExecutorConfig | None) -> tuple[str, list[Task], list[str]]:
    """(policy, the callbacks as tasks, notes) from a DeadlineExecutor trace's metadata and ``cfg``."""
    de = meta.get("deadline_executor")
    tc = meta.get("tasks_config")
    if not isinstance(de, dict) or not isinstance(tc, dict):
        raise NotExecutorTrace("not a DeadlineExecutor trace (its metadata has no 'deadline_executor'); "
                               "check a stack file as FILE, or analyze this trace with rt-runtime analyze")
    described = de.get("callbacks") or {}
    derived = de.get("deadline_from") or {}
    policy = cfg.policy if cfg is not None else str(meta.get("policy") or "edf").lower()
    tasks, notes, unselected, unrated = [], [], [], []
    for name, c in sorted(tc.items()):
        t = {"period_ns": int(c["period_ns"]), "deadline_ns": int(c["deadline_ns"]), "wcet_ns": int(c["wcet_ns"])}
        prio = c.get("priority")
        d = described.get(name)
        rated = d is None or d.get("period_ns") is not None
        if cfg is not None and d is None:
            unselected.append(name)
        elif cfg is not None:
            _, fields = cfg.select(tuple(d["node"]), d["kind"], d["key"])
            kept = set(d.get("parameter") or ())
            given = {k: v for k, v in fields.items() if k not in kept}
            for k, key in _KEYS.items():
                if k in given:
                    t[key] = int(given[k])
            if "period" in given and "deadline" not in given and derived.get(name) not in ("config", "period"):
                t["deadline_ns"] = t["period_ns"]   # the run derived its deadline from the period it had
            prio = given.get("priority", prio)
            rated = rated or "period" in given
        if not rated:
            unrated.append(name)
            continue
        if policy == "fp" and prio is None:
            prio = _LOWEST
        tasks.append(Task(name, t["period_ns"], max(1, t["wcet_ns"]), t["deadline_ns"], priority=prio))
    if unrated:
        notes.append(f"left out, no rate known (a service or client: give it 'period:' to analyse it): "
                     f"{', '.join(unrated)}")
    if unselected:
        notes.append(f"not selectable by the file (a trace older than the selectors): {', '.join(unselected)}")
    workers = int(meta.get("workers") or 1)
    if workers > 1:
        notes.append(f"the run had {workers} workers (global dispatch); analysed as one processor")
    return policy, tasks, notes


def observed_times(cols: TraceColumns, meta: Mapping[str, Any], names: list[str]) -> dict[str, int]:
    """Each callback's longest observed execution (ns; 0 when it never ran to its end)."""
    tr = build(cols, meta)
    out = {}
    for n in names:
        if n not in tr.cols.tasks:
            out[n] = 0
            continue
        ex = tr.jobs.exec_ns[tr.jobs.rows_of(tr.task_id(n))]
        out[n] = int(ex.max(initial=0)) if isinstance(ex, np.ndarray) else 0
    return out
