"""Runtime: owns the tasks, channels, clock, policy and workers, and runs cycles (docs/CYCLE.md).

    rt = Runtime([TaskBinding(task, graph, inputs={"points": "/lidar"}, outputs={"objs": "/objects"})],
                 policy="edf", clock=VirtualClock())
    rt.push("/lidar", t_ns, points)      # ingress: visible at t_ns (a bag reader, a ROS callback)
    rt.run_until(1_000_000_000)          # releases, snapshots, runs, publishes, in time order
    rt.stats()["perception"]["missed"]

Modes: ``threaded=False`` (the default on one worker) runs everything in the calling thread:
deterministic and thread-free on a VirtualClock, any number of simulated workers; one worker on a
WallClock. ``threaded=True`` (the default with several workers on a WallClock) runs one thread per
worker plus a watchdog thread, with the calling thread as timekeeper. Under LET both give the same
outputs as long as no job misses its deadline.

``parallel=N`` (a VirtualClock under budget timing) books jobs on the virtual clock and computes them
on N threads, settling each at its publish (``sched.parallel``); with ``optimistic=True`` as well it
publishes a job not yet computed on a bet, and a lost bet raises ``Mispredicted`` (``sched.optimistic``).

On a WallClock, logical time 0 is the start of the first ``run_until`` (threads started and set up
by then), unless the clock was given a fixed epoch; ``push`` timestamps count from there.
"""
from __future__ import annotations

import dataclasses
import functools
import gc
import math
import os
import sys
import threading
import time
import warnings
from typing import Any, Iterable, Mapping, Sequence

from ..core.chain import Chain, apply_chains
from ..core.task import Task
from ..device.base import Device, asynchronous
from ..exec.executor import GraphExecutor
from ..exec.warmup import spec_zeros
from .binding import CostModel, TaskBinding, measured_cost
from .channel import Channel, ChannelConfig, ChannelPolicy
from .clock import Clock, VirtualClock, WallClock
from .dispatch import Worker
from .events import EventKind, EventSink, NullSink
from .inline import run_inline
from .job import TaskState
from .let import flush_egress
from .meta import MetaPool, meta_inputs
from .optimistic import BETS_AHEAD
from .policy import Policy, as_policy, partition
from .scheduler import Egress, Scheduler
from .threads import Crew, ThreadPolicy, make_realtime, run_threaded
from .watchdog import StallHook


_INF = 1 << 62


def freeze_heap() -> None:
    """Move every object that exists into the permanent generation (O(1): no collection).

    Set-up (torch, the graphs, rclpy) leaves hundreds of thousands of objects; a full collection
    traverses them all and stalls every thread for tens of ms at a time no schedule knows of. Frozen,
    they are never traversed again: a collection in steady state sees only what the run made. No
    collection first: in a process with a large heap (a test session) that took most of a second
    between a fixed epoch and the first release; a caller with time before its clock starts (replay)
    collects first."""
    gc.freeze()


class Runtime:
    """A scheduler with its clock and workers: ``push`` ingress, ``run_until`` a time, read ``stats``."""

    def __init__(self, tasks: Sequence[TaskBinding | Task], *, policy: Policy | str = "edf",
                 clock: Clock | None = None, workers: int = 1, threaded: bool | None = None,
                 channels: Iterable[ChannelConfig | Channel] = (), cost: CostModel | None = None,
                 sink: EventSink | None = None, egress: Egress | None = None, device: Device | None = None,
                 realtime: bool | None = None, cpus: Sequence[int] | None = None, rt_priority: int = 50,
                 max_active: int = 2, stall_after_ns: int | None = None, on_stall: StallHook | None = None,
                 check_inputs: bool = True, capture: bool = False, chains: Sequence[Chain] = (),
                 parallel: int | None = None, adopt_ingress: bool = False, steal: bool = False,
                 optimistic: bool = False) -> None:
        self.clock: Any = clock if clock is not None else VirtualClock()
        virtual = self.clock.virtual
        self.threaded = (workers > 1 and not virtual) if threaded is None else threaded
        if self.threaded and virtual:
            raise ValueError("threaded workers need a WallClock; a VirtualClock simulates workers inline")
        if not self.threaded and not virtual and workers > 1:
            raise ValueError("several workers on a WallClock need threaded=True")
        if max_active < 1:
            raise ValueError(f"max_active must be >= 1, found {max_active}")
        self.realtime = (not virtual) if realtime is None else realtime
        self.rt_priority = rt_priority
        self.cost: CostModel = cost if cost is not None else measured_cost
        self.stall_after_ns = stall_after_ns
        self.cpus = sorted(cpus) if cpus is not None else sorted(os.sched_getaffinity(0))
        self._started = False
        self._closed = False
        self._crew: Crew | None = None   # the threads of a threaded run, once started
        self._driver: int | None = None

        bindings = [b if isinstance(b, TaskBinding) else TaskBinding(b) for b in tasks]
        if not virtual and not self.threaded and any(b.speculate is not None for b in bindings):
            spec = sorted(b.name for b in bindings if b.speculate is not None)
            warnings.warn(f"rt_runtime.sched: speculation runs on the virtual clock or in worker threads; {spec} "
                          f"will not speculate in the calling thread on the wall clock (threaded=False)",
                          RuntimeWarning, stacklevel=2)
            bindings = [dataclasses.replace(b, speculate=None) if b.speculate is not None else b for b in bindings]
        names = [b.name for b in bindings]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"task names must be unique; repeated: {dup}")
        self.policy = as_policy(policy)
        chains = [c for c in chains if c.deadline_ns is not None]
        periods: dict[str, int] = {}
        if chains:   # members run with their share of the chain's deadline and its head's rate (core/chain.py)
            spec = sorted(n for c in chains for n in c.tasks if any(b.name == n and b.speculate for b in bindings))
            if spec:
                raise ValueError(f"tasks {spec} speculate: a chain member's next release is not known in advance; "
                                 f"take them out of their chain or turn speculation off")
            # A member with a period of its own runs on its own when its chain leaves it idle for 1.5 periods,
            # and on that period's grid while degraded (sched.chains, "reserved").
            periods = {b.name: b.task.period_ns for b in bindings if b.task.trigger is None}
            run_tasks = {t.name: t for t in apply_chains([b.task for b in bindings], chains, self.policy.name)}
            bindings = [b if run_tasks[b.name] is b.task else dataclasses.replace(b, task=run_tasks[b.name])
                        for b in bindings]
        task_list = [b.task for b in bindings]
        prios = self.policy.priorities(task_list)
        where = partition(task_list, workers, {b.name: b.worker for b in bindings if b.worker is not None},
                          together=[c.tasks for c in chains])
        self.channels = self._build_channels(channels, bindings)

        states = []
        urgency = self.policy.stream_urgency(task_list)   # device streams: the more urgent task, the higher level
        for b in bindings:
            u = urgency[b.name]
            make = b.executor or (lambda b_, dev, **kw: GraphExecutor(b_.graph, dev, **kw))   # e.g. time redundancy
            execs = [make(b, device, owner=b.name, check_inputs=check_inputs, capture=capture, urgency=u),
                     GraphExecutor(b.fallback, device, owner=f"{b.name}/fallback", check_inputs=check_inputs,
                                   capture=capture, urgency=u) if b.fallback is not None else None]
            ts = TaskState(b, prios[b.name], where[b.name], execs)
            for gin, chname in sorted(b.inputs.items()):
                ch = self.channels[chname]
                rid = ch.add_reader(f"{b.name}.{gin}")
                ts.readers.append((gin, ch, rid))
                if b.join is not None:
                    if chname in b.join.channels and all(c.name != chname for c, _ in ts.join_readers):
                        ts.join_readers.append((ch, rid))
                elif chname == b.task.trigger and ts.trigger is None:
                    ts.trigger, ts.trigger_is_input = (ch, rid), True
            # An optional input before its first message: zeros, empty where a dim is symbolic (nothing yet).
            ts.defaults = {spec.name: spec_zeros(spec, spec.device, symbolic=0)
                           for spec in b.graph.inputs if spec.name in b.optional}   # type: ignore[union-attr]
            if b.task.trigger is not None and ts.trigger is None and b.join is None:
                ch = self.channels[b.task.trigger]
                ts.trigger = (ch, ch.add_reader(f"{b.name}.trigger"))
            ts.writers = [(gout, self.channels[chname]) for gout, chname in sorted(b.outputs.items())]
            ts.stamp_from = tuple(c for c, _ in ts.join_readers) or (
                (ts.trigger[0],) if ts.trigger is not None and ts.trigger_is_input else ())
            metas = {**meta_inputs(s.name for s in b.graph.inputs),   # type: ignore[union-attr]
                     **(meta_inputs(s.name for s in b.fallback.inputs) if b.fallback is not None else {})}
            if metas:   # one block of rows per job that can be alive at once (and one being filled)
                ts.meta = MetaPool(metas, max_active + 2)
            states.append(ts)
        # Budget timing (a machine-independent cost model on a VirtualClock): the schedule is logical.
        self.logical = bool(virtual and getattr(self.cost, "logical", False))
        if parallel is not None and (not self.logical or parallel < 1):
            raise ValueError(f"parallel={parallel}: computing jobs on a pool of threads needs a logical schedule "
                             "(a VirtualClock and budget timing, sched.budget.BudgetCost) and at least one thread")
        self._reserve(states, max_active, parallel is not None, BETS_AHEAD if optimistic else 0)
        self.sched = Scheduler(states, self.channels, self.policy, sink if sink is not None else NullSink(),
                               egress, max_active, logical=self.logical, chains=chains,
                               chain_periods=periods)
        self.sched.adopt = adopt_ingress
        self.sched.steal = steal and workers > 1   # work-conserving dispatch (sched/dispatch.py)
        if asynchronous(device):   # hand-offs between tasks ordered by events on the device's streams
            self.sched.async_device = True
            for ch in self.channels.values():
                ch.bind_device(device)
        self.sched.watchdog.on_stall = on_stall
        for ts in states:   # executors that report comparisons (time redundancy): traced as their job's COMPARE
            for ex in ts.executors:
                if hasattr(ex, "attach"):
                    ex.attach(ts.name, functools.partial(self._compared, ts.name))
        self.sched.workers = [Worker(i, self.cpus[i % len(self.cpus)] if self.cpus else None)
                              for i in range(workers)]
        if parallel is not None:   # after the speculators are bound: a speculating stack computes in the driver
            from .optimistic import OptimisticCommit
            from .parallel import ParallelCommit

            self.sched.use_commit((OptimisticCommit if optimistic else ParallelCommit)(
                self.sched, parallel, measure=getattr(self.cost, "measure", time.thread_time_ns)))
        if not virtual:
            self.sched.wake = threading.Event()
        if self.threaded and isinstance(self.clock, WallClock):
            # The timekeeper holds the GIL while it spins: a long spin starves the workers, they
            # miss, and the measured lateness (GIL waits) lengthens the spin. Keep it short.
            self.clock.max_spin_ns = min(self.clock.max_spin_ns, 300_000)

    # ---- set-up -----------------------------------------------------------------------------
    def _build_channels(self, configs: Iterable[ChannelConfig | Channel],
                        bindings: list[TaskBinding]) -> dict[str, Channel]:
        out: dict[str, Channel] = {}
        for c in configs:
            ch = c if isinstance(c, Channel) else Channel(c.name, c.policy, c.depth, c.spec)
            if ch.name in out:
                raise ValueError(f"channel {ch.name!r} declared twice")
            out[ch.name] = ch
        # Channels a binding names but nobody declared: keep-latest, contract from the writer graph.
        for b in bindings:
            specs = {s.name: s for s in b.graph.outputs}   # type: ignore[union-attr]
            for gout, name in sorted(b.outputs.items()):
                if name not in out:
                    out[name] = Channel(name, ChannelPolicy.LATEST, 1, specs[gout], check=False)
        for b in bindings:
            for name in list(b.inputs.values()) + ([b.task.trigger] if b.task.trigger and b.join is None else []):
                if name not in out:
                    out[name] = Channel(name)
        return out

    def _reserve(self, states: list[TaskState], max_active: int, parallel: bool = False, ahead: int = 0) -> None:
        """Bound each channel's live messages, so its slots are allocated once, on the first write;
        ``ahead``: more for messages still pinned by results published on a bet (``sched.optimistic``)."""
        need = {name: 2 + ahead for name in self.channels}   # the latest + one write in progress
        for ch in self.channels.values():
            if ch.policy is not ChannelPolicy.LATEST:
                need[ch.name] += (ch.depth + 1) * max(1, len(ch.readers))   # queues + last messages
        for ts in states:
            waiting = max(1, math.ceil(ts.deadline / ts.period))   # finished, waiting for the deadline
            for _, ch, _ in ts.readers:
                # snapshots pinned by active jobs; with parallel commit also by finished jobs whose
                # computation is settled only at their deadline
                need[ch.name] += max_active + (waiting if parallel else 0)
            if ts.trigger is not None and not ts.trigger_is_input:
                need[ts.trigger[0].name] += 1
            for _, ch in ts.writers:
                need[ch.name] += max_active + waiting
        for name, n in need.items():
            self.channels[name].reserve_capacity(n)

    # ---- running ----------------------------------------------------------------------------
    def push(self, channel: str, t_ns: int, data: Any, stamp_ns: int = -1) -> None:
        """Ingress: ``data`` becomes visible on ``channel`` at logical ``t_ns`` (held by reference until then);
        ``stamp_ns``: the instant the data describe on the same timeline (a sensor's header stamp; -1: ``t_ns``)."""
        s = self.sched
        if self.threaded:
            with s.lock:
                s.push(channel, t_ns, data, stamp_ns)
        elif self._driver is not None and threading.get_ident() != self._driver:
            if channel not in self.channels:
                raise KeyError(f"push: no channel named {channel!r}")
            s.inbox.append((channel, int(t_ns), data, stamp_ns))
            if s.wake is not None:
                s.wake.set()
        else:
            s.push(channel, t_ns, data, stamp_ns)

    def run_until(self, t_ns: int) -> None:
        """Run every cycle up to logical time ``t_ns`` (inclusive), then return."""
        if self._closed:
            raise RuntimeError("runtime is closed")
        saved = ThreadPolicy() if self.realtime else None
        self._driver = threading.get_ident()
        try:
            first = not self._started
            self._started = True
            wall_start = first and isinstance(self.clock, WallClock)
            if wall_start:
                freeze_heap()   # the wall clock: a collection's stall would be a late job (virtual time waits)
            if self.threaded and first:
                self._crew = Crew(self, self.rt_priority if self.realtime else None).start()
            if wall_start and not self.clock.fixed_epoch:
                self.clock.reset_epoch()   # time 0 is the start of the first run: no release is late
            if self.threaded:
                if self.realtime:
                    make_realtime(None, min(99, self.rt_priority + 1), "timekeeper")
                switch = sys.getswitchinterval()
                # A worker woken for a job waits for the GIL up to this long: 5 ms by default.
                sys.setswitchinterval(min(switch, 0.0005))
                try:
                    run_threaded(self, int(t_ns))
                finally:
                    sys.setswitchinterval(switch)
            elif self.compute_threads > 1:
                # The driver books while the pool computes; an op holding the interpreter lock would
                # otherwise keep it from the driver for 5 ms at a time, and the pool would run dry.
                switch = sys.getswitchinterval()
                sys.setswitchinterval(min(switch, 0.0005))
                try:
                    run_inline(self.sched, self.clock, self.cost, int(t_ns))
                finally:
                    sys.setswitchinterval(switch)
            else:
                if self.realtime:
                    make_realtime(self.cpus[:1], self.rt_priority, "runtime thread")
                run_inline(self.sched, self.clock, self.cost, int(t_ns))
        finally:
            self._driver = None
            if self.sched.outbox:   # what the last instant published (the threaded driver's last flush)
                flush_egress(self.sched)
            if saved is not None:
                saved.restore()

    def describe_realtime(self) -> str:
        """One line saying what ``realtime`` does here: scheduling class, priorities and pinning."""
        if isinstance(self.clock, VirtualClock):
            return "realtime: not used (virtual clock)"
        if not self.realtime:
            return "realtime: off (ordinary SCHED_OTHER threads, not pinned)"
        if self.threaded:
            cpus = sorted({w.cpu for w in self.sched.workers if w.cpu is not None})
            return (f"realtime: SCHED_FIFO, {len(self.sched.workers)} worker thread(s) at priority {self.rt_priority} "
                    f"pinned to CPU(s) {cpus}, the timekeeper at {min(99, self.rt_priority + 1)} (unpinned); "
                    f"where the OS refuses, one warning and ordinary threads")
        return (f"realtime: SCHED_FIFO priority {self.rt_priority}, the runtime thread pinned to CPU {self.cpus[0]} "
                f"while it runs; where the OS refuses, one warning and an ordinary thread")

    @property
    def now(self) -> int:
        """Logical time on the runtime's clock."""
        return self.clock.now()

    def close(self) -> list[int]:
        """Stop the worker threads; returns the workers stuck in an op (left behind as daemons)."""
        if self._closed:
            return []
        self._closed = True
        if self._started and isinstance(self.clock, WallClock):
            gc.unfreeze()   # what set-up made may be collected again once the run is over
        if self.sched.par is not None:   # every computation waited for; the steps of unsettled ones traced
            self.sched.par.close(self.clock.now())
        return self._crew.stop() if self._crew is not None else []

    # ---- what a driver of the runtime (replay) asks of its commit --------------------------
    def egress_floor(self) -> int:
        """The oldest instant whose egress still waits for a computation published on a bet
        (``sched.optimistic``); a large number where none waits: every output up to now is final."""
        par = self.sched.par
        return par.egress_floor() if par is not None else _INF

    def settle(self, t_ns: int) -> None:
        """Settle every result published on a bet, in publish order (a lost bet raises ``Mispredicted``)."""
        if self.sched.par is not None:
            self.sched.par.settle_all(t_ns)

    def abandon(self) -> None:
        """The run ended in an error: ``close`` checks no bet (a lost one would hide the error)."""
        if self.sched.par is not None:
            self.sched.par.abandon()

    @property
    def compute_threads(self) -> int:
        """The threads that compute jobs (``parallel``; 1: the driver alone)."""
        return max(1, self.sched.par.threads) if self.sched.par is not None else 1

    def commit_stats(self) -> dict[str, int]:
        """Parallel commit's figures (threads, CPU time computing, the driver's waits, bets); empty without it."""
        return self.sched.par.stats() if self.sched.par is not None else {}

    def _compared(self, task: str, verdict: int, copies: int) -> None:
        """The compare hook of ``task``'s redundant executor: its running job's COMPARE event, now."""
        s = self.sched
        job = next((w.current for w in s.workers if w.current is not None and w.current.ts.name == task), None)
        if job is None:
            return   # not a scheduled job (warm-up)
        if self.threaded:   # called from the worker thread, outside the lock, mid-job
            with s.lock:
                s.emit(EventKind.COMPARE, self.clock.now(), task, job.index, verdict, copies)
        else:
            s.emit(EventKind.COMPARE, self.clock.now(), task, job.index, verdict, copies)

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- facts ------------------------------------------------------------------------------
    def stall_ns(self, ts: TaskState) -> int:
        """How long one op may run before its worker is reported stalled.

        Default: the task's whole budget, but at least half and at most 90% of its deadline, so
        an op that never returns is reported within one period of starting (D <= T).
        """
        if self.stall_after_ns is not None:
            return self.stall_after_ns
        d = ts.deadline
        return min(max(ts.wcet, d // 2), d - d // 10)

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per-task counters: released, finished, published, missed, overruns, reactions, ..."""
        with self.sched.lock if self.threaded else _NOLOCK:
            return self.sched.stats()

    def channel_stats(self) -> dict[str, dict[str, Any]]:
        """Per-channel counters: writes, drops (per reader), slots, allocations after the first."""
        return {name: ch.stats() for name, ch in sorted(self.channels.items())}

    def channel(self, name: str) -> Channel:
        """A channel by name."""
        return self.channels[name]

    @property
    def deterministic(self) -> bool:
        """False once anything made outputs depend on timing (a miss, a ``publish: on_finish`` task)."""
        return self.sched.deterministic

    @property
    def nondeterminism(self) -> list[tuple[int, str]]:
        """Why the run is not deterministic, and from when."""
        return list(self.sched.nondeterminism)

    @property
    def errors(self) -> list[tuple[str, int, BaseException]]:
        """Exceptions raised by ops: (task, job index, error); each ended its job."""
        return list(self.sched.errors)

    @property
    def stalled_workers(self) -> dict[int, tuple[str, int, int]]:
        """Workers stuck in an op now: worker -> (task, job index, detected at)."""
        return dict(self.sched.watchdog.stalled)

    @property
    def tasks(self) -> Mapping[str, TaskState]:
        """The scheduler's task states, by name."""
        return self.sched.tasks

    def __repr__(self) -> str:
        mode = "threaded" if self.threaded else "inline"
        return f"Runtime({len(self.sched.tasks)} tasks, {self.policy.name}, {len(self.sched.workers)} " \
               f"worker(s) {mode}, {self.clock!r})"


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NOLOCK = _NoLock()
