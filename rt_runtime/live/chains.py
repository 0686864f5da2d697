"""Chain latencies folded from scheduler events, one message per output of a chain's last task.

Pure: the same measure ``analysis.trace_chains`` takes of a trace after the run, taken as the events come.
Under LET a job reads its inputs as they stood at its release, so the data a chain's output is built from
was read by the head at the *origin* its backward job chain leads to:

* the head's job: its own release;
* a later member's job released on its own (its trigger, its period): the origin of the last output the task
  before it published at or before that release (publishes come first at an instant);
* a member released by its run-time chain (a ``CHAIN`` event, right after its ``RELEASE``): the origin of the
  predecessor's job of the same instance, which it reads before that job publishes.

Per output of the last member: its data age (publish - origin, ``analyze``'s data age), what it took to
finish (finish - origin) and, for a run-time chain, its deadline (origin + the chain's). Allocation is per
job of a chain member (a dict entry), not per event."""
from __future__ import annotations

from typing import Any, Sequence

from ..sched.events import DROP_OUTPUT, EventKind

K = EventKind
KINDS = frozenset({K.RELEASE, K.CHAIN, K.FINISH, K.PUBLISH, K.ABORT, K.DROP})
MS = 1e-6
KEEP = 64   # jobs of a member whose outputs are still to come, before the oldest is forgotten

_NUM = {"type": ["number", "null"]}
CHAIN_SCHEMA: dict[str, Any] = {
    "title": "rt_runtime.ChainLatency", "type": "object",
    "description": "One output of a chain's last task: when its head read the data (origin), data age "
                   "(publish - origin), finished (last task's finish - origin), ms of the runtime's logical time",
    "properties": {"chain": {"type": "string"}, "job": {"type": "integer"}, "origin_ms": {"type": "number"},
                   "publish_ms": {"type": "number"}, "age_ms": {"type": "number"}, "finish_ms": _NUM,
                   "finished_ms": _NUM, "deadline_ms": _NUM, "miss": {"type": "boolean"},
                   "outputs": {"type": "integer"}, "max_age_ms": {"type": "number"}},
    "required": ["chain", "job", "origin_ms", "publish_ms", "age_ms", "miss", "outputs", "max_age_ms"]}


class _Chain:
    """One chain's members and, per member, its jobs' origins (and finishes) and its last published origin."""

    __slots__ = ("name", "tasks", "deadline_ns", "origin", "finish", "published", "outputs", "max_age")

    def __init__(self, name: str, tasks: Sequence[str], deadline_ns: int | None) -> None:
        self.name, self.tasks, self.deadline_ns = name, tuple(tasks), deadline_ns
        self.origin: list[dict[int, int]] = [{} for _ in self.tasks]    # member -> job -> origin (ns)
        self.finish: dict[int, int] = {}                                  # last member's job -> finish (ns)
        self.published: list[int | None] = [None] * len(self.tasks)      # member -> origin of its last publish
        self.outputs, self.max_age = 0, 0


class ChainFold:
    """Chains (name, task names in data-flow order, run-time deadline or None); ``fold`` turns an event into
    ``("chain", message)`` pairs."""

    def __init__(self, chains: Sequence[tuple[str, Sequence[str], int | None]]) -> None:
        self.chains = [_Chain(*c) for c in chains if len(c[1]) >= 2]
        self.places: dict[str, list[tuple[_Chain, int]]] = {}   # task -> (chain, its place) for every chain
        self.pred: dict[str, str] = {}   # a run-time chain member -> the member before it (CHAIN's predecessor)
        for c in self.chains:
            for k, task in enumerate(c.tasks):
                self.places.setdefault(task, []).append((c, k))
            if c.deadline_ns is not None:
                self.pred.update(zip(c.tasks[1:], c.tasks))

    def fold(self, kind: int, t: int, task: str, index: int, a: int, b: int) -> list[tuple[str, dict[str, Any]]]:
        """The chain messages event ``(kind, t, task, index, a, b)`` completes (most complete none)."""
        places = self.places.get(task)
        if places is None or kind not in KINDS:
            return []
        out: list[tuple[str, dict[str, Any]]] = []
        for c, k in places:
            jobs = c.origin[k]
            if kind == K.RELEASE:
                origin = t if k == 0 else c.published[k - 1]
                if origin is not None:
                    jobs[index] = origin
                if len(jobs) > KEEP:   # a job that never published (dropped before its release was told)
                    del jobs[next(iter(jobs))]
            elif kind == K.CHAIN:   # released by its run-time chain: it reads its predecessor's job `a`
                if k > 0 and self.pred.get(task) == c.tasks[k - 1]:
                    origin = c.origin[k - 1].get(a)
                    if origin is None:
                        jobs.pop(index, None)
                    else:
                        jobs[index] = origin
            elif kind == K.FINISH:
                if k == len(c.tasks) - 1 and index in jobs:
                    c.finish[index] = t
            elif kind == K.PUBLISH:
                origin = jobs.pop(index, None)
                if origin is None:
                    continue
                c.published[k] = origin
                if k == len(c.tasks) - 1:
                    out.append(("chain", self._output(c, index, origin, t)))
            elif kind == K.ABORT or (kind == K.DROP and a == DROP_OUTPUT):   # no output of this job
                jobs.pop(index, None)
                c.finish.pop(index, None)
        return out

    def _output(self, c: _Chain, index: int, origin: int, t: int) -> dict[str, Any]:
        finish = c.finish.pop(index, None)
        age = t - origin
        c.outputs += 1
        c.max_age = max(c.max_age, age)
        deadline = None if c.deadline_ns is None else origin + c.deadline_ns
        return {"chain": c.name, "job": index, "origin_ms": origin * MS, "publish_ms": t * MS, "age_ms": age * MS,
                "finish_ms": None if finish is None else finish * MS,
                "finished_ms": None if finish is None else (finish - origin) * MS,
                "deadline_ms": None if deadline is None else deadline * MS,
                "miss": deadline is not None and (finish is None or finish > deadline),
                "outputs": c.outputs, "max_age_ms": c.max_age * MS}
