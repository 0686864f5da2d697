"""Speculative execution: run a task's next job on predicted inputs in slack time, commit on a match.

A task opts in with ``TaskBinding(..., speculate=Speculate(hypotheses, k=..., atol=...))``. At each
release the runtime keeps a copy of the job's snapshotted inputs. ``hypotheses(last_inputs,
last_release_ns, next_release_ns)`` turns them into up to ``k`` predicted input sets for the next
release (a dict per hypothesis; inputs it leaves out keep their last value), e.g. obstacles keep
going / brake, the ego's odometry propagated by its velocity to the next release time.

Slack (inline driver on a ``VirtualClock`` only): when no worker has a mandatory op to start and
the task's worker is idle, the driver asks ``Speculator.step``; it runs *one* op of the current
hypothesis on its own ``GraphExecutor`` (one per hypothesis: its own arenas, so a cached result
survives and cannot touch the primary's memory), and only if ``now + expected cost`` is strictly
before the next known event (timeline head: release, ingress, deadline; any op completion; the
end of the run).
Expected cost: the op's last cost as the cost model gave it (the primary job's measurement before
the first speculative run). Nothing happens in the system during that op, so mandatory jobs'
response times cannot grow. When a mandatory job becomes ready the hypothesis in progress is
abandoned (its ops count as wasted).

At the next real release the validator compares the snapshot with each completed hypothesis: per
input, the max absolute difference on the valid rows (``rows``: input -> the input holding its
row count) must be ``<= atol``. A match commits the cached outputs into the job's slots: the job
finishes at its release without running (it still publishes at its LET deadline). No match: the
job runs as usual. With ``atol == 0`` a hit commits exactly what the graph would compute (the
replay stays bit-exact for deterministic ops); a non-zero tolerance trades that for latency, and
a hit on inputs that are not bit-equal marks the run non-deterministic.

Trace: ``REACTION`` with ``a = REACT_SPEC_HIT`` (5) or ``REACT_SPEC_MISS`` (6), ``b`` = task mode.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import torch

from ..core.task import TaskError
from ..exec.executor import GraphExecutor
from ..sched.events import EventKind

REACT_SPEC_HIT, REACT_SPEC_MISS = 5, 6

# (last job's inputs, its release, the next release) -> predicted input sets for the next release.
Hypotheses = Callable[[Mapping[str, Any], int, int], "list[Mapping[str, Any]]"]

_COUNTERS = ("speculations", "completed", "spec_ops", "hits", "misses", "no_hypothesis", "ops_wasted",
             "abandoned", "errors", "latency_saved_ns", "late_ops")


@dataclass(frozen=True)
class Speculate:
    """What a ``TaskBinding.speculate`` holds: the hypotheses, how many, and the validator's tolerance."""

    hypotheses: Hypotheses
    k: int = 2                                   # at most this many hypotheses per release
    atol: float | Mapping[str, float] = 0.0      # per input (a mapping) or for all; 0: exact
    rows: Mapping[str, str] | None = None        # input -> count input: compare only its valid rows
    margin: float = 2.0                          # expected-cost factor under a measured cost model

    def bind(self, ts: Any, sched: Any) -> "Speculator":
        """Called by the Scheduler for the task: build its speculator (executors, cache, counters)."""
        return Speculator(self, ts, sched)


class Speculator:
    """One task's speculation: hypothesis executors, the cache, the validator and the counters."""

    def __init__(self, spec: Speculate, ts: Any, sched: Any) -> None:
        if spec.k < 1:
            raise TaskError(ts.name, "speculate", f"k must be >= 1, found {spec.k}")
        primary = ts.executors[0]
        if not hasattr(primary, "op_start_ns"):
            raise TaskError(ts.name, "speculate", "speculation needs a plain GraphExecutor as the primary")
        self.spec, self.ts, self.s = spec, ts, sched
        self.primary = primary
        g = primary.graph
        self.ops = g.ops
        self.execs = [GraphExecutor(g, primary.device, owner=f"{ts.name}/spec{i}") for i in range(spec.k)]
        self.est: list[int | None] = [None] * len(g.ops)   # last cost of each op (virtual ns)
        self.last: dict[str, Any] | None = None             # the last release's inputs (copied)
        self.last_r = 0
        self.todo: list[dict[str, Any]] | None = None       # hypotheses for the next release
        self.cache: list[tuple[dict[str, Any], Any, int]] = []   # (inputs, executor, ops) completed
        self.k = 0                                          # next hypothesis to run
        self.gen: Iterator[int] | None = None
        self.ops_done = 0
        self.c = dict.fromkeys(_COUNTERS, 0)

    # ---- the release (Scheduler.release) -------------------------------------------------------
    def on_release(self, job: Any, r: int) -> bool:
        """Validate the cached hypotheses against the job's snapshot; True: committed, job finished at r."""
        s, ts, c = self.s, self.ts, self.c
        self.abandon()
        hit = None
        if self.cache and not job.fallback:
            for i, (hin, ex, _) in enumerate(self.cache):
                if self._match(job.inputs, hin):
                    hit = i
                    break
            wasted = sum(n for i, (_, _, n) in enumerate(self.cache) if i != hit)
            c["ops_wasted"] += wasted
            if hit is None:
                c["misses"] += 1
                s.emit(EventKind.REACTION, r, ts.name, job.index, REACT_SPEC_MISS, ts.mode)
        elif self.todo is not None:
            c["no_hypothesis"] += 1   # no completed hypothesis (no slack, or none given)
        self.last = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in job.inputs.items()}
        self.last_r = r
        self.todo = None
        self.k = 0
        cache, self.cache = self.cache, []
        if hit is None:
            return False
        hin, ex, _ = cache[hit]
        if not self._exact(job.inputs, hin):
            s.mark_nondeterministic(r, f"task '{ts.name}' job {job.index} committed speculative outputs "
                                       "within tolerance")
        c["hits"] += 1
        c["latency_saved_ns"] += sum(e or 0 for e in self.est)
        s.emit(EventKind.REACTION, r, ts.name, job.index, REACT_SPEC_HIT, ts.mode)
        outs = job.outs
        views = ex.outputs
        for i, (gout, ch) in enumerate(ts.writers):
            outs[i] = ch.fill(outs[i], views[gout])
        job.start_ns = r
        s.finish(job, r, ts.worker)
        return True

    def _rows(self, inputs: Mapping[str, Any], name: str) -> int | None:
        rows = self.spec.rows
        if rows is None or name not in rows:
            return None
        return int(torch.as_tensor(inputs[rows[name]]).reshape(-1)[0])

    def _match(self, real: Mapping[str, Any], hyp: Mapping[str, Any]) -> bool:
        atol = self.spec.atol
        for name, a in real.items():
            b = hyp.get(name)
            if b is None:
                return False
            n, m = self._rows(real, name), self._rows(hyp, name)
            if n != m:
                return False
            a_t, b_t = torch.as_tensor(a), torch.as_tensor(b)
            if n is not None:
                a_t, b_t = a_t[:n], b_t[:n]
            if a_t.shape != b_t.shape:
                return False
            tol = atol.get(name, 0.0) if isinstance(atol, Mapping) else atol
            if a_t.numel() == 0:
                continue
            if tol == 0:
                if not torch.equal(a_t, b_t):
                    return False
            elif float((a_t.double() - b_t.double()).abs().max()) > tol:
                return False
        return True

    def _exact(self, real: Mapping[str, Any], hyp: Mapping[str, Any]) -> bool:
        for name, a in real.items():
            n = self._rows(real, name)
            a_t, b_t = torch.as_tensor(a), torch.as_tensor(hyp[name])
            if n is not None:
                a_t, b_t = a_t[:n], b_t[:n]
            if not torch.equal(a_t, b_t):
                return False
        return True

    # ---- slack (inline driver) ----------------------------------------------------------------
    def abandon(self) -> None:
        """Drop the hypothesis in progress (a mandatory job became ready); its ops are wasted."""
        if self.gen is not None:
            self.gen.close()
            self.gen = None
            self.c["abandoned"] += 1
            self.c["ops_wasted"] += self.ops_done
            self.k += 1   # do not retry it: it could be abandoned again and again
            self.ops_done = 0

    @property
    def live(self) -> bool:
        """True while a hypothesis is part-way through."""
        return self.gen is not None

    def step(self, now: int, t_next: int, cost: Any, measured: bool, mono: Callable[[], int]) -> int:
        """Run one speculative op if it fits before ``t_next``; returns its virtual cost, or -1."""
        ts = self.ts
        if self.last is None or ts.mode or ts.active or self.s.workers[ts.worker].pending is not None:
            return -1
        if self.todo is None:
            nxt = self.last_r + ts.period
            hyps = list(self.spec.hypotheses(self.last, self.last_r, nxt))[:self.spec.k]
            self.todo = [{**self.last, **h} for h in hyps]
        if self.k >= len(self.todo):
            return -1
        i = self.ops_done
        est = self.est[i]
        if est is None:   # never run speculatively: the primary's last measurement, through the cost model
            p = self.primary
            if p.jobs == 0:
                return -1
            est = cost(ts.name, -1, i, self.ops[i], max(0, p.op_end_ns[i] - p.op_start_ns[i]))
        if measured:
            est = int(est * self.spec.margin)
        if now + est >= t_next:   # it must end before the next known event, never at or past it
            return -1
        c = self.c
        if self.gen is None:
            self.gen = self.execs[self.k].steps(self.todo[self.k])
            c["speculations"] += 1
        m0 = mono()
        err = False
        try:
            idx = next(self.gen)
        except StopIteration:
            idx = len(self.ops) - 1
        except Exception:  # noqa: BLE001 - a hypothesis that breaks a contract or an op: dropped
            idx, err = i, True
        m = mono() - m0
        dt = max(0, int(cost(ts.name, -1, i, self.ops[i], m)))
        self.est[i] = dt
        if now + dt >= t_next:
            c["late_ops"] += 1   # a measured cost ran past its estimate (margin too small)
        c["spec_ops"] += 1
        self.ops_done = idx + 1
        if err:
            c["errors"] += 1
            c["ops_wasted"] += self.ops_done
            self.gen = None
            self.ops_done = 0
            self.k += 1
        elif idx >= len(self.ops) - 1:
            for _ in self.gen:   # the executor's tail
                pass
            self.gen = None
            self.cache.append((self.todo[self.k], self.execs[self.k], self.ops_done))
            c["completed"] += 1
            self.ops_done = 0
            self.k += 1
        return dt

    def stats(self) -> dict[str, int]:
        """Counters: speculations run, hits, misses, ops wasted, latency saved, ..."""
        return dict(self.c)

    def __repr__(self) -> str:
        return f"Speculator({self.ts.name!r}, k={self.spec.k}, atol={self.spec.atol})"
