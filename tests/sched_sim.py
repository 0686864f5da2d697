"""A tiny discrete-time uniprocessor simulator, independent of rt_runtime.analysis, for brute-force checks.

Time advances one unit per step (tests use 1 unit = 1 ns and small integer periods). Jobs are
dicts; ``ops`` splits a job's work into non-preemptive pieces, so a running job can only be
replaced by a more urgent one between ops (the runtime's limited preemption). Used only by tests.
"""
from __future__ import annotations

from typing import Callable, Sequence


def make_jobs(wcets: Sequence[int], deadlines: Sequence[int], arrivals: Sequence[Sequence[int]],
              releases: Sequence[Sequence[int]] | None = None,
              ops: Sequence[Sequence[int]] | None = None) -> list[dict]:
    """Jobs of each task at the given arrivals (release = arrival unless ``releases`` says later)."""
    jobs = []
    for i, arr in enumerate(arrivals):
        for k, a in enumerate(arr):
            r = releases[i][k] if releases is not None else a
            jobs.append({"task": i, "k": k, "arrival": a, "release": r, "deadline": a + deadlines[i],
                         "ops": list(ops[i]) if ops is not None else [wcets[i]], "finish": None})
    return jobs


def simulate(jobs: list[dict], key: Callable[[dict], tuple], horizon: int) -> list[dict]:
    """Run ``jobs`` until ``horizon``; the ready job with the smallest ``key`` runs; sets job['finish']."""
    pending = sorted(jobs, key=lambda j: j["release"])
    ready: list[dict] = []
    running: dict | None = None     # job inside a non-preemptive op
    op_left = 0
    nxt = 0
    for t in range(horizon):
        while nxt < len(pending) and pending[nxt]["release"] <= t:
            ready.append(pending[nxt])
            nxt += 1
        running, op_left = _step(ready, running, op_left, key, t)
    return jobs


def _step(ready: list[dict], running: dict | None, op_left: int, key: Callable[[dict], tuple],
          t: int) -> tuple[dict | None, int]:
    """One time unit: start the most urgent ready job's next op if none is in flight, run it one unit."""
    if running is None:
        if not ready:
            return None, 0
        running = min(ready, key=key)
        op_left = running["ops"].pop(0)
    op_left -= 1
    if op_left == 0:
        if not running["ops"]:
            running["finish"] = t + 1
            ready.remove(running)
        return None, 0
    return running, op_left


def periodic(period: int, offset: int, horizon: int) -> list[int]:
    """Arrival instants offset, offset + period, ... below horizon."""
    return list(range(offset, horizon, period))


def simulate_precedence(jobs: list[dict], key: Callable[[dict], tuple], horizon: int) -> list[dict]:
    """``simulate`` where a job may name another job under ``after``: it is released the instant that job
    finishes (not before its own ``release``), as a chain member is; sets job['release'] to that instant."""
    waiting = sorted(jobs, key=lambda j: j["release"])
    ready: list[dict] = []
    running: dict | None = None
    op_left = 0
    for t in range(horizon):
        still = []
        for j in waiting:
            pred = j.get("after")
            if j["release"] <= t and (pred is None or (pred["finish"] is not None and pred["finish"] <= t)):
                j["release"] = max(j["release"], pred["finish"]) if pred is not None else j["release"]
                ready.append(j)
            else:
                still.append(j)
        waiting = still
        running, op_left = _step(ready, running, op_left, key, t)
    return jobs
