"""Speculative execution: run a periodic task's next job on predicted inputs in slack time; commit on a match.

Opt in with ``TaskBinding(..., speculate=Speculate(...))`` or a stack file's ``speculate:`` key
(``build_speculate``). The basis, hypotheses, slack rule, validation and trace: docs/SAFETY.md,
"Speculative execution".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from ..core.task import TaskError
from ..exec.executor import GraphExecutor
from ..sched.events import REACT_SPEC_HIT, REACT_SPEC_MISS, EventKind
from ..sched.job import FINISHED

# (basis inputs, the logical time each was written, the next release) -> predicted input sets.
Hypotheses = Callable[[Mapping[str, Any], Mapping[str, int], int], "Sequence[Mapping[str, Any]]"]

_COUNTERS = ("speculations", "completed", "spec_ops", "hits", "inexact_hits", "misses", "no_hypothesis", "ops_wasted",
             "abandoned", "restarts", "errors", "latency_saved_ns", "late_ops")


@dataclass(frozen=True)
class Speculate:
    """What a ``TaskBinding.speculate`` holds: the hypotheses, how many, and the validator's tolerance."""

    hypotheses: Hypotheses
    k: int = 2                                          # at most this many hypotheses per release
    atol: float | Mapping[str, Any] = 0.0               # for all inputs, or per input (a number or per column)
    rows: Mapping[str, str] | None = None               # input -> count input: compare only its valid rows
    margin: float = 2.0                                 # expected-cost factor under a measured cost model
    wait_for: Sequence[str] = ()                        # inputs whose next value speculation waits for

    def problem(self, graph: Any) -> tuple[str, str] | None:
        """The first thing wrong with this spec for ``graph``, as (field, message); None if nothing is."""
        if self.k < 1:
            return "k", f"must be >= 1, found {self.k}"
        shapes = {t.name: t.shape for t in graph.inputs}
        atol = self.atol if isinstance(self.atol, Mapping) else {}
        for what, keys in (("atol", atol), ("rows", self.rows or {}), ("wait_for", self.wait_for)):
            unknown = sorted(set(keys) - set(shapes))
            if unknown:
                return what, f"graph '{graph.name}' has no input(s) {unknown}; its inputs are {sorted(shapes)}"
        for name in shapes:
            try:
                tol = _tolerance(self.atol, name)
            except ValueError as e:
                return "atol", str(e)
            shape = shapes[name]
            if isinstance(tol, torch.Tensor) and (not shape or shape[-1] != len(tol)):
                return f"atol.{name}", (f"expected one tolerance per column ({shape[-1] if shape else 0} for shape "
                                        f"{shape}), found {len(tol)}")
        return None

    def bind(self, ts: Any, sched: Any) -> "Speculator":
        """Called by the Scheduler for the task: build its speculator (executors, cache, counters)."""
        return Speculator(self, ts, sched)


class _Basis:
    """The next job's inputs as far as they are known now, and what identifies the task-written part."""

    __slots__ = ("inputs", "written", "key")

    def __init__(self, inputs: dict[str, Any], written: dict[str, int], key: tuple) -> None:
        self.inputs, self.written, self.key = inputs, written, key


class Speculator:
    """One task's speculation: hypothesis executors, the cache, the validator and the counters."""

    def __init__(self, spec: Speculate, ts: Any, sched: Any) -> None:
        if ts.triggered:
            raise TaskError(ts.name, "speculate", "speculation needs a periodic task (a triggered task's next "
                                                  "release is not known in advance)")
        primary = ts.executors[0]
        # A checked or redundant task (``RedundantExecutor``): its first copy runs the graph and times the ops.
        # A hit commits outputs its checks did not see (docs/SAFETY.md, "Coverage").
        primary = getattr(primary, "copies", [primary])[0]
        if not hasattr(primary, "op_start_ns"):
            raise TaskError(ts.name, "speculate", "speculation needs a plain GraphExecutor as the primary")
        g = primary.graph
        bad = spec.problem(g)
        if bad is not None:
            raise TaskError(ts.name, f"speculate.{bad[0]}", bad[1])
        self.spec, self.ts, self.s = spec, ts, sched
        self.primary = primary
        self.ops = g.ops
        self.execs = [GraphExecutor(g, primary.device, owner=f"{ts.name}/spec{i}") for i in range(spec.k)]
        self.tol = {s.name: _tolerance(spec.atol, s.name) for s in g.inputs}
        self.est: list[int | None] = [None] * len(g.ops)   # last cost of each op (virtual ns)
        self.basis_key: tuple | None = None                # what the hypotheses in hand were built from
        self.todo: list[dict[str, Any]] = []               # hypotheses for the next release
        self.cache: list[tuple[dict[str, Any], Any, int]] = []   # (inputs, executor, ops) completed
        self.k = 0                                          # next hypothesis to run
        self.gen: Iterator[int] | None = None
        self.ops_done = 0
        self.running = False                                # its op runs now, outside the lock (threads)
        self.dropped = False                                # ... and was abandoned meanwhile
        self.c = dict.fromkeys(_COUNTERS, 0)

    # ---- the release (Scheduler.release) -------------------------------------------------------
    def on_release(self, job: Any, r: int) -> bool:
        """Validate the cached hypotheses against the job's snapshot; True: a hit, its outputs filled into the
        job's slots (the scheduler then finishes the job at r)."""
        s, ts, c = self.s, self.ts, self.c
        self.abandon()
        hit = None
        if self.cache and not job.fallback:
            for i, (hin, _, _) in enumerate(self.cache):
                if self._match(job.inputs, hin):
                    hit = i
                    break
            c["ops_wasted"] += sum(n for i, (_, _, n) in enumerate(self.cache) if i != hit)
            if hit is None:
                c["misses"] += 1
                s.emit(EventKind.REACTION, r, ts.name, job.index, REACT_SPEC_MISS, ts.mode)
        elif self.basis_key is not None:
            c["no_hypothesis"] += 1   # hypotheses were made but none completed in slack
        cache = self.cache
        self._reset()
        if hit is None:
            return False
        hin, ex, _ = cache[hit]
        if not self._match(job.inputs, hin, exact=True):
            c["inexact_hits"] += 1
            s.mark_nondeterministic(r, f"task '{ts.name}' job {job.index} committed speculative outputs "
                                       "within tolerance")
        c["hits"] += 1
        c["latency_saved_ns"] += sum(e or 0 for e in self.est)
        s.emit(EventKind.REACTION, r, ts.name, job.index, REACT_SPEC_HIT, ts.mode)
        outs = job.outs
        views = ex.outputs
        for i, (gout, ch) in enumerate(ts.writers):
            outs[i] = ch.fill(outs[i], views[gout])
        return True

    def _reset(self) -> None:
        self.basis_key = None
        self.todo = []
        self.cache = []
        self.k = 0

    def _rows(self, inputs: Mapping[str, Any], name: str) -> int | None:
        rows = self.spec.rows
        if rows is None or name not in rows:
            return None
        return int(torch.as_tensor(inputs[rows[name]]).reshape(-1)[0])

    def _match(self, real: Mapping[str, Any], hyp: Mapping[str, Any], exact: bool = False) -> bool:
        """True if every input agrees (within its tolerance, or bit for bit with ``exact``) on its valid rows."""
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
            if a_t.numel() == 0:
                continue
            tol = 0.0 if exact else self.tol[name]
            if isinstance(tol, float) and tol == 0.0:
                if not torch.equal(a_t, b_t):
                    return False
            elif not bool(((a_t.double() - b_t.double()).abs() <= tol).all()):
                return False
        return True

    # ---- the basis ------------------------------------------------------------------------------
    def basis(self, release: int) -> _Basis | None:
        """The inputs the job released at ``release`` will see, as far as known now (module docstring)."""
        s, ts = self.s, self.ts
        wanted = {ch.name for _, ch, _ in ts.readers}
        pending: dict[str, tuple[int, Any]] = {}   # channel -> (publish time, slot) due by the release
        for t, job in s.due_publishes(release):
            for (_, ch), slot in zip(job.ts.writers, job.outs):
                if ch.name not in wanted:
                    continue
                if job.state != FINISHED:
                    return None   # an output due before the release is not computed yet
                if ch.name not in pending or t > pending[ch.name][0]:
                    pending[ch.name] = (t, slot)
        inputs: dict[str, Any] = {}
        written: dict[str, int] = {}
        key = []
        for gin, ch, rid in ts.readers:
            p = pending.get(ch.name)
            if p is not None:
                t, slot = p
            else:
                slot = ch.peek(rid)
                if slot is None:
                    return None
                t = slot.t_ns
            if gin in self.spec.wait_for and t <= release - ts.period:
                return None   # not written since the last release yet: a basis that will change
            if slot.ready is not None:   # hypotheses are built on the host: its fill must be complete
                slot.ready.synchronize()
            inputs[gin] = slot.data
            written[gin] = t
            if ch.name in s.written_channels:
                key.append((gin, id(slot), t))
        return _Basis(inputs, written, tuple(key))

    def _restart(self, b: _Basis, release: int) -> None:
        """New hypotheses from a new basis; what was done for the old one is wasted."""
        c = self.c
        if self.gen is not None or self.cache:
            c["restarts"] += 1
        self.abandon(count=False)
        c["ops_wasted"] += sum(n for _, _, n in self.cache)
        self.cache = []
        self.k = 0
        hyps = list(self.spec.hypotheses(b.inputs, b.written, release))[:self.spec.k]
        # The basis views live in channel slots that will be reused: the hypotheses keep copies.
        base = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in b.inputs.items()}
        self.todo = [{**base, **h} for h in hyps]
        self.basis_key = b.key

    # ---- slack (the drivers) ---------------------------------------------------------------------
    def abandon(self, count: bool = True) -> None:
        """Drop the hypothesis in progress (a mandatory job became ready); its ops are wasted. If its
        op is running right now (a worker thread, outside the lock), the worker drops it after."""
        if self.gen is None:
            return
        if count:
            self.c["abandoned"] += 1
        if self.running:
            self.dropped = True
            return
        self.gen.close()
        self.gen = None
        self.c["ops_wasted"] += self.ops_done
        self.k += 1   # do not retry it: it could be abandoned again and again
        self.ops_done = 0

    @property
    def live(self) -> bool:
        """True while a hypothesis is part-way through."""
        return self.gen is not None

    def prepare(self, now: int, t_next: int, cost: Any, measured: bool) -> Iterator[int] | None:
        """The hypothesis to advance by one op, if that op is expected to end before ``t_next``
        (scheduler state read: call under the scheduler's lock); None if nothing fits."""
        ts = self.ts
        if ts.mode or ts.active or self.running or self.s.workers[ts.worker].op_job is not None:
            return None
        release = ts.offset + ts.next_index * ts.period
        b = self.basis(release)
        if b is None:
            return None
        if b.key != self.basis_key:
            self._restart(b, release)
        if self.k >= len(self.todo):
            return None
        i = self.ops_done
        est = self.est[i]
        if est is None:   # never run speculatively: the primary's last measurement, through the cost model
            p = self.primary
            if p.jobs == 0:
                return None
            est = self.op_cost(cost, max(0, p.op_end_ns[i] - p.op_start_ns[i]))
        if measured:
            est = int(est * self.spec.margin)
        if now + est >= t_next:   # it must end before the next event that can start a job
            return None
        if self.gen is None:
            self.gen = self.execs[self.k].steps(self.todo[self.k])
            self.c["speculations"] += 1
        self.running = True
        return self.gen

    def run_op(self, gen: Iterator[int]) -> tuple[int, bool]:
        """Advance ``gen`` by one op (no scheduler state touched: outside the lock); (op index, failed)."""
        try:
            return next(gen), False
        except StopIteration:
            return len(self.ops) - 1, False
        except Exception:  # noqa: BLE001 - a hypothesis that breaks a contract or an op: dropped
            return self.ops_done, True

    def settle(self, idx: int, err: bool, dt: int, end: int, t_next: int) -> None:
        """Book the op ``run_op`` ran (virtual or wall cost ``dt``, ended at ``end``): under the lock."""
        c = self.c
        self.running = False
        self.est[self.ops_done] = dt
        if end >= t_next:
            c["late_ops"] += 1   # a measured cost ran past its estimate (margin too small)
        c["spec_ops"] += 1
        self.ops_done = idx + 1
        if self.dropped:   # abandoned while it ran (a release came)
            self.dropped = False
            self.gen.close()   # type: ignore[union-attr]
            self.gen = None
            c["ops_wasted"] += self.ops_done
            self.ops_done = 0
        elif err:
            c["errors"] += 1
            c["ops_wasted"] += self.ops_done
            self.gen = None
            self.ops_done = 0
            self.k += 1
        elif idx >= len(self.ops) - 1:
            for _ in self.gen:   # type: ignore[union-attr]  # the executor's tail
                pass
            self.gen = None
            self.cache.append((self.todo[self.k], self.execs[self.k], self.ops_done))
            c["completed"] += 1
            self.ops_done = 0
            self.k += 1

    def op_cost(self, cost: Any, measured_ns: int) -> int:
        """The cost model's charge for the next (or running) speculative op, measured at ``measured_ns``."""
        i = self.ops_done
        return max(0, int(cost(self.ts.name, -1, i, self.ops[i], measured_ns)))

    def step(self, now: int, t_next: int, cost: Any, measured: bool, mono: Callable[[], int]) -> int:
        """Inline driver: run one speculative op if it fits before ``t_next``; its virtual cost, or -1."""
        gen = self.prepare(now, t_next, cost, measured)
        if gen is None:
            return -1
        m0 = mono()
        idx, err = self.run_op(gen)
        dt = self.op_cost(cost, mono() - m0)
        self.settle(idx, err, dt, now + dt, t_next)
        return dt

    def stats(self) -> dict[str, int]:
        """Counters: speculations run, hits, misses, ops wasted, latency saved, ..."""
        return dict(self.c)

    def __repr__(self) -> str:
        return f"Speculator({self.ts.name!r}, k={self.spec.k}, atol={self.spec.atol})"


def _tolerance(atol: float | Mapping[str, Any], name: str) -> Any:
    """An input's tolerance: a float, or a float64 tensor over the last axis (per column)."""
    v = atol.get(name, 0.0) if isinstance(atol, Mapping) else atol
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if v < 0:
            raise ValueError(f"speculate.atol: '{name}' must be >= 0, found {v}")
        return float(v)
    t = torch.as_tensor(list(v), dtype=torch.float64)
    if t.ndim != 1 or bool((t < 0).any()):
        raise ValueError(f"speculate.atol: '{name}' expected a number or a list of non-negative numbers, found {v!r}")
    return t
