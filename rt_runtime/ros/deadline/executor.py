"""DeadlineExecutor: an ``rclpy`` executor that runs existing nodes' callbacks as jobs, most urgent first.

    ex = DeadlineExecutor()                 # or DeadlineExecutor("callbacks.yaml"), workers=2, policy="rm"
    rclpy.spin(node, executor=ex)           # or ex.add_node(node); ex.spin(); ex.shutdown()

The wait set, the taking of data and the callback groups are rclpy's own (``Executor.
_wait_for_ready_callbacks`` and the handlers its ``_make_handler`` builds), so every kind of entity
behaves as under rclpy's executors. What changes is the order: each ready entity's handler becomes a
``Job`` (release, deadline, budget; ``jobs.py``) in a ``ReadyQueue`` keyed by the policy, and the most
urgent job whose callback group is free runs next. The executor waits again once the queued jobs have
run, as rclpy's executors do (a wait costs milliseconds of Python on a large graph), or, with jobs
still queued, once the last wait is ``poll`` old (default 100 ms; timeout 0), so that a more urgent
message overtakes queued jobs and none waits unseen for long; between waits it checks the timers
directly (one C call each), so a timer's job is released at its expiry, and with one worker a
subscription whose job took a message has its next one taken at once (``_take_ahead``: a burst costs
one wait, not one per message). A job is judged when it
returns (``jobs.judge``): a miss or an overrun is counted, traced, and its reaction (skip or degrade)
applied to the callback's next release; ``abort`` drops a job not started by its deadline.

``workers: 1`` runs callbacks in the spinning thread (where a SingleThreadedExecutor is used); N > 1
runs them on N threads while the spinning thread waits, with the same ordering, mutually exclusive
groups never at once (a group is held from pick to return, besides rclpy's own check).
"""
from __future__ import annotations

import inspect
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional, Union

from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import (ConditionReachedException, Executor, ExternalShutdownException, ShutdownException,
                             TimeoutException, TimeoutObject)
from rclpy.subscription import Subscription
from rclpy.task import Future, Task

from ...sched.events import EventKind as K
from ...sched.policy import as_policy
from .config import ExecutorConfig, load_config
from .book import Book
from .entities import (awaits_pending, drop, due_timers, read_graph, realtime_worker, run_direct, take_for,
                       take_message)
from .jobs import Callback, Job, ReadyQueue, judge, late_at_start, rank
from .record import trace_abort, trace_end
from .waitset import wait_ready

_DRAIN_NS = 1_000_000_000   # the trace ring is drained at most once a second, before the executor waits
_Timeout = Optional[Union[float, TimeoutObject]]


class DeadlineExecutor(Executor):
    """An rclpy executor scheduling callbacks by deadline (EDF) or fixed priority (RM, DM, FP)."""

    def __init__(self, config: str | Path | dict[str, Any] | ExecutorConfig | None = None, *,
                 workers: int | None = None, policy: str | None = None, trace: str | Path | None = None,
                 context: Any = None) -> None:
        super().__init__(context=context)
        self.config = load_config(config)
        self.policy = as_policy(policy or self.config.policy)
        self.workers = int(workers or self.config.workers)
        self._queue = ReadyQueue(self.policy)
        self._cond = threading.Condition()
        self._book = Book(self.config, self._ranks_changed)   # entity -> its Callback, its timing's layers
        self._queued: dict[Task, Job] = {}             # handlers released and not yet run
        self._started: dict[Task, Job] = {}            # handlers run once and suspended (a coroutine awaiting)
        self._busy: set[int] = set()                   # mutually exclusive groups held by a running job
        self._blocked = False                          # the last pick found jobs, none of them eligible
        self._poll_ns = self.config.poll_ns            # with jobs queued, wait (timeout 0) when the last is this old
        self._last_wait = 0
        self._errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []
        self._stop = False
        self._t0 = time.monotonic_ns()
        self._t_spin: int | None = None   # the first spin: nothing is released earlier (a timer made before it)
        path = trace or self.config.trace
        self._ring = self._writer = None
        if path:
            from ...trace import TraceRing, TraceWriter
            self._ring = TraceRing()
            self._writer = TraceWriter(path, self._ring)
        self._emit = self._ring.emit if self._ring is not None else None
        self._last_drain = self._t0
        self._diag = None
        if self.config.diagnostics_ns:
            from .diagnostics import DiagnosticsPublisher
            self._diag = DiagnosticsPublisher(self, self.config.diagnostics_ns / 1e9)
            self.add_node(self._diag.node)

    # rclpy's wait loop, cheaper (waitset.py): the same yields, exceptions and callback-group checks
    _wait_for_ready_callbacks = wait_ready

    # --- the callbacks and their jobs ---------------------------------------------------------------------
    def callbacks(self) -> dict[str, Callback]:
        """Every callback seen so far, by name (``node/timer:100ms``, ``node/sub:/topic``, ...)."""
        with self._cond:
            return {c.name: c for c in self._book.callbacks.values()}

    def stats(self) -> dict[str, dict[str, int]]:
        """Per-callback counts: released, missed, overruns, skipped, aborted, degraded, errors."""
        return {n: c.stats() for n, c in sorted(self.callbacks().items())}

    def _ranks_changed(self) -> None:
        """A callback was booked or its timing changed: RM/DM/FP rank again (lock held, or taken here)."""
        if self.policy.fixed:
            with self._cond:
                rank(self.policy, self._book.callbacks.values())
                self._queue.rekey()

    def add_node(self, node: Any) -> bool:
        """Manage ``node``: its callbacks are booked now (a bad ``rt.*`` parameter is one line here)."""
        added = super().add_node(node)
        if added:
            try:
                with self._cond:
                    self._book.add_node(node)
            except Exception:
                super().remove_node(node)   # refused whole: the node is not half managed
                raise
        return added

    def _release(self, entity: Any, node: Any) -> Job:
        """A new job of the entity's callback, released now (a timer's: at its expiry); lock held."""
        now = time.monotonic_ns()
        cb = self._book.get(entity, node)
        if cb.graph_due(now) and read_graph(cb, entity, node, now):
            self._ranks_changed()   # the advertised period changed
        release = now
        if cb.kind == "timer":   # the timer's expiry, not when the wait noticed it
            due = entity.time_until_next_call()
            if due is not None and due < 0:
                release = max(now + due, self._t_spin or now)
        job = cb.release(release, cb.kind == "subscription")
        job.entity, job.node = entity, node
        return job

    def _queue_job(self, job: Job) -> None:
        with self._cond:
            if job.handler is not None:
                self._queued[job.handler] = job
            self._queue.push(job)
            self._cond.notify()
        if self._emit is not None:
            self._emit(K.RELEASE, job.release_ns - self._t0, job.cb.name, job.index, 0, int(job.message))

    def _make_handler(self, entity: Any, node: Any, take: Callable[[Any], Any]) -> Task:
        """rclpy's handler for a ready entity, released as a job (rclpy calls this from the wait loop)."""
        with self._cond:
            job = self._release(entity, node)
        job.handler = super()._make_handler(entity, node, partial(take_for, job, take))
        self._queue_job(job)
        return job.handler

    def _take_subscription(self, sub: Subscription) -> Any:
        """rclpy's take, plus the middleware's receive time (the arrival a derived deadline is measured on)."""
        return take_message(sub, self._book.callbacks.get(sub))

    def _eligible(self, job: Job) -> bool:
        g = job.entity.callback_group if job.entity is not None else None
        if g is None or isinstance(g, ReentrantCallbackGroup):
            return True
        # a resumed coroutine holds its group in rclpy's books already (until it returns)
        return id(g) not in self._busy and (job.action == "cont" or g.can_execute(job.entity))

    def _pick(self) -> Job | None:
        """The most urgent job that may run now, its group held (lock held by the caller)."""
        job = self._queue.pop(self._eligible)
        self._blocked = job is None and len(self._queue) > 0
        if job is None:
            return None
        self._queued.pop(job.handler, None)
        g = job.entity.callback_group if job.entity is not None else None
        if g is not None and not isinstance(g, ReentrantCallbackGroup):
            self._busy.add(id(g))
        return job

    def _run(self, job: Job, worker: int) -> None:
        """Run one job on this thread, time it, judge it, trace it."""
        cb, t0 = job.cb, time.monotonic_ns()
        emit = self._emit if cb.kind != "task" else None   # tasks are not callbacks: untraced
        handler = job.handler
        cont = job.action == "cont"
        if not cont and job.action == "none" and late_at_start(job, t0) and cb.kind in ("timer", "subscription"):
            job.action = "abort"   # its data is taken and dropped: the callback does not run
            cb.aborted += 1
            cb.missed += 1
            if emit is not None:
                trace_abort(emit, t0 - self._t0, job)
        elif emit is not None and not cont:
            emit(K.START, t0 - self._t0, cb.name, job.index, worker, int(job.action == "degrade"))
            emit(K.OP_START, t0 - self._t0, cb.name, job.index, 0, worker)
        exc: BaseException | None = None
        try:
            if handler is not None:
                handler()
            else:
                run_direct(job)
        except Exception as e:  # noqa: BLE001 - a direct job's callback raised: judged, then raised as rclpy's do
            exc = e
        finally:
            t1 = time.monotonic_ns()
            g = job.entity.callback_group if job.entity is not None else None
            with self._cond:
                if g is not None:
                    self._busy.discard(id(g))
                if handler is not None and not handler.done():
                    self._started[handler] = job
                elif handler is not None:
                    self._started.pop(handler, None)
                verdict = None if cont or job.action in ("skip", "abort") else judge(job, t1, t1 - t0)
                self._cond.notify_all()
        if handler is not None and handler.done():
            exc = handler.exception()
        if exc is not None:
            cb.errors += 1
        if verdict is not None and emit is not None:
            trace_end(emit, t1 - self._t0, job, t1 - t0, worker, verdict)
        if exc is not None:
            raise exc

    # --- waiting ------------------------------------------------------------------------------------------
    def _gather(self, timeout_sec: _Timeout, condition: Callable[[], bool]) -> None:
        """One pass of rclpy's wait loop: every ready entity released as a job (in ``_make_handler``);
        tasks (``create_task``, a future's done callbacks) and suspended coroutines queued as well."""
        if self._writer is not None and timeout_sec != 0:
            now = time.monotonic_ns()
            if now - self._last_drain > _DRAIN_NS:
                self._last_drain = now
                self._writer.drain()
        gen = self._wait_for_ready_callbacks(timeout_sec, None, condition)
        self._last_wait = time.monotonic_ns()
        try:
            for handler, entity, node in gen:
                with self._cond:
                    if handler in self._queued:
                        continue
                    job = self._started.get(handler)
                    if job is not None and awaits_pending(handler):
                        continue   # resuming it would only suspend it again: it does not hold others back
                    if job is not None:   # a coroutine resumed: its job goes on, under its own key
                        cont = Job(job.cb, job.index, job.release_ns, job.deadline_ns, job.message, "cont",
                                   handler=handler, entity=entity, node=node)
                        self._queued[handler] = cont
                        self._queue.push(cont)
                        self._cond.notify()
                        continue
                    cb = self._book.get(entity, node)
                    job = cb.release(time.monotonic_ns(), False)
                    job.handler, job.entity, job.node = handler, entity, node
                    self._queued[handler] = job
                    self._queue.push(job)
                    self._cond.notify()
                break   # a new task runs before the executor waits (as under rclpy's executors)
        except (TimeoutException, ShutdownException, ConditionReachedException, ExternalShutdownException):
            pass
        finally:
            gen.close()

    def _spin_once_impl(self, timeout_sec: _Timeout = None, condition: Callable[[], bool] = lambda: False) -> None:
        self._raise_worker_error()
        if self._t_spin is None:
            self._t_spin = time.monotonic_ns()
        if self.workers > 1:
            self._start_workers()
            self._gather(timeout_sec, condition)
            self._raise_worker_error()
            return
        with self._cond:
            waiting = len(self._queue) > 0 and not self._blocked
        if not waiting:
            self._gather(timeout_sec, condition)
        elif time.monotonic_ns() - self._last_wait >= self._poll_ns:
            self._gather(0, condition)   # a more urgent arrival may overtake the queued jobs
        elif condition():
            return
        else:
            self._release_due_timers()
        with self._cond:
            job = self._pick()
        if job is not None:
            self._run(job, 0)
            if job.took and job.cb.kind == "subscription" and not self._is_shutdown:
                self._take_ahead(job)

    def _take_ahead(self, job: Job) -> None:
        """After a subscription's job took a message, take its next one now if the middleware holds one (one C
        call, None when empty) and release it as a job, pre-taken: a burst is drained without a wait per
        message (a wait rebuilds the wait set in Python; docs/BENCHMARKS.md). A plain callback's job then
        has no rclpy handler (``_direct``); a coroutine's gets one. One worker only: with more, the
        spinning thread may be waiting on the same subscription meanwhile."""
        sub = job.entity
        coro = take_message(sub, job.cb)
        if coro is None:
            return
        if inspect.iscoroutinefunction(sub.callback):
            self._make_handler(sub, job.node, lambda _entity: coro)
            return
        with self._cond:
            nxt = self._release(sub, job.node)
        nxt.args = coro.args
        sub._executor_event = True   # out of the wait set while its message is queued (as a handler's entity)
        self._queue_job(nxt)

    def _release_due_timers(self) -> None:
        """Release every timer that has expired since the last wait, without a wait (one C call a timer): a
        periodic job is released at its expiry and overtakes the queued, less urgent ones, while
        subscriptions wait for the next wait (the costly part; docs/BENCHMARKS.md)."""
        for tmr, node in due_timers(self.get_nodes()):
            self._make_handler(tmr, node, self._take_timer)

    def spin_once(self, timeout_sec: Optional[float] = None) -> None:
        """Wait for work (at most ``timeout_sec``) and run the most urgent ready callback."""
        self._spin_once_impl(timeout_sec)

    def _spin_once_until_future_complete(self, future: Future, timeout_sec: _Timeout = None) -> None:
        self._spin_once_impl(timeout_sec, future.done)

    def spin_once_until_future_complete(self, future: Future, timeout_sec: _Timeout = None) -> None:
        """As ``spin_once``, returning early once ``future`` is done."""
        future.add_done_callback(lambda _: self.wake())
        self._spin_once_until_future_complete(future, timeout_sec)

    # --- workers ------------------------------------------------------------------------------------------
    def _start_workers(self) -> None:
        if self._threads:
            return
        for w in range(self.workers):
            t = threading.Thread(target=self._worker, args=(w,), name=f"rt-deadline-{w}", daemon=True)
            self._threads.append(t)
            t.start()

    def _worker(self, w: int) -> None:
        realtime_worker(self.config.realtime, w)
        while True:
            with self._cond:
                job = None if self._stop else self._pick()
                while job is None and not self._stop:
                    self._cond.wait()
                    job = self._pick()
                if job is None:
                    return
            try:
                self._run(job, w)
            except BaseException as e:  # noqa: BLE001 - the spinning thread raises it, as rclpy's executors do
                with self._cond:
                    self._errors.append(e)
                self.wake()

    def _raise_worker_error(self) -> None:
        if self._errors:
            with self._cond:
                err, self._errors = self._errors[0], []
            raise err

    # --- nodes and shutdown -------------------------------------------------------------------------------
    def remove_node(self, node: Any) -> None:
        """Stop managing ``node``: its queued jobs are dropped and its entities waited on again elsewhere."""
        super().remove_node(node)
        with self._cond:
            self._book.remove_node(node)
            for job in self._queue.remove(lambda j: j.node is not node):
                self._queued.pop(job.handler, None)
                drop(job)

    def shutdown(self, timeout_sec: Optional[float] = None) -> bool:
        """Stop: wait for running callbacks, stop the workers, write the trace (if one was asked for)."""
        ok = super().shutdown(timeout_sec)
        with self._cond:
            self._stop = True
            for job in self._queue.remove(lambda j: False):
                drop(job)
            self._queued.clear()
            self._cond.notify_all()
        me = threading.current_thread()
        for t in self._threads:
            if t is not me:
                t.join(timeout_sec if timeout_sec is not None and timeout_sec >= 0 else None)
        self._threads = []
        if self._diag is not None:
            self._diag.destroy()
            self._diag = None
        self.write_trace()
        return ok

    def write_trace(self) -> Path | None:
        """Write the .rttrace now (shutdown does); None without a trace path."""
        if self._writer is None:
            return None
        from .record import trace_meta
        with self._cond:
            described = self._book.described()
        self._writer.meta = trace_meta(self, described)
        path = self._writer.close()
        self._writer = None
        self._emit = None
        return path
