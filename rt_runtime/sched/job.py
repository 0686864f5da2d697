"""The runtime's view of a task (TaskState) and of one of its jobs (RunJob): plain data."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from ..core.task import Job

if TYPE_CHECKING:
    from ..exec.executor import GraphExecutor
    from .binding import TaskBinding
    from .channel import Channel, Slot

# Job states. A job is READY (queued, not started), RUNNING (a worker's current job), PREEMPTED
# (queued, started), FINISHED (done, waiting for its deadline to publish), DONE or ABORTED; a chain
# member's job is WAITING (inputs snapshotted, not yet released) until its predecessor finishes.
READY, RUNNING, PREEMPTED, FINISHED, DONE, ABORTED, WAITING = range(7)
STATE_NAMES = ("ready", "running", "preempted", "finished", "done", "aborted", "waiting")

COUNTERS = ("released", "started", "finished", "published", "missed", "overruns", "skipped", "aborted",
            "degraded", "recovered", "dropped_releases", "no_input", "preemptions", "errors", "stalls",
            "taken", "max_response_ns", "max_exec_ns")


class Counters:
    """A task's counters (``COUNTERS``, in that order in ``as_dict``): written by the scheduler's modules
    where the event they count happens, read through ``TaskState.stats``."""

    __slots__ = COUNTERS

    def __init__(self) -> None:
        for name in COUNTERS:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        """The counters by name, in ``COUNTERS`` order."""
        return {name: getattr(self, name) for name in COUNTERS}


class TaskState:
    """A task as the scheduler runs it: wiring, executors, release bookkeeping, mode and counters."""

    def __init__(self, binding: "TaskBinding", prio: int, worker: int,
                 executors: "list[GraphExecutor | None]") -> None:
        t = binding.task
        self.binding = binding
        self.task = t
        self.name = t.name
        self.prio = prio
        self.worker = worker
        self.executors = executors           # [primary, fallback or None]
        self.period = t.period_ns
        self.deadline = t.deadline
        self.wcet = t.wcet_ns
        self.offset = t.offset_ns
        self.triggered = t.is_triggered
        self.on_miss = binding.on_miss
        self.on_overrun = binding.on_overrun
        self.on_finish = binding.publish.value == "on_finish"
        self.group = binding.group
        self.recover_after = binding.recover_after
        self.readers: list[tuple[str, "Channel", int]] = []     # (graph input, channel, reader id)
        self.writers: list[tuple[str, "Channel"]] = []          # (graph output, channel)
        self.trigger: tuple["Channel", int] | None = None       # reader on the trigger channel
        self.trigger_is_input = False
        self.next_index = 0
        self.last_release: int | None = None
        self.pending_release = False
        self.active = 0                      # released and neither finished nor aborted
        self.mode = 0                        # 0: primary graph, 1: fallback
        self.clean = 0                       # consecutive clean jobs (for recovery)
        self.c = Counters()                  # exposed by stats()
        self.safety_state: int | None = None  # the safety supervisor's state, for the task it supervises (safety.monitor)
        self.chain: Any = None               # the run-time chain it belongs to (sched.chains.ChainState)
        self.chain_pos = 0                   # its place in that chain (0: the head)
        self.chain_in: list[tuple] = []      # (graph input, channel, reader, member, output index) handed over
        self.chain_skip: frozenset[str] = frozenset()   # those graph inputs (not snapshotted at release)
        self.chain_timeout = 0               # released on its own after this long without a chain release
        self.fallback_alone = False          # its fallback reads nothing from earlier chain members
        self.own_period = 0                  # a chain member's period of its own (0: none, e.g. triggered)
        self.stream = False                  # a reserved release of its fallback is on the timeline (sched.chains)
        self.meta: Any = None                # message metadata rows for ``x.meta`` inputs (sched.meta.MetaPool)
        self.join: Any = binding.join        # released by several channels (sched.binding.Join)
        self.join_readers: list[tuple["Channel", int]] = []   # its input readers on the join's channels
        self.stamp_from: tuple["Channel", ...] = ()   # input channels whose stamp its outputs carry
        self.on = -1                         # the worker running (or holding preempted) a started job of it
        self.defaults: dict[str, Any] = {}   # optional input -> what a job reads before its first message
        self.deferred = False                # computed on the parallel pool, booked without running (sched.parallel)

    def stats(self) -> dict[str, Any]:
        """Counters plus the current mode."""
        out: dict[str, Any] = self.c.as_dict()
        if self.safety_state is not None:
            out["safety_state"] = self.safety_state
        out["mode"] = "fallback" if self.mode else "primary"
        out["worker"] = self.worker
        return out

    def __repr__(self) -> str:
        return f"TaskState({self.name!r}, prio={self.prio}, worker={self.worker}, mode={self.mode})"


class RunJob(Job):
    """A released job: the core ``Job`` plus its snapshot, executor, progress and fault flags."""

    # Defaults live on the class: a release sets only what differs (this runs once per job).
    start_ns: int | None = None
    finish_ns: int | None = None
    missed = False
    aborted = False
    state = READY
    gen: Iterator[int] | None = None
    executor: "GraphExecutor | None" = None
    fallback = 0
    inputs: dict[str, Any] = {}            # replaced by a fresh dict when the task has inputs
    pins: list[tuple["Channel", "Slot"]] = []   # replaced before any append
    outs: list["Slot"] = []                # replaced when the task has outputs
    exec_ns = 0
    ops_done = 0
    last_op = 0
    worker = -1
    overrun = False
    drop = False          # skip: the output will not be published
    abort_req = False     # abort at the next op boundary
    late_ok = False       # reaction "none" to a miss: publish late, at finish
    chain_run: Any = None  # the chain instance the job belongs to (sched.chains.ChainRun)
    meta_block = 0         # its rows in its task's MetaPool
    stamp_ns = -1          # the instant its outputs describe (sched.meta: the trigger's stamp, else -1: release)
    comp: Any = None       # its computation on the parallel pool (sched.parallel.Computation)
    handovers: Any = ()    # chain inputs its computation resolves once their producers ran (sched.pool.HandOver)
    reads: Any = ()        # (input, slot) snapshotted while published on a bet, not yet computed (sched.optimistic)

    def __init__(self, ts: TaskState, index: int, release_ns: int, deadline_ns: int, pkey: tuple) -> None:
        self.task = ts.task
        self.index = index
        self.release_ns = release_ns
        self.deadline_ns = deadline_ns
        self.ts = ts
        self.pkey = pkey

    def __repr__(self) -> str:
        return f"RunJob({self.ts.name}#{self.index}, r={self.release_ns}, d={self.deadline_ns}, " \
               f"{STATE_NAMES[self.state]})"
