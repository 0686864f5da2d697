"""Chain latencies folded from scheduler events: per interval, a chain's outputs (its last task's) in one message.

Pure: the same measure ``analysis.trace_chains`` takes of a trace after the run, taken as the events come.
Under LET a job reads its inputs as they stood at its release, so the data a chain's output is built from
was read by the head at the *origin* its backward job chain leads to:

* the head's job: its own release;
* a later member's job released on its own (its trigger, its period): the origin of the last output the task
  before it published at or before that release (publishes come first at an instant);
* a member released by its run-time chain (a ``CHAIN`` event, right after its ``RELEASE``): the origin of the
  predecessor's job of the same instance, which it reads before that job publishes.

Per output of the last member: its data age (publish - origin, ``analyze``'s data age), what it took to
finish (finish - origin) and, for a run-time chain, its deadline (origin + the chain's); ``batch`` sends a
chain's outputs of an interval of the runtime's time in one message. Allocation is per job of a chain member
(a dict entry), not per event."""
from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from ..sched.events import DROP_OUTPUT, EventKind
from .state import num

K = EventKind
KINDS = frozenset({K.RELEASE, K.CHAIN, K.FINISH, K.PUBLISH, K.ABORT, K.DROP})
# plain ints: an enum member's lookup (K.RELEASE) costs ~140 ns, several an event
RELEASE, CHAIN, FINISH, PUBLISH, ABORT, DROP = (int(k) for k in (K.RELEASE, K.CHAIN, K.FINISH, K.PUBLISH, K.ABORT,
                                                                  K.DROP))
KEEP = 64   # jobs of a member whose outputs are still to come, before the oldest is forgotten

_NUM = {"type": ["number", "null"]}
LATENCY_SCHEMA: dict[str, Any] = {
    "title": "rt_runtime.ChainLatency", "type": "object",
    "description": "One output of a chain's last task: when its head read the data (origin), data age "
                   "(publish - origin), finished (last task's finish - origin), ms of the runtime's logical time",
    "properties": {"job": {"type": "integer"}, "origin_ms": {"type": "number"}, "publish_ms": {"type": "number"},
                   "age_ms": {"type": "number"}, "finish_ms": _NUM, "finished_ms": _NUM, "deadline_ms": _NUM,
                   "miss": {"type": "boolean"}},
    "required": ["job", "origin_ms", "publish_ms", "age_ms", "miss"]}
CHAIN_SCHEMA: dict[str, Any] = {
    "title": "rt_runtime.ChainLatencies", "type": "object",
    "description": "A chain's outputs (its last task's) in an interval of the runtime's time (1 / --foxglove-hz s) "
                   "up to t_ms, and its counts so far",
    "properties": {"chain": {"type": "string"}, "t_ms": {"type": "number"},
                   "latencies": {"type": "array", "items": LATENCY_SCHEMA}, "outputs": {"type": "integer"},
                   "max_age_ms": {"type": "number"}},
    "required": ["chain", "t_ms", "latencies", "outputs", "max_age_ms"]}


class _Chain:
    """One chain's members and, per member, its jobs' origins (and finishes) and its last published origin."""

    __slots__ = ("name", "tasks", "deadline_ns", "origin", "finish", "published", "outputs", "max_age", "ended")

    def __init__(self, name: str, tasks: Sequence[str], deadline_ns: int | None) -> None:
        self.name, self.tasks, self.deadline_ns = name, tuple(tasks), deadline_ns
        self.origin: list[dict[int, int]] = [{} for _ in self.tasks]    # member -> job -> origin (ns)
        self.finish: dict[int, int] = {}                                  # last member's job -> finish (ns)
        self.published: list[int | None] = [None] * len(self.tasks)      # member -> origin of its last publish
        self.outputs, self.max_age = 0, 0
        self.ended: list[tuple[int, int, int, int | None, int | None]] = []   # outputs since the last batch


class ChainFold:
    """Chains (name, task names in data-flow order, run-time deadline or None); ``fold`` takes an event,
    ``batch`` gives each chain's outputs since the last one as one message."""

    def __init__(self, chains: Sequence[tuple[str, Sequence[str], int | None]]) -> None:
        self.chains = [_Chain(*c) for c in chains if len(c[1]) >= 2]
        self.places: dict[str, list[tuple[_Chain, int]]] = {}   # task -> (chain, its place) for every chain
        self.pred: dict[str, str] = {}   # a run-time chain member -> the member before it (CHAIN's predecessor)
        for c in self.chains:
            for k, task in enumerate(c.tasks):
                self.places.setdefault(task, []).append((c, k))
            if c.deadline_ns is not None:
                self.pred.update(zip(c.tasks[1:], c.tasks))

    def fold(self, kind: int, t: int, task: str, index: int, a: int, b: int) -> None:
        """Take event ``(kind, t, task, index, a, b)`` (an output of a chain goes into the next ``batch``)."""
        places = self.places.get(task)
        if places is None or kind not in KINDS:
            return
        for c, k in places:
            jobs = c.origin[k]
            if kind == RELEASE:
                origin = t if k == 0 else c.published[k - 1]
                if origin is not None:
                    jobs[index] = origin
                if len(jobs) > KEEP:   # a job that never published (dropped before its release was told)
                    del jobs[next(iter(jobs))]
            elif kind == CHAIN:   # released by its run-time chain: it reads its predecessor's job `a`
                if k > 0 and self.pred.get(task) == c.tasks[k - 1]:
                    origin = c.origin[k - 1].get(a)
                    if origin is None:
                        jobs.pop(index, None)
                    else:
                        jobs[index] = origin
            elif kind == FINISH:
                if k == len(c.tasks) - 1 and index in jobs:
                    c.finish[index] = t
            elif kind == PUBLISH:
                origin = jobs.pop(index, None)
                if origin is None:
                    continue
                c.published[k] = origin
                if k == len(c.tasks) - 1:
                    c.ended.append(self._output(c, index, origin, t))
            elif kind == ABORT or (kind == DROP and a == DROP_OUTPUT):   # no output of this job
                jobs.pop(index, None)
                c.finish.pop(index, None)

    def pending(self) -> bool:
        """Outputs since the last batch."""
        return any(c.ended for c in self.chains)

    def batch(self, t: int, wanted: Callable[[str], bool] | None = None) -> list[tuple[str, str]]:
        """Per chain with outputs since the last batch, ``(chain, message)`` at ``t`` (ns), the message JSON text
        (``rt_runtime.ChainLatencies``); ``wanted(chain)`` False: that chain's are let go unbuilt."""
        out = []
        for c in self.chains:
            if c.ended:
                if wanted is None or wanted(c.name):
                    out.append((c.name, '{"chain":%s,"t_ms":%s,"latencies":[%s],"outputs":%d,"max_age_ms":%s}' % (
                        json.dumps(c.name), num(t), ",".join([_latency_json(*x) for x in c.ended]), c.outputs,
                        num(c.max_age))))
                c.ended = []
        return out

    def _output(self, c: _Chain, index: int, origin: int, t: int) -> tuple[int, int, int, int | None, int | None]:
        finish = c.finish.pop(index, None)
        c.outputs += 1
        c.max_age = max(c.max_age, t - origin)
        return index, origin, t, finish, None if c.deadline_ns is None else origin + c.deadline_ns


def _latency_json(index: int, origin: int, t: int, finish: int | None, deadline: int | None) -> str:
    """One output's latency as JSON text (``rt_runtime.ChainLatency``)."""
    miss = deadline is not None and (finish is None or finish > deadline)
    return ('{"job":%d,"origin_ms":%s,"publish_ms":%s,"age_ms":%s,"finish_ms":%s,"finished_ms":%s,"deadline_ms":%s,'
            '"miss":%s}') % (index, num(origin), num(t), num(t - origin), num(finish),
                             "null" if finish is None else num(finish - origin), num(deadline),
                             "true" if miss else "false")
