"""Cause-effect chains measured on a trace: end-to-end latency, reaction time and data age under LET.

A chain (τ1, ..., τn) is a list of tasks where each reads what the previous one publishes. The
trace does not carry message stamps, but under LET it does not need to: a job reads its inputs as
they stood at its release, so for each published output of τn the immediate backward job chain is
found by walking back, hop by hop, to the latest job of the upstream task published at or before
the current job's release (a publish at an instant is visible to a release at that instant). The
first task's release is when the sensor data was read (its message's stamp, when the task is
triggered by that message). A member of a run-time chain (``CHAIN`` events) read its predecessor's
job of the same instance, before that job published: the walk follows the event instead.

* data age, per output of τn: its publish instant minus the first task's release (Dürr et al.'s
  data age; the LET bound is ``sum(T_i + D_i) - T_n``);
* latency, per sample read by τ1: from that read to the *first* output built from it;
* reaction, per sample: the latency plus the time since τ1's previous read (an event that just
  missed the previous read waits that long: Dürr et al.'s reaction time, bound ``sum(T_i + D_i)``);
  for an event-triggered τ1 (released by the message itself) the latency;
* finished, per sample: from that read to when τn's job that built the first output from it
  finished (before its LET publish: what a stamp taken inside its op sees).

``compare`` sets each measure beside the bound ``rt-runtime check`` gives for it (``analysis.e2e``):
latency against chain-LET (the last output visible, from the head's release), reaction against the
LET reaction bound, data age against the LET data age bound, finished against the response bound.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..sched.events import EventKind as K
from .trace_jobs import Trace, percentiles_ms


@dataclass
class ChainTimes:
    """Measured latencies of one chain (ns arrays) and the worst output's backward job chain."""

    name: str
    tasks: tuple[str, ...]
    data_age_ns: np.ndarray
    latency_ns: np.ndarray
    reaction_ns: np.ndarray
    worst_jobs: list[int]          # job indices τ1..τn of the oldest output
    note: str = ""
    finished_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def measures(self) -> dict[str, np.ndarray]:
        """The measured distributions by name, as ``compare`` and the report show them."""
        return {"latency": self.latency_ns, "reaction": self.reaction_ns, "data_age": self.data_age_ns,
                "finished": self.finished_ns}

    def to_json(self, bounds: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Distributions in ms (p50/p90/p99/max), the worst job chain, and the analytic bounds if given."""
        q = (50, 90, 99)
        out: dict[str, Any] = {"name": self.name, "tasks": list(self.tasks), "outputs": len(self.data_age_ns),
                               "data_age_ms": percentiles_ms(self.data_age_ns, q),
                               "latency_ms": percentiles_ms(self.latency_ns, q),
                               "reaction_ms": percentiles_ms(self.reaction_ns, q),
                               "finished_ms": percentiles_ms(self.finished_ns, q),
                               "worst_job_chain": self.worst_jobs, "note": self.note}
        if bounds:
            out["bounds"] = dict(bounds)
            out["vs_bounds"] = compare(self, bounds)
        return out


def _publishes(tr: Trace, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(publish instants, release instants) of one task's published jobs, by publish time."""
    cols = tr.cols
    if name not in cols.tasks:
        return np.zeros(0, np.int64), np.zeros((2, 0), np.int64)
    tid = cols.tasks.index(name)
    m = (cols.kind == K.PUBLISH) & (cols.task == tid) & (cols.job >= 0)
    t_pub, jobs = cols.t_ns[m], cols.job[m]
    j = tr.jobs
    rows = j.rows_of(tid)
    rel = np.full(int(j.job[rows].max(initial=-1)) + 1, -1, np.int64)
    rel[j.job[rows]] = j.release[rows]
    r = rel[jobs] if len(jobs) else np.zeros(0, np.int64)
    ok = r >= 0
    return t_pub[ok], np.stack([r[ok], jobs[ok]])


def chain_times(tr: Trace, name: str, tasks: Sequence[str]) -> ChainTimes:
    """Walk every output of the chain's last task back to the first task (vectorized per hop)."""
    tasks = tuple(tasks)
    t_last, rj_last = _publishes(tr, tasks[-1])
    if len(t_last) == 0:
        z = np.zeros(0, np.int64)
        return ChainTimes(name, tasks, z, z, z, [], f"task '{tasks[-1]}' published nothing")
    cur_r = rj_last[0]
    jobs = [rj_last[1]]
    ok = np.ones(len(cur_r), bool)
    for k in range(len(tasks) - 1, 0, -1):
        up = tasks[k - 1]
        t_up, rj_up = _publishes(tr, up)
        if len(t_up) == 0:
            z = np.zeros(0, np.int64)
            return ChainTimes(name, tasks, z, z, z, [], f"task '{up}' published nothing")
        idx = np.searchsorted(t_up, cur_r, "right") - 1   # latest publish at or before the release
        pred = _chain_predecessors(tr, tasks[k])
        if pred:   # a run-time chain member read its predecessor's job of the same instance, not its publish
            by_job = {int(j): i for i, j in enumerate(rj_up[1].tolist())}
            for i, j in enumerate(jobs[-1].tolist()):
                p = by_job.get(pred.get(int(j), -1))
                if p is not None:
                    idx[i] = p
        ok &= idx >= 0
        idx = np.maximum(idx, 0)
        cur_r = rj_up[0][idx]
        jobs.append(rj_up[1][idx])
    first_r = cur_r[ok]
    age = t_last[ok] - first_r
    jobs = [jb[ok] for jb in reversed(jobs)]
    # The first output built from each sample: outputs come in publish order and, under LET, the
    # samples they are built from never go back in time, so the first occurrence is the earliest.
    samples, first = np.unique(first_r, return_index=True)
    latency = age[first]
    # An event-triggered first task is released by the very message that starts the chain: no
    # sampling wait (as the analytic bound has it); a periodic one may just have missed it.
    prev = _previous_release(tr, tasks[0], samples)
    if _triggered(tr, tasks[0]):
        prev = np.full(len(samples), -1, np.int64)
    reaction = np.where(prev >= 0, latency + (samples - prev), latency)
    worst = int(np.argmax(age)) if len(age) else -1
    fin = _finish(tr, tasks[-1], jobs[-1][first])
    return ChainTimes(name, tasks, age, latency, reaction, [int(jb[worst]) for jb in jobs] if worst >= 0 else [],
                      finished_ns=(fin - samples)[fin >= 0])


def _finish(tr: Trace, name: str, jobs: np.ndarray) -> np.ndarray:
    """Finish instants of the given jobs of one task (-1 where a job has no FINISH, e.g. it was aborted)."""
    j = tr.jobs
    rows = j.rows_of(tr.task_id(name))
    fin = np.full(int(j.job[rows].max(initial=-1)) + 1, -1, np.int64)
    fin[j.job[rows]] = j.finish[rows]
    ok = jobs < len(fin)
    return np.where(ok, fin[np.where(ok, jobs, 0)] if len(fin) else -1, -1)


# measure -> (the bound's key in ``ChainBounds.to_json`` + reaction_bound_ms, its name in the report)
BOUND_OF = {"latency": ("chain_let_ms", "chain-LET"), "reaction": ("reaction_bound_ms", "LET reaction"),
            "data_age": ("let_data_age_ms", "LET data age"), "finished": ("response_ms", "response")}


def compare(times: ChainTimes, bounds: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per measure: its p99 and maximum beside the bound for it, ``ratio`` = bound / measured maximum (below 1:
    the run went past the bound), and for the latency the per-hop LET bound (every task its own interval)."""
    out = []
    for measure, arr in times.measures().items():
        key, label = BOUND_OF[measure]
        bound = bounds.get(key)
        mx = float(arr.max()) / 1e6 if len(arr) else None
        row = {"measure": measure, "measured_p99_ms": percentiles_ms(arr, (99,))["p99"] if len(arr) else None,
               "measured_max_ms": mx, "bound": label, "bound_ms": bound,
               "ratio": bound / mx if bound is not None and mx else None}
        if measure == "latency":
            hop = bounds.get("per_hop_let_ms")
            row["per_hop_let_ms"] = hop
            row["per_hop_ratio"] = hop / mx if hop is not None and mx else None
        out.append(row)
    return out


def _triggered(tr: Trace, name: str) -> bool:
    """True when the task's releases were caused by messages (RELEASE events with b = 1)."""
    cols = tr.cols
    if name not in cols.tasks:
        return False
    m = (cols.kind == K.RELEASE) & (cols.task == cols.tasks.index(name))
    return bool(m.any()) and bool((cols.b[m] == 1).all())


def _chain_predecessors(tr: Trace, name: str) -> dict[int, int]:
    """Job index -> its chain predecessor's job index, for a task released by its predecessor (CHAIN events)."""
    cols = tr.cols
    if name not in cols.tasks:
        return {}
    m = (cols.kind == K.CHAIN) & (cols.task == cols.tasks.index(name))
    return dict(zip(cols.job[m].tolist(), cols.a[m].tolist()))


def _previous_release(tr: Trace, name: str, releases: np.ndarray) -> np.ndarray:
    """For each release instant of ``name``, the instant of its previous release (-1: none)."""
    j = tr.jobs
    rows = j.rows_of(tr.task_id(name))
    r = np.sort(j.release[rows][j.release[rows] >= 0])
    i = np.searchsorted(r, releases, "left") - 1
    return np.where(i >= 0, r[np.maximum(i, 0)], -1)


def wiring_chains(entries: Mapping[str, Mapping[str, Any]], limit: int = 20) -> list[tuple[str, tuple[str, ...]]]:
    """Chains from task wiring (``inputs``/``outputs`` channel maps): every path from a task fed
    only by ingress to a task nobody reads, self-loops (state kept across jobs) left out."""
    writes = {n: set((e.get("outputs") or {}).values()) for n, e in entries.items()}
    reads = {n: set((e.get("inputs") or {}).values()) | ({e["trigger"]} if e.get("trigger") else set())
             for n, e in entries.items()}
    down = {a: sorted(b for b in entries if b != a and writes[a] & reads[b]) for a in entries}
    has_up = {b for a in entries for b in down[a]}
    out: list[tuple[str, tuple[str, ...]]] = []

    def walk(path: list[str]) -> None:
        if len(out) >= limit:
            return
        nxt = [b for b in down[path[-1]] if b not in path]
        if not nxt and len(path) > 1:
            out.append((f"{path[0]}_to_{path[-1]}" + (f"_{len(out)}" if any(
                c[0].startswith(f"{path[0]}_to_{path[-1]}") for c in out) else ""), tuple(path)))
        for b in nxt:
            walk(path + [b])

    for a in sorted(entries):
        if a not in has_up:
            walk([a])
    return out
