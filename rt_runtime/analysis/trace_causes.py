"""Why a job missed its deadline: an accounting of its response time, and the cause it points to.

For a job of task τ released at r on worker w, the window is [r, e], e its finish (or, if it never
finished, its abort, else its deadline). Every instant of the window is booked to exactly one of:

* own execution: τ's ops of this job;
* interference, by task: ops of other jobs that ran on w inside the window and were more urgent
  (an op that *started* while the job was ready was picked over it, so it was more urgent; an op
  already running at r is judged by the policy's key: EDF deadline, or fixed rank);
* blocking: an op of a less urgent job that was running at r (ops are never interrupted);
* late start: nothing ran on w between r and the first op (the runtime saw the release or its
  input late); other: any later gap (runtime overhead on a wall clock).

So response = own + interference + blocking + late start + other, exactly. The cause is read from
the *excess* of each component: own execution beyond the WCET budget (overrun), all interference,
all blocking, all late start. Overrun is named alone when it alone covers the lateness (it is the
one budget the task itself broke); else the largest components, as few as cover the lateness.
A job the watchdog aborted before its deadline never published: its cause is ``aborted``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from .trace_jobs import Trace, op_name, op_names

CAUSES = ("overrun", "interference", "blocking", "late_input", "aborted")
_TIE = {c: i for i, c in enumerate(CAUSES)}  # fixed order among equal components: output never flips


@dataclass
class MissAccount:
    """One missed (or watchdog-aborted) job: its window, the accounting and the cause."""

    task: str
    job: int
    worker: int
    release_ns: int
    deadline_ns: int
    finish_ns: int | None
    end_ns: int                       # end of the accounted window
    missed: bool                      # a MISS event (the runtime's miss counter)
    aborted: bool                     # the job was aborted (ABORT event)
    own_ns: int = 0
    interference_ns: dict[str, int] = field(default_factory=dict)
    blocking_ns: int = 0
    blocking_by: list[tuple[str, str, int]] = field(default_factory=list)   # (task, op, ns)
    late_start_ns: int = 0
    other_ns: int = 0
    remaining_ns: int = 0             # estimated work left when it never finished (op medians)
    late_by_ns: int = 0               # response (or estimate) minus relative deadline
    budget_ns: int | None = None
    stale_inputs: int = 0             # inputs its release snapshot found not new (SNAPSHOT b)
    overrun_op: tuple[str, int, int] | None = None   # (op, its time, its median) in this job
    cause: list[str] = field(default_factory=list)

    @property
    def interference_total_ns(self) -> int:
        """All interference, every task together."""
        return sum(self.interference_ns.values())

    @property
    def window_ns(self) -> int:
        """Length of the accounted window (the response time when it finished)."""
        return self.end_ns - self.release_ns

    def cause_json(self) -> str | list[str]:
        """One cause as a string, several as a list (largest first)."""
        return self.cause[0] if len(self.cause) == 1 else list(self.cause)

    def to_json(self) -> dict[str, Any]:
        """The documented miss entry plus the accounting (ms)."""
        ms = lambda ns: ns / 1e6  # noqa: E731
        return {
            "task": self.task, "job": self.job, "release_ms": ms(self.release_ns), "deadline_ms": ms(self.deadline_ns),
            "finish_ms": None if self.finish_ns is None else ms(self.finish_ns), "cause": self.cause_json(),
            "missed": self.missed, "aborted": self.aborted, "worker": self.worker, "late_by_ms": ms(self.late_by_ns),
            "stale_inputs": self.stale_inputs,
            "accounting": {"window_ms": ms(self.window_ns), "own_ms": ms(self.own_ns),
                           "interference_ms": {k: ms(v) for k, v in self.interference_ns.items()},
                           "blocking_ms": ms(self.blocking_ns), "late_start_ms": ms(self.late_start_ns),
                           "other_ms": ms(self.other_ns), "remaining_estimate_ms": ms(self.remaining_ns)},
            "blocking_by": [{"task": t, "op": o, "ms": ms(n)} for t, o, n in self.blocking_by],
            "overrun": None if self.overrun_op is None else {
                "op": self.overrun_op[0], "op_ms": ms(self.overrun_op[1]), "op_median_ms": ms(self.overrun_op[2]),
                "exec_ms": ms(self.own_ns + self.remaining_ns),
                "budget_ms": None if self.budget_ns is None else ms(self.budget_ns)},
        }

    def sentence(self) -> str:
        """One line a person reads: what the time went to."""
        f = lambda ns: f"{ns / 1e6:.2f}"  # noqa: E731
        parts = [f"own {f(self.own_ns)}"]
        if self.overrun_op is not None and "overrun" in self.cause:
            op, t, med = self.overrun_op
            parts[0] += f" (op {op} {f(t)} vs median {f(med)}" + \
                (f"; budget {f(self.budget_ns)})" if self.budget_ns is not None else ")")
        if self.interference_ns:
            parts.append(f"interference {f(self.interference_total_ns)} (" + ", ".join(
                f"{k} {f(v)}" for k, v in self.interference_ns.items()) + ")")
        if self.blocking_ns:
            parts.append(f"blocking {f(self.blocking_ns)} (" + ", ".join(
                f"{t}/{o} {f(n)}" for t, o, n in self.blocking_by) + ")")
        for label, v in (("late start", self.late_start_ns), ("other", self.other_ns)):
            if v:
                parts.append(f"{label} {f(v)}")
        head = "response" if self.finish_ns is not None else "window"
        tail = f" + ~{f(self.remaining_ns)} left" if self.remaining_ns else ""
        return f"{head} {f(self.window_ns)} ms = " + " + ".join(parts) + tail


class Attributor:
    """Accounts missed jobs of one trace; built once, then ``account(row)`` per job."""

    def __init__(self, tr: Trace, budgets: Mapping[str, int], ranks: Mapping[str, int] | None,
                 policy: str, op_median: Mapping[tuple[int, int, int], int], exec_median: Mapping[int, int]) -> None:
        self.tr, self.budgets, self.ranks, self.policy = tr, budgets, ranks, policy
        self.op_median, self.exec_median = op_median, exec_median
        ops = tr.ops
        workers = np.unique(ops.worker)
        lo = np.searchsorted(ops.worker, workers, "left")
        hi = np.searchsorted(ops.worker, workers, "right")
        self._w = {int(w): (int(a), int(b)) for w, a, b in zip(workers, lo, hi)}

    def _op_name(self, tid: int, op: int, graph: int) -> str:
        return op_name(self.tr.meta, self.tr.jobs.names[tid], op, graph)

    def _key(self, row: int) -> tuple | None:
        """The ready-queue key the policy gave this job (docs/CYCLE.md), when the trace allows it."""
        j = self.tr.jobs
        name, d, r = j.names[j.task[row]], int(j.deadline[row]), int(j.release[row])
        if d < 0:
            return None
        if self.policy == "edf":
            return (d, name, r)
        if self.ranks is None or name not in self.ranks:
            return None
        return (self.ranks[name], d, name, r)

    def _more_urgent(self, x: int, j: int, nxt_row: int) -> bool:
        """Was job row ``x`` (running at j's release) more urgent than j?"""
        kx, kj = self._key(x), self._key(j)
        if kx is not None and kj is not None:
            return kx < kj
        return nxt_row == x   # no key: it kept the worker after its op while j waited, so it was

    def account(self, row: int) -> MissAccount:
        """The accounting and cause of the job in ``row``."""
        tr, j, ops = self.tr, self.tr.jobs, self.tr.ops
        tid = int(j.task[row])
        name = j.names[tid]
        r, dl = int(j.release[row]), int(j.deadline[row])
        finished = j.finish[row] >= 0
        end = int(j.finish[row]) if finished else int(j.abort_t[row]) if j.abort_t[row] >= 0 else dl
        w = int(j.worker[row])
        if w < 0:
            mine = np.flatnonzero(ops.row == row)
            w = int(ops.worker[mine[0]]) if len(mine) else -1
        acc = MissAccount(name, int(j.job[row]), w, r, dl, int(j.finish[row]) if finished else None, end,
                          bool(j.miss_t[row] >= 0), bool(j.abort_t[row] >= 0), budget_ns=self.budgets.get(name),
                          stale_inputs=int(j.stale_inputs[row]))
        lo, hi = self._w.get(w, (0, 0))
        a = lo + int(np.searchsorted(ops.t1[lo:hi], r, "right"))
        b = lo + int(np.searchsorted(ops.t0[lo:hi], end, "left"))
        first = end
        graph = int(j.fallback[row])
        own_ops: list[tuple[int, int]] = []
        for i in range(a, b):
            t0, t1, xrow = int(ops.t0[i]), int(ops.t1[i]), int(ops.row[i])
            part = min(t1, end) - max(t0, r)
            if part <= 0:
                continue
            first = min(first, max(t0, r))
            if xrow == row:
                acc.own_ns += part
                own_ops.append((int(ops.op[i]), t1 - t0))
                continue
            xname = j.names[int(ops.task[i])]
            nxt = int(ops.row[i + 1]) if i + 1 < hi else -1
            if t0 >= r or self._more_urgent(xrow, row, nxt):
                acc.interference_ns[xname] = acc.interference_ns.get(xname, 0) + part
            else:
                acc.blocking_ns += part
                acc.blocking_by.append((xname, self._op_name(int(ops.task[i]), int(ops.op[i]), int(ops.graph[i])),
                                        part))
        acc.interference_ns = dict(sorted(acc.interference_ns.items(), key=lambda kv: (-kv[1], kv[0])))
        acc.late_start_ns = max(0, first - r)
        acc.other_ns = max(0, acc.window_ns - acc.own_ns - acc.interference_total_ns - acc.blocking_ns
                           - acc.late_start_ns)
        if not finished:
            n_ops = len(op_names(tr.meta, name, graph)) or int(j.ops_done[row])
            # An op no job of the task ever completed has no median: its share of the budget stands in.
            per_op = (acc.budget_ns or self.exec_median.get(tid, 0)) // max(n_ops, 1)
            acc.remaining_ns = sum(self.op_median.get((tid, graph, k), per_op)
                                   for k in range(int(j.ops_done[row]), n_ops))
        rel_d = dl - r
        # A MISS is late by definition, even when the estimate of the work left says otherwise.
        acc.late_by_ns = max(1, acc.window_ns - rel_d + acc.remaining_ns) if finished or acc.missed else 0
        acc.overrun_op = self._long_op(tid, graph, own_ops)
        acc.cause = self._cause(acc, tid, bool(j.watchdog_abort[row]) and not acc.missed and not finished)
        return acc

    def _long_op(self, tid: int, graph: int, own_ops: list[tuple[int, int]]) -> tuple[str, int, int] | None:
        """The op that ran longest against its median (or, if none did, simply the longest)."""
        if not own_ops:
            return None
        med = self.op_median
        ex = [(d - med.get((tid, graph, k), d), d, k) for k, d in own_ops]
        best = max(ex) if max(ex)[0] > 0 else max(ex, key=lambda e: (e[1], -e[2]))
        return self._op_name(tid, best[2], graph), best[1], med.get((tid, graph, best[2]), best[1])

    def _cause(self, acc: MissAccount, tid: int, aborted_early: bool) -> list[str]:
        if aborted_early:
            return ["aborted"]
        ref = acc.budget_ns if acc.budget_ns is not None else self.exec_median.get(tid)
        excess = {"overrun": max(0, acc.own_ns + acc.remaining_ns - ref) if ref is not None else 0,
                  "interference": acc.interference_total_ns, "blocking": acc.blocking_ns,
                  "late_input": acc.late_start_ns}
        need = max(acc.late_by_ns, 1)
        if excess["overrun"] >= need:
            return ["overrun"]
        return cover(excess, need)


def cover(excess: Mapping[str, int], need: int, fallback: Callable[[], str] = lambda: "overrun") -> list[str]:
    """The fewest components, largest first, whose excess adds up to ``need`` (pruned of any not needed)."""
    ranked = sorted(((v, k) for k, v in excess.items() if v > 0), key=lambda e: (-e[0], _TIE[e[1]]))
    chosen: list[tuple[int, str]] = []
    total = 0
    for v, k in ranked:
        if total >= need:
            break
        chosen.append((v, k))
        total += v
    if total < need:
        # Nothing outside the job explains it: its own execution alone outgrew the deadline.
        names = [k for _, k in chosen]
        return names + [fallback()] if fallback() not in names else names
    for v, k in sorted(chosen, key=lambda e: (e[0], -_TIE[e[1]])):   # smallest first
        if len(chosen) > 1 and total - v >= need:
            chosen.remove((v, k))
            total -= v
    return [k for _, k in chosen]
