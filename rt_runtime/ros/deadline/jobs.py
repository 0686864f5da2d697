"""Callback jobs for the DeadlineExecutor: what each callback is owed, the ready queue, the watchdog's verdict.

Pure: plain data and functions, no rclpy, no threads, no clock (times are passed in). A callback of
an rclpy node (timer, subscription, service, client, waitable) is a ``Callback``, the executor's
counterpart of a ``Task``; each time rclpy's wait set says it is ready it releases a ``Job`` with a
release time, an absolute deadline and a budget. The ``ReadyQueue`` orders jobs by the scheduling
policy's key (``sched.policy.Policy.key``), so EDF/RM/DM/FP mean here what they mean for the runtime.
"""
from __future__ import annotations

import bisect
import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ...sched.policy import Policy

KINDS = ("timer", "subscription", "service", "client", "waitable", "guard", "task")
REACTIONS = ("none", "skip", "abort", "degrade")   # the watchdog's names (sched.binding.Reaction)
WINDOW = 32   # inter-arrival gaps remembered for a derived deadline: a rate change is followed within them
GRAPH_NS = 1_000_000_000   # a subscription's publishers (their advertised periods) are looked at most this often
_DAY_NS = 86_400 * 1_000_000_000   # a QoS deadline beyond a day is rmw's "infinite" (2**63 - 1 ns), no period
_LOWEST = 1 << 30   # a callback without a priority under fp: after every numbered one


@dataclass
class Timing:
    """What the configuration says of one callback; None: derived or absent."""

    period_ns: int | None = None
    deadline_ns: int | None = None
    budget_ns: int | None = None
    priority: int | None = None
    criticality: str = "low"
    on_miss: str = "none"
    on_overrun: str = "none"
    fallback: Callable[..., Any] | None = None
    rule: int | None = None   # index of the configuration entry that matched (None: no entry)


@dataclass
class Callback:
    """One callback of a node: its timing, what the watchdog owes its next release, its counts."""

    name: str
    kind: str
    timing: Timing
    default_deadline_ns: int
    period_ns: int | None = None            # a timer's own period (configured period wins)
    rank: int = 0                           # the policy's rank (0 = most urgent; 0 for all under EDF)
    jobs: int = 0
    missed: int = 0
    overruns: int = 0
    skipped: int = 0
    aborted: int = 0
    degraded: int = 0
    errors: int = 0
    pending: str = "none"                   # the reaction owed to the next release: none, skip or degrade
    max_exec_ns: int = 0
    graph_period_ns: int | None = None      # the tightest period the topic's publishers advertise (QoS deadline)
    graph_at_ns: int | None = None          # when the graph was last looked at
    graph_publishers: int = -1              # how many publishers it showed then (-1: never looked)
    _gaps: list[int] = field(default_factory=list)
    _last_arrival: int | None = None
    _min_gap: int | None = None

    @property
    def period(self) -> int | None:
        """The period the analysis uses: configured, a timer's own, the publishers' advertised one, else the
        observed minimum inter-arrival."""
        return self.timing.period_ns or self.period_ns or self.graph_period_ns or self._min_gap

    @property
    def deadline_ns(self) -> int:
        """Relative deadline: configured, else the period (a timer's, the publishers' advertised one, or the
        observed minimum inter-arrival), else the default."""
        return self.timing.deadline_ns or self.period or self.default_deadline_ns

    @property
    def deadline_from(self) -> str:
        """Where the deadline comes from: config, period (configured), timer, graph, observed or default."""
        if self.timing.deadline_ns:
            return "config"
        for source, value in (("period", self.timing.period_ns), ("timer", self.period_ns),
                              ("graph", self.graph_period_ns), ("observed", self._min_gap)):
            if value:
                return source
        return "default"

    def graph_due(self, now_ns: int) -> bool:
        """True when a subscription's publishers are to be looked at again (never yet, or ``GRAPH_NS`` ago)."""
        return self.kind == "subscription" and (self.graph_at_ns is None or now_ns - self.graph_at_ns >= GRAPH_NS)

    def graph(self, now_ns: int, publishers: int, deadlines: Callable[[], Iterable[int]] | None) -> bool:
        """The graph looked at: ``publishers`` on the topic now, ``deadlines()`` their QoS deadlines (asked
        only when the count changed). True when the advertised period changed."""
        self.graph_at_ns = now_ns
        if publishers == self.graph_publishers or deadlines is None:
            return False
        self.graph_publishers = publishers
        before, self.graph_period_ns = self.graph_period_ns, advertised_period(deadlines())
        return before != self.graph_period_ns

    @property
    def priority(self) -> int:
        """The explicit priority for fp (smaller is more urgent); unnumbered ones come last."""
        return self.timing.priority if self.timing.priority is not None else _LOWEST

    @property
    def deadline(self) -> int:
        """Alias the policy's ranking reads (``Policy.priorities`` sorts on ``deadline``)."""
        return self.deadline_ns

    def arrival(self, t_ns: int) -> None:
        """A message arrived at ``t_ns`` (the middleware's receive time): update the minimum inter-arrival.

        The minimum is taken over the last ``WINDOW`` gaps that are at least half their median: a publisher's
        timer that fired late and then caught up (gaps of 37 and 3 ms at 20 ms) is jitter, not a faster
        rate, and the bare minimum (3 ms) would make every later job look late.
        """
        last, self._last_arrival = self._last_arrival, t_ns
        if last is None or t_ns < last:
            return
        gaps = self._gaps
        gaps.append(t_ns - last)
        if len(gaps) > WINDOW:
            del gaps[0]
        ordered = sorted(gaps)
        floor = ordered[len(ordered) // 2] // 2
        self._min_gap = max(1, ordered[bisect.bisect_left(ordered, floor)])   # the least gap >= floor

    def release(self, t_ns: int, message: bool) -> "Job":
        """A new job released at ``t_ns``, carrying the reaction owed to it (then cleared)."""
        action, self.pending = self.pending, "none"
        job = Job(self, self.jobs, t_ns, t_ns + self.deadline_ns, message, action)
        self.jobs += 1
        return job

    def stats(self) -> dict[str, int]:
        """Counts for diagnostics and the report."""
        return {"released": self.jobs, "missed": self.missed, "overruns": self.overruns, "skipped": self.skipped,
                "aborted": self.aborted, "degraded": self.degraded, "errors": self.errors,
                "deadline_ns": self.deadline_ns, "max_exec_ns": self.max_exec_ns}


@dataclass(eq=False)
class Job:
    """One release of a callback: ``action`` is ``run``, or the reaction it carries (skip, degrade)."""

    cb: Callback
    index: int
    release_ns: int
    deadline_ns: int
    message: bool
    action: str = "none"
    took: bool = False       # its handler took data (a subscription's message: there may be a next one)
    args: tuple | None = None   # a message taken ahead: the callback's arguments (the job has no handler)
    handler: Any = None      # the executor's handle on the work (an rclpy Task)
    entity: Any = None
    node: Any = None
    key: tuple = ()


@dataclass(frozen=True)
class Verdict:
    """What the watchdog found when a job finished: missed, overran, and the reaction to apply (or none)."""

    missed: bool
    overran: bool
    reaction: str


def advertised_period(deadlines_ns: Iterable[int]) -> int | None:
    """The period a topic's publishers advertise: the tightest finite QoS deadline among them (a publisher
    with ``deadline=D`` promises a message at least every D), None when none sets one."""
    finite = [d for d in deadlines_ns if 0 < d < _DAY_NS]
    return min(finite) if finite else None


def judge(job: Job, finish_ns: int, exec_ns: int) -> Verdict:
    """Book a finished job: a miss (finished after its deadline) and an overrun (ran past its budget);
    the reaction owed to the callback's next release is set here (a miss's wins over an overrun's)."""
    cb = job.cb
    if exec_ns > cb.max_exec_ns:
        cb.max_exec_ns = exec_ns
    missed = finish_ns > job.deadline_ns
    budget = cb.timing.budget_ns
    overran = budget is not None and exec_ns > budget
    reaction = "none"
    if overran:
        cb.overruns += 1
        reaction = cb.timing.on_overrun
    if missed:
        cb.missed += 1
        if cb.timing.on_miss != "none":
            reaction = cb.timing.on_miss
    if reaction in ("skip", "degrade") and cb.kind in ("timer", "subscription"):   # a request is always answered
        cb.pending = reaction
    return Verdict(missed, overran, reaction)


def late_at_start(job: Job, now_ns: int) -> bool:
    """True when the job is already past its deadline before it started and its callback aborts such jobs."""
    return job.cb.timing.on_miss == "abort" and now_ns > job.deadline_ns


def rank(policy: Policy, callbacks: Iterable[Callback]) -> None:
    """Give every callback its rank under ``policy`` (RM by period, DM by deadline, FP by priority)."""
    cbs = list(callbacks)
    if not policy.fixed:
        for c in cbs:
            c.rank = 0
        return
    big = 1 << 62
    ranked = [_Ranked(c.name, c.period or big, c.deadline_ns, c.priority) for c in cbs]
    prio = policy.priorities(ranked)   # type: ignore[arg-type] - duck-typed: the fields Policy reads
    for c in cbs:
        c.rank = prio[c.name]


@dataclass(frozen=True)
class _Ranked:
    name: str
    period_ns: int
    deadline: int
    priority: int


class ReadyQueue:
    """Released jobs, the most urgent first by the policy's key; a job is taken only when ``eligible`` says
    it may run now (its callback group is free), so a blocked group never holds back another's job."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._heap: list[tuple[tuple, int, Job]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, job: Job) -> None:
        """Queue a job under the policy's key (ties broken by callback name, then release, then arrival)."""
        job.key = self.policy.key(job.cb.rank, job.deadline_ns, job.cb.name, job.release_ns)
        heapq.heappush(self._heap, (job.key, next(self._seq), job))

    def pop(self, eligible: Callable[[Job], bool]) -> Job | None:
        """The most urgent eligible job, removed; None when none may run now."""
        heap = self._heap
        if not heap:
            return None
        if eligible(heap[0][2]):
            return heapq.heappop(heap)[2]
        held = []
        found = None
        while heap:
            item = heapq.heappop(heap)
            if eligible(item[2]):
                found = item[2]
                break
            held.append(item)
        for item in held:
            heapq.heappush(heap, item)
        return found

    def remove(self, keep: Callable[[Job], bool]) -> list[Job]:
        """Drop the jobs ``keep`` refuses; returns them."""
        gone = [j for _, _, j in self._heap if not keep(j)]
        if gone:
            self._heap = [it for it in self._heap if keep(it[2])]
            heapq.heapify(self._heap)
        return gone

    def rekey(self) -> None:
        """Recompute every key (after the ranks changed)."""
        jobs = [j for _, _, j in self._heap]
        self._heap = []
        for j in jobs:
            self.push(j)
