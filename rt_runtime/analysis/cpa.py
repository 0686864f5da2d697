"""Compositional performance analysis (CPA) of event-triggered tasks: release models propagated along
the data flow to a fixed point (holistic analysis, Tindell & Clark 1994; pyCPA's compositional loop).

Every task is released by an *event model* (period P, jitter J, minimum distance d: at most
``min(ceil((w + J) / P), ceil(w / d))`` releases in any window of length w), the PJd model of
Richter's compositional analysis and pyCPA. Where it comes from:

* a periodic task: its period and declared jitter; it is *pinned* to the runtime's clock (its
  release instants are offset + k T);
* a task triggered by another task's LET publish: the publish happens at the writer's release + D
  exactly (when the writer meets its deadline), so LET adds no jitter. When the writers are pinned
  the reader's release instants follow exactly (``offsets.trigger_releases``: min_interarrival,
  coalescing of a ``latest`` channel, joins) and its model is their pattern's; otherwise the
  writer's model passes on, through the joins and the shaping below;
* a run-time chain member released by its predecessor's finish, or a task released by what a task
  publishes on finish: output jitter = input jitter + (R_max - R_min) (Tindell & Clark 1994; Henia
  et al., "System level performance analysis - the SymTA/S approach", 2005). No best-case
  execution times are declared, so R_min = 0, which can only widen the jitter. (Under edf a chain's
  members are analysed as one job due at the head's release + D, ``core.chain``: no jitter to carry);
* a join ``all`` of unrelated streams: at most as often as its slowest input, whose message may wait
  for the others' next one (their period + jitter, added to the jitter); a join ``any``, or a task
  fed only by ingress: the declared ``min_interarrival``, no jitter;
* the runtime's own minimum inter-arrival then shapes an unpinned stream: the delay is
  ``max over n of ((n - 1) d_rt - delta_min(n))`` and adds to the jitter; a stream faster than
  d_rt coalesces into releases d_rt apart.

The response times come from the policy's analysis (``analyze_taskset``: RTA under rm/dm/fp with
the runtime's declared priority order, QPA and Spuri under edf) per worker, and from the pinned
release instants (``offsets``): under fixed priorities a pinned task's busy periods are tried from
each real release (the lower of the two bounds holds); under edf the demand test over the windows
the releases allow decides where the worst phasing alone fails.
They widen the jitters of the tasks released on finish, which changes the response times: the
iteration starts from zero jitter and stops at the least fixed point.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ..core.chain import Chain, apply_chains
from ..core.task import Task
from .edf import DemandResult, qpa
from .offsets import Pinned, fp_offset_response, offset_demand, pattern_model, trigger_releases

MAX_ROUNDS = 64
MAX_PINNED_JOBS = 200_000   # release instants simulated over the horizon; beyond, every release is sporadic


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class EventModel:
    """Periodic with jitter and minimum distance (PJd), integer ns."""

    period_ns: int
    jitter_ns: int = 0
    min_distance_ns: int = 0

    def eta_plus(self, window_ns: int) -> int:
        """Most events in a half-open window of this length."""
        if window_ns <= 0:
            return 0
        n = _ceil_div(window_ns + self.jitter_ns, self.period_ns)
        return min(n, _ceil_div(window_ns, self.min_distance_ns)) if self.min_distance_ns > 0 else n

    def delta_min(self, n: int) -> int:
        """Shortest time between the first and the n-th of any n consecutive events."""
        if n < 2:
            return 0
        return max((n - 1) * self.period_ns - self.jitter_ns, (n - 1) * self.min_distance_ns)

    def widened(self, extra_ns: int) -> "EventModel":
        """The model after a delay that varies by up to ``extra_ns`` (output jitter = J + extra)."""
        return EventModel(self.period_ns, self.jitter_ns + extra_ns, max(0, self.min_distance_ns - extra_ns))


def shaped(model: EventModel, min_distance_ns: int) -> tuple[EventModel, int, bool]:
    """The stream after the runtime's minimum inter-arrival: (model, largest delay, coalesces).

    A release is held until ``min_distance_ns`` after the previous one, so the n-th event of a
    backlog leaves (n - 1) d after the first, having arrived no sooner than delta_min(n) after it."""
    d = min_distance_ns
    if model.period_ns < d:   # faster on average than the runtime releases: messages coalesce
        return EventModel(d, 0, d), 0, True
    if d <= model.min_distance_ns:
        return model, 0, False
    delay, n = 0, 2
    # (n - 1) d - delta_min(n) <= J - (n - 1)(P - d): once (n - 1)(P - d) >= J it cannot grow.
    while True:
        delay = max(delay, (n - 1) * d - model.delta_min(n))
        if model.period_ns == d or (n - 1) * (model.period_ns - d) >= model.jitter_ns:
            break
        n += 1
    if model.period_ns == d and model.jitter_ns > 0:
        delay = model.jitter_ns   # each late event can push every later one: bounded by the jitter
    return EventModel(model.period_ns, model.jitter_ns + delay, d), delay, False


def and_join(models: Sequence[EventModel]) -> EventModel:
    """An ``all`` join of unrelated streams: each firing takes a new message of the slowest input, which
    may wait for the others' next message (up to their period + jitter): that wait is added jitter."""
    slow = max(range(len(models)), key=lambda i: (models[i].period_ns, -models[i].jitter_ns))
    wait = max((m.period_ns + m.jitter_ns for i, m in enumerate(models) if i != slow), default=0)
    return models[slow].widened(wait)


@dataclass(frozen=True)
class Activation:
    """What releases a task: ``periodic``, ``ingress`` (a topic no task writes), ``trigger`` / ``all`` /
    ``any`` (with the tasks that write its trigger channels)."""

    kind: str
    writers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Release:
    """A task's derived release: its event model and, when it is pinned to the runtime's clock (periodic,
    or released by what pinned tasks publish under LET), its release instants over the horizon."""

    model: EventModel
    times: np.ndarray | None = field(default=None, compare=False)
    how: str = ""

    def same(self, other: "Release | None") -> bool:
        """Equal models and release instants (the fixed point's test)."""
        return other is not None and self.model == other.model and (
            (self.times is None and other.times is None) or
            (self.times is not None and other.times is not None and np.array_equal(self.times, other.times)))


@dataclass(frozen=True)
class TaskTiming:
    """A task's derived release and its response time at the fixed point."""

    name: str
    release: Release
    response_ns: int | None       # worst case from the nominal arrival (includes the release jitter)
    schedulable: bool
    worker: int


@dataclass(frozen=True)
class Clock:
    """The pinned tasks' common time base: the hyperperiod of the periodic tasks and the horizon the
    release instants are derived over (a transient, the steady hyperperiod, room for the windows)."""

    hyperperiod_ns: int
    horizon_ns: int


def _clock(tasks: Sequence[Task], acts: Mapping[str, Activation]) -> Clock | None:
    periodic = [t for t in tasks if (acts.get(t.name) or Activation("ingress" if t.is_triggered else "periodic")).kind
                == "periodic"]
    if not periodic:
        return None
    h = math.lcm(*(t.period_ns for t in periodic))
    # Windows start in the second hyperperiod and reach as far as the worst-phasing test looks (at most the
    # hyperperiod plus the longest deadline when U = 1): deadlines of releases up to here must be known.
    horizon = 4 * h + max(t.offset_ns for t in periodic) + 2 * max(t.deadline for t in tasks)
    if sum(horizon // t.period_ns for t in tasks) > MAX_PINNED_JOBS:
        return None
    return Clock(h, horizon)


def _from_times(times: np.ndarray, clock: Clock, deadline_ns: int, how: str) -> Release:
    """A pinned task's release instants, and the PJd model of their pattern for the worst-phasing tests (its
    minimum distance as a sporadic period where the pattern's jitter would reach the deadline)."""
    p, j, d, n = pattern_model(times, clock.hyperperiod_ns, clock.hyperperiod_ns)
    model = EventModel(p, j, d) if j < deadline_ns else EventModel(d, 0, d)
    return Release(model, times, how + ("" if n else " (never released)"))


def derive_release(t: Task, act: Activation | None, rel: Mapping[str, Release], run: Mapping[str, Task],
                   resp: Mapping[str, int | None], on_finish: Mapping[str, bool],
                   head_of: Mapping[str, tuple[str, int]], clock: Clock | None, notes: list[str]) -> Release | None:
    """One task's release from its writers' (module docstring); None while a writer's is not known yet."""
    kind = act.kind if act is not None else ("ingress" if t.is_triggered else "periodic")
    declared = EventModel(t.period_ns, t.jitter_ns, t.period_ns)
    if kind == "periodic":
        if clock is None or t.jitter_ns:   # a declared release jitter: not pinned to the clock
            return Release(declared, None, "periodic")
        return Release(declared, np.arange(t.offset_ns, clock.horizon_ns, t.period_ns, dtype=np.int64), "periodic")
    if kind == "ingress" or act is None or not act.writers:
        return Release(declared, None, "min_interarrival (ingress)")
    if kind == "any":
        return Release(EventModel(t.period_ns, 0, t.period_ns), None, "min_interarrival (join any)")
    models, publishes = [], []
    for w in act.writers:
        src, after = head_of.get(w, (w, run[w].deadline))   # a run-time chain: its head's release + its deadline
        if src not in rel:
            return None
        m, times = rel[src].model, rel[src].times
        if on_finish.get(w) and src == w:   # finish jitter: J + R_max - R_min, with R_min = 0
            r = resp.get(w)
            if r is None:
                notes.append(f"task '{t.name}': '{w}' publishes on finish and has no response bound")
                return Release(declared, None, f"min_interarrival ('{w}' has no bound)")
            m, times = m.widened(max(0, r - m.jitter_ns)), None
        models.append(m)
        publishes.append(None if times is None else times + after)
    how = f"{'all of ' if kind == 'all' else ''}{', '.join(act.writers)}"
    if clock is not None and all(x is not None for x in publishes):
        return _from_times(trigger_releases(publishes, kind, t.period_ns), clock, t.deadline,   # type: ignore[arg-type]
                           how)
    joined = models[0] if len(models) == 1 else and_join(models)
    out, delay, coalesce = shaped(joined, t.period_ns)
    if coalesce:
        notes.append(f"task '{t.name}': its trigger comes every {joined.period_ns / 1e6:g} ms, faster than its "
                     f"min_interarrival {t.period_ns / 1e6:g} ms: messages coalesce")
        how += " (coalesced to min_interarrival)"
    elif delay:
        how += f", held up to {delay / 1e6:g} ms by min_interarrival"
    if out.jitter_ns >= t.deadline:   # the PJ model's burst says less than the runtime's own spacing
        out = EventModel(t.period_ns, 0, t.period_ns)
        how += "; jitter beyond the deadline: min_interarrival instead"
    return Release(out, None, how)


@dataclass(frozen=True)
class WorkerResult:
    """One worker's analysis of its derived tasks: the worst-phasing report and, under edf, the demand
    test over the pinned tasks' release instants (None: not run or not applicable)."""

    worker: int
    report: object                       # SchedulabilityReport
    offsets: DemandResult | None


@dataclass(frozen=True)
class HolisticResult:
    """The fixed point: per-task timings (file order), per-worker results, how the iteration ended."""

    timings: tuple[TaskTiming, ...]
    workers: tuple[WorkerResult, ...]
    rounds: int
    converged: bool
    notes: tuple[str, ...] = field(default=())

    @property
    def schedulable(self) -> bool:
        """Every task meets its deadline (at a fixed point)."""
        return self.converged and all(t.schedulable for t in self.timings)


def _analyse_worker(w: int, group: Sequence[Task], rel: Mapping[str, Release], policy: str,
                    longest_op: Mapping[str, int], clock: Clock | None
                    ) -> tuple[WorkerResult, dict[str, tuple[int | None, bool]]]:
    """The policy's analysis of one worker's derived tasks; under edf, when the worst phasing fails, the
    demand test over the release instants: passing it, every job meets its deadline (response <= D)."""
    from .schedulability import analyze_taskset   # schedulability imports chains; keep the imports acyclic

    rep = analyze_taskset(group, "fp" if policy != "edf" else "edf")
    out = {r.name: (r.response_ns, r.schedulable) for r in rep.tasks}
    if policy != "edf" and clock is not None:
        out = {**out, **_fp_offsets(group, rel, rep, clock)}
    demand = None
    if policy == "edf" and not rep.schedulable and clock is not None:
        np_ns = [longest_op.get(t.name, 0) for t in group]
        sync = qpa(group, np_ns)
        if sync.checked_until_ns is not None:
            exact = {t.name for t in group if rel[t.name].times is not None and not t.jitter_ns}
            pinned = [Pinned(t, rel[t.name].times, n) for t, n in zip(group, np_ns)   # type: ignore[arg-type]
                      if t.name in exact]
            spor = [(t, n) for t, n in zip(group, np_ns) if t.name not in exact]
            found = offset_demand(pinned, [t for t, _ in spor], [n for _, n in spor], clock.hyperperiod_ns,
                                  clock.horizon_ns, sync.checked_until_ns)
            if found is not None:
                demand, late = found
                out = {t.name: (None, False) if t.name in late else
                       (t.deadline if out[t.name][0] is None else min(out[t.name][0], t.deadline), True)
                       for t in group}
    return WorkerResult(w, rep, demand), out


def _fp_offsets(group: Sequence[Task], rel: Mapping[str, Release], rep: object,
                clock: Clock) -> dict[str, tuple[int | None, bool]]:
    """Fixed priorities: each pinned task's response time with the release offsets (``offsets``), where it
    is below the worst phasing's; both are upper bounds, so the lower one holds."""
    from .rta import least_fixed_point

    out: dict[str, tuple[int | None, bool]] = {}
    by = {r.name: r for r in rep.tasks}   # type: ignore[attr-defined]
    for t in group:
        times = rel[t.name].times
        if times is None:
            continue
        higher = [h for h in group if (h.priority, h.name) < (t.priority, t.name)]   # type: ignore[operator]
        hep = [*higher, t]
        b = by[t.name].blocking_ns
        if sum(h.wcet_ns / h.period_ns for h in hep) >= 1:
            continue
        busy = least_fixed_point(b + sum(h.wcet_ns for h in hep), lambda x: b + sum(
            -(-(x + h.jitter_ns) // h.period_ns) * h.wcet_ns for h in hep), limit=clock.hyperperiod_ns)
        if busy is None:
            continue
        r = fp_offset_response(t, times, [(h, rel[h.name].times) for h in higher], b, clock.hyperperiod_ns,
                               clock.horizon_ns, busy)
        old = by[t.name].response_ns
        if r is not None and (old is None or r < old):
            out[t.name] = (r, r <= t.deadline)
    return out


def holistic(tasks: Sequence[Task], policy: str, chains: Sequence[Chain] = (),
             activations: Mapping[str, Activation] | None = None, on_finish: Mapping[str, bool] | None = None,
             partition: Mapping[str, int] | None = None,
             longest_op: Mapping[str, int] | None = None, steal: bool = False) -> HolisticResult:
    """Propagate releases and response times to the least fixed point (module docstring).

    ``activations``: task -> what releases it (default: periodic, or ingress for a triggered task);
    ``on_finish``: tasks that publish when they finish instead of at their deadline; ``partition``:
    task -> worker (tasks on different workers do not interfere; default all on worker 0);
    ``longest_op``: task -> its longest op (its non-preemptive region; default 0); ``steal``: the
    runtime's work-conserving dispatch, under which a worker's tasks may also wait for one op of
    another worker's task (its longest op when known, else its whole budget)."""
    acts, fin, ops = dict(activations or {}), dict(on_finish or {}), dict(longest_op or {})
    where = {t.name: (partition or {}).get(t.name, 0) for t in tasks}
    stolen = _steal_blocking(tasks, where, ops) if steal else {}
    run_chains = [c for c in chains if c.deadline_ns is not None]
    run = {t.name: t for t in apply_chains(tasks, run_chains, policy)}
    head_of = {n: (c.tasks[0], int(c.deadline_ns)) for c in run_chains for n in c.tasks}   # type: ignore[arg-type]
    member = {n for c in run_chains for n in c.tasks[1:]}
    clock = _clock(tasks, acts)
    # Fixed priorities: the runtime ranks the tasks as declared (a triggered task by its min_interarrival),
    # so the analysis keeps that order whatever rates it derives.
    ranks = {} if policy == "edf" else {n: k for k, n in enumerate(runtime_order(list(run.values()), policy))}
    rel: dict[str, Release] = {}
    resp: dict[str, int | None] = {}
    ok: dict[str, bool] = {}
    workers: list[WorkerResult] = []
    notes: list[str] = []
    converged, rounds = False, 0
    for rounds in range(1, MAX_ROUNDS + 1):
        notes = []
        new: dict[str, Release] = {}
        for _ in range(len(tasks) + 1):   # writers before readers; a cycle of triggers stays declared
            for t in tasks:
                if t.name not in new and t.name not in member:
                    r = derive_release(run[t.name], acts.get(t.name), {**rel, **new}, run, resp, fin, head_of,
                                       clock, notes)
                    if r is not None:
                        new[t.name] = r
        for t in tasks:
            if t.name not in new and t.name not in member:
                new[t.name] = Release(EventModel(t.period_ns, t.jitter_ns, t.period_ns), None,
                                      "min_interarrival (a cycle of triggers)")
        for c in run_chains:   # members after the head: released by the predecessor's finish
            for k, n in enumerate(c.tasks[1:], 1):
                prev, how = new[c.tasks[k - 1]], f"'{c.tasks[k - 1]}' finishing (chain '{c.name}')"
                if policy == "edf":   # one member of an instance ready at a time, all due at the head's release + D
                    new[n] = Release(new[c.tasks[0]].model, new[c.tasks[0]].times, how)
                    continue
                r = resp.get(c.tasks[k - 1])
                # From zero jitter upwards (the least fixed point); a predecessor without a bound leaves the
                # decomposition's jitter (the hop deadlines before it), and its verdict.
                j = r if r is not None else (prev.model.jitter_ns if rounds == 1 else run[n].jitter_ns)
                new[n] = Release(prev.model.widened(max(0, j - prev.model.jitter_ns)), prev.times, how)
        analysed = [dataclasses.replace(run[t.name], period_ns=new[t.name].model.period_ns,
                                        jitter_ns=new[t.name].model.jitter_ns,
                                        priority=ranks.get(t.name, run[t.name].priority)) for t in tasks]
        if stolen:
            analysed = [dataclasses.replace(a, blocking_ns=max(a.blocking_ns or 0, stolen[a.name]))
                        if stolen[a.name] > 0 else a for a in analysed]
        workers, resp, ok = [], {}, {}
        for w in sorted(set(where.values())):
            res, out = _analyse_worker(w, [a for a in analysed if where[a.name] == w], new, policy, ops, clock)
            workers.append(res)
            for n, (r, good) in out.items():
                resp[n], ok[n] = r, good
        if len(new) == len(rel) and all(new[n].same(rel.get(n)) for n in new):
            converged = True
            break
        rel = new
    timings = tuple(TaskTiming(t.name, rel[t.name], resp.get(t.name), ok.get(t.name, False), where[t.name])
                    for t in tasks)
    if not converged:
        notes.append(f"the jitters did not settle within {MAX_ROUNDS} rounds: no fixed point, so no verdict")
    if stolen:
        notes.append("steal: every task's blocking covers one op of a job its worker may have taken from another "
                     "(the longest op known there, else that task's budget); idle workers' help is not counted "
                     "(docs/ANALYSIS.md, \"Work-conserving dispatch\")")
    return HolisticResult(timings, tuple(workers), rounds, converged, tuple(dict.fromkeys(notes)))


def _steal_blocking(tasks: Sequence[Task], where: Mapping[str, int], ops: Mapping[str, int]) -> dict[str, int]:
    """Task -> its blocking term under ``steal``: one op of a job taken from another worker (the longest
    there, else a whole budget), and, conservatively, the longest op of any other task on its worker
    (which the derived term would have covered, and an explicit term replaces)."""
    out = {}
    for t in tasks:
        w = where[t.name]
        foreign = max((ops.get(o.name) or o.wcet_ns for o in tasks if where[o.name] != w), default=0)
        local = max((ops.get(o.name, 0) for o in tasks if o.name != t.name and where[o.name] == w), default=0)
        out[t.name] = max(foreign, local)
    return out


def runtime_order(tasks: Sequence[Task], policy: str) -> list[str]:
    """Task names from the highest priority down, as the runtime ranks them under rm/dm/fp."""
    from .rta import priority_order

    return [tasks[i].name for i in priority_order(tasks, policy)]
