"""The computing side of parallel commit (``sched.parallel``): computations and the threads that run them.

A ``Computation`` is one deferred job's work — bind the inputs it snapshotted, run its graph, copy
its outputs into the slots it reserved — with what it needs from others (its task's previous
computation, the chain members whose outputs it reads) and its outcome. ``ComputePool`` runs them
on N threads: with N = 1 the driver alone, lazily, where a result is first read; with more, N pool
threads, and the driver computes a result it waits for only if no thread has taken it yet.
Nothing here touches scheduler state; of the channels, a computation touches only the slots it holds.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, NamedTuple

from .handoff import wait_ready
from .job import RunJob

_local = threading.local()   # the computation a thread is running (for the COMPARE events it records)


class NoInput(RuntimeError):
    """A chain member whose producer failed, with nothing on the channel to read instead."""


def record_compare(verdict: int, copies: int) -> None:
    """A deferred redundant executor's compare hook (``attach``): the event is traced at the settle point."""
    c = getattr(_local, "comp", None)
    if c is not None:
        c.compares.append((verdict, copies))


class HandOver(NamedTuple):
    """A chain input a computation resolves once its producer ran (``ParallelCommit.hand_over``)."""

    input: str                # the reader's graph input
    producer: "Computation"   # the producer's computation
    output: int               # the producer's output index
    fallback: Any             # the slot the channel held at the hand-over (pinned), None: nothing
    meta: Any                 # (metadata input, row) of that fallback, None: no metadata row


class Computation:
    """One deferred job's computation: what it reads and fills, its outcome and measured steps."""

    __slots__ = ("job", "executor", "inputs", "writers", "outs", "refs", "steps", "held", "error", "fill_error",
                 "done", "settled", "cancelled", "waiting", "dependents", "after", "compares", "handovers", "reads",
                 "expect")

    def __init__(self, job: RunJob, executor: Any, inputs: dict[str, Any], refs: list[tuple[Any, Any]]) -> None:
        self.job = job
        self.executor = executor
        self.inputs = inputs
        self.writers = job.ts.writers
        self.outs = job.outs                    # the job's reserved slots (the same list: a fill may swap one)
        self.refs = refs                        # (channel, slot) this computation holds a reference on
        self.steps: list[int] = []              # measured ns of each op
        self.held: list[Any] | None = None      # output copies the driver fills at the settle point
        self.error: BaseException | None = None
        self.fill_error: BaseException | None = None
        self.done = False
        self.settled = False
        self.cancelled = False
        self.waiting = 0                        # computations it waits for, not done yet
        self.dependents: list[Computation] = []   # computations waiting for this one
        self.after: list[Computation] = []        # computations this one waits for
        self.handovers: list[HandOver] = []   # chain inputs resolved once their producers ran
        self.compares: list[tuple[int, int]] = []   # COMPARE events (verdict, copies) of a redundant job
        self.reads: Any = ()   # (input, slot) published on a bet: read once its producer ran (sched.optimistic)
        self.expect: tuple[int, int] | None = None   # the COMPARE verdict a bet traced for it (sched.optimistic)


def _copy(x: Any) -> Any:
    return x.clone() if hasattr(x, "clone") else x.copy()


def compute(c: Computation, measure: Callable[[], int], in_driver: bool) -> None:
    """Run a computation to its end (a worker thread, or the driver when ``in_driver``); touches no
    scheduler state, and of the channels only the slots it holds."""
    if c.cancelled:
        return
    for gin, slot in c.reads:   # its producer has run (before the hand-overs: they may name the same input)
        c.inputs[gin] = slot.data
    for gin, src, oi, fb, meta in c.handovers:   # the producer has computed: its output, or the fallback
        held = src.held[oi] if src.held is not None else None
        x = held if held is not None else src.outs[oi].data if src.error is None and src.fill_error is None else None
        if x is None:
            if fb is None:
                c.error = NoInput(f"input '{gin}': its chain producer failed and its channel has no message")
                return
            x = fb.data
            if meta is not None:
                name, row = meta
                c.inputs[name].copy_(row)
        c.inputs[gin] = x
    ex = c.executor
    steps = c.steps
    if c.refs:
        wait_ready(ex, c.refs)   # inputs filled on a stream (ingress copies): the executor's stream waits
    _local.comp = c
    try:
        t0 = measure()
        for _ in ex.steps(c.inputs):
            t1 = measure()
            steps.append(t1 - t0)
            t0 = t1
        if steps:
            steps[-1] += measure() - t0   # the executor's tail (job count, capture) belongs to the last step
    except Exception as e:  # an op that raises ends its job: booked where the job's result is read
        c.error = e
        return
    finally:
        _local.comp = None
    views = ex.outputs
    outs = c.outs
    for i, (gout, ch) in enumerate(c.writers):
        v = views[gout]
        slot = outs[i]
        try:
            if in_driver:
                outs[i] = ch.fill(slot, v)
            elif slot.index >= 0 and ch.spec is not None and ch.fits(v):
                ch.fill(slot, v)
            else:   # the channel's slots may still be (re)allocated: the driver fills from a copy
                if c.held is None:
                    c.held = [None] * len(outs)
                c.held[i] = _copy(v)
        except Exception as e:  # a contract violation at the channel: raised in the driver, as serially
            c.fill_error = e
            return


class ComputePool:
    """N threads computing in submission order: N pool threads (N > 1), or the driver alone (N = 1).

    The driver computes too, but only what it waits for: when it needs a result that no thread has
    started, it runs that computation (or one it depends on) itself; if a thread has, it sleeps. So
    with N = 1 every job is computed in the driver, lazily, where its result is first read; with
    ``eager`` at once when submitted.
    A computation runs once those it depends on are done (its task's previous one, the chain
    members it reads)."""

    def __init__(self, threads: int, measure: Callable[[], int], eager: bool = False) -> None:
        self.measure = measure
        self.eager = eager
        self.cond = threading.Condition()
        self.ready: deque[Computation] = deque()
        self.closed = False
        self.busy_ns = 0    # thread time spent computing (all threads, the driver's share included)
        self.driver_busy_ns = 0   # the driver's share of it
        self.driver = threading.get_ident()   # the pool is built in the thread that drives the runtime
        self.waited_ns = 0  # wall time the driver spent waiting for a result another thread computed
        # One thread: the driver computes every job itself. More: that many pool threads, and the driver
        # computes only a result it waits for that no thread has taken.
        self.threads = [threading.Thread(target=self._loop, name=f"rt-compute-{i}", daemon=True)
                        for i in range(threads if threads > 1 else 0)]
        for t in self.threads:
            t.start()

    def submit(self, c: Computation, after: list[Computation]) -> None:
        """Queue ``c``; it runs once every computation in ``after`` is done."""
        if not self.threads:   # the driver alone computes: no thread to lock out or wake
            self._queue(c, after)
        else:
            with self.cond:
                self._queue(c, after)
                if not c.waiting:
                    self.cond.notify()
        if self.eager:
            self.wait(c)

    def _queue(self, c: Computation, after: list[Computation]) -> None:
        c.after = after
        for a in after:
            if not a.done:
                a.dependents.append(c)
                c.waiting += 1
        if not c.waiting:
            self.ready.append(c)

    def cancel(self, c: Computation) -> None:
        """``c`` will not be needed: if no thread took it yet, it is done without running."""
        with self.cond:
            c.cancelled = True
            if c in self.ready:
                self.ready.remove(c)
                self._done(c)

    def wait(self, c: Computation) -> None:
        """Until ``c`` is done: compute it (or what it waits for) here if no thread took it, else sleep.

        Never unrelated queued work: the driver would come back to ``c`` only at that work's end, ~8 ms
        after ``c`` was ready on average, booking nothing meanwhile (at ``--parallel 2`` the pool thread
        was idle 45 % of the time). The wall time fell by 30 % without it."""
        if not self.threads:   # the driver alone: what ``c`` needs is queued here, in dependency order
            while not c.done:
                mine = self._needed(c)
                self.ready.remove(mine)   # type: ignore[arg-type]
                self._run(mine)   # type: ignore[arg-type]
            return
        t0 = 0
        while not c.done:
            with self.cond:
                if c.done:
                    break
                # what it needs first; else, while another thread computes that, any queued work
                mine = self._needed(c)
                if mine is None:
                    if not t0:
                        t0 = time.perf_counter_ns()
                    self.cond.wait()
                    continue
                self.ready.remove(mine)
            self._run(mine)
        if t0:
            self.waited_ns += time.perf_counter_ns() - t0

    def _needed(self, c: Computation) -> Computation | None:
        """``c`` or a computation it waits for that is ready and not taken (under the lock)."""
        if c in self.ready:
            return c
        for a in c.after:
            if not a.done:
                n = self._needed(a)
                if n is not None:
                    return n
        return None

    def _run(self, c: Computation) -> None:
        t0 = time.thread_time_ns()
        try:
            compute(c, self.measure, self.eager)   # eager: the driver alone computes, and may fill any slot
        except BaseException as e:  # noqa: BLE001 - never leave the driver waiting for a dead thread
            c.error = c.error or e
        dt = time.thread_time_ns() - t0
        if not self.threads:   # the driver alone: no other thread reads these
            self.busy_ns += dt
            self.driver_busy_ns += dt
            self._done(c)
            return
        with self.cond:
            self.busy_ns += dt
            if threading.get_ident() == self.driver:
                self.driver_busy_ns += dt
            self._done(c)

    def _done(self, c: Computation) -> None:
        c.done = True
        for d in c.dependents:
            d.waiting -= 1
            if not d.waiting:
                self.ready.append(d)
        c.dependents = []
        c.after = []
        if self.threads:
            self.cond.notify_all()

    def _loop(self) -> None:
        cond, ready = self.cond, self.ready
        while True:
            with cond:
                while not ready and not self.closed:
                    cond.wait()
                if not ready:
                    return
                c = ready.popleft()
            self._run(c)

    def close(self, timeout: float = 5.0) -> None:
        """Finish what is queued (here and on the threads) and stop the threads."""
        while True:
            with self.cond:
                if not self.ready:
                    break
                c = self.ready.popleft()
            self._run(c)
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        for t in self.threads:
            t.join(timeout)
