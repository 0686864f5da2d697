"""Scheduler events folded into the live view's messages: one per job, a task's sliding window, the safety level
with the degraded tasks, a task's mode changes and its speculation verdicts (chains: ``live.chains``).

Pure: plain data in (the event tuples ``Scheduler.listen`` delivers), plain dicts out; no threads, no I/O.
Times are the runtime's logical time in milliseconds since its start (virtual or wall clock)."""
from __future__ import annotations

from collections import deque
from typing import Any

from ..safety.degrade import REASONS, STATES
from ..sched.events import (DROP_OUTPUT, REACT_ABORT, REACT_DEGRADE, REACT_NONE, REACT_RECOVER, REACT_SKIP,
                            REACT_SPEC_HIT, REACT_SPEC_MISS, EventKind)

K = EventKind
# The kinds the view folds (the others, ops and drops of inputs, are ignored before they are queued).
KINDS = frozenset({K.RELEASE, K.START, K.FINISH, K.PUBLISH, K.MISS, K.REACTION, K.ABORT, K.DROP, K.SAFETY})
REACTIONS = {REACT_NONE: "none", REACT_SKIP: "skip", REACT_ABORT: "abort", REACT_DEGRADE: "degrade",
             REACT_RECOVER: "recover", REACT_SPEC_HIT: "spec_hit", REACT_SPEC_MISS: "spec_miss"}
WINDOW = 100    # jobs in a task's sliding window
PENDING = 16    # jobs of a task still open (a late publish) before the oldest is sent as it stands
MS = 1e-6

_NUM = {"type": ["number", "null"]}
JOB_SCHEMA: dict[str, Any] = {
    "title": "rt_runtime.Job", "type": "object",
    "description": "One job of a task; times in ms of the runtime's logical time (null: not reached)",
    "properties": {"task": {"type": "string"}, "job": {"type": "integer"}, "release_ms": _NUM, "start_ms": _NUM,
                   "finish_ms": _NUM, "deadline_ms": _NUM, "response_ms": _NUM, "relative_deadline_ms": _NUM,
                   "miss": {"type": "boolean"},
                   "reaction": {"type": ["string", "null"]}, "aborted": {"type": "boolean"}},
    "required": ["task", "job", "miss"]}
TASK_SCHEMA: dict[str, Any] = {
    "title": "rt_runtime.TaskWindow", "type": "object",
    "description": f"A task over its last {WINDOW} jobs: response percentiles and slack (deadline - finish), ms",
    "properties": {"task": {"type": "string"}, "jobs": {"type": "integer"}, "misses": {"type": "integer"},
                   "window": {"type": "integer"}, "p50_ms": _NUM, "p90_ms": _NUM, "p99_ms": _NUM, "max_ms": _NUM,
                   "slack_ms": _NUM, "min_slack_ms": _NUM},
    "required": ["task", "jobs", "misses", "window"]}
_NAMES = {"type": "array", "items": {"type": "string"}}
SAFETY_SCHEMA: dict[str, Any] = {
    "title": "rt_runtime.Safety", "type": "object",
    "description": "The safety supervisor's level after a change, and the tasks running their fallback graph then",
    "properties": {"t_ms": {"type": "number"}, "level": {"type": "integer"}, "state": {"type": "string"},
                   "reason": {"type": "string"}, "task": {"type": "string"}, "degraded": _NAMES},
    "required": ["t_ms", "level", "state", "degraded"]}
MODE_SCHEMA: dict[str, Any] = {
    "title": "rt_runtime.Degraded", "type": "object",
    "description": "A task switched to its fallback graph (degraded) or back (primary), with every task degraded "
                   "after it and the safety level then",
    "properties": {"t_ms": {"type": "number"}, "task": {"type": "string"}, "mode": {"enum": ["primary", "fallback"]},
                   "degraded": _NAMES, "level": {"type": "integer"}, "state": {"type": "string"}},
    "required": ["t_ms", "task", "mode", "degraded", "level", "state"]}
SPEC_SCHEMA: dict[str, Any] = {
    "title": "rt_runtime.Speculation", "type": "object",
    "description": "A speculating task's verdict at a release: a hypothesis committed (hit) or every one missed, "
                   "with the task's counts so far",
    "properties": {"t_ms": {"type": "number"}, "task": {"type": "string"}, "job": {"type": "integer"},
                   "hit": {"type": "boolean"}, "hits": {"type": "integer"}, "misses": {"type": "integer"},
                   "hit_rate": {"type": "number"}},
    "required": ["t_ms", "task", "job", "hit", "hits", "misses", "hit_rate"]}
LIVE_SCHEMA: dict[str, Any] = {
    "title": "rt_runtime.Live", "type": "object",
    "description": "The live view itself: events and decimated output groups queued, and dropped (queue full)",
    "properties": {"events": {"type": "integer"}, "dropped": {"type": "integer"}, "outputs": {"type": "integer"},
                   "dropped_outputs": {"type": "integer"}},
    "required": ["events", "dropped", "outputs", "dropped_outputs"]}


def _state(level: int) -> str:
    return STATES[level] if 0 <= level < len(STATES) else str(level)


def percentile(xs: list[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile of sorted ``xs`` (not empty)."""
    return xs[min(len(xs) - 1, max(0, int(round(q / 100 * len(xs) + 0.5)) - 1))]


class LiveState:
    """Per task: the open jobs and the window of finished ones; ``fold`` turns an event into messages."""

    def __init__(self) -> None:
        self.open: dict[str, dict[int, dict[str, Any]]] = {}
        self.window: dict[str, deque[tuple[float, float | None]]] = {}
        self.jobs: dict[str, int] = {}
        self.misses: dict[str, int] = {}
        self.level = 0                          # the safety supervisor's, after its last change
        self.degraded: dict[str, bool] = {}     # task -> on its fallback graph (REACTION's b: the mode after it)
        self.spec: dict[str, list[int]] = {}    # task -> [hits, misses]

    def _job(self, task: str, index: int) -> dict[str, Any]:
        jobs = self.open.setdefault(task, {})
        j = jobs.get(index)
        if j is None:
            j = jobs[index] = {"task": task, "job": index, "release_ms": None, "start_ms": None, "finish_ms": None,
                               "deadline_ms": None, "response_ms": None, "relative_deadline_ms": None, "miss": False,
                               "reaction": None,
                               "aborted": False}
        return j

    def fold(self, kind: int, t: int, task: str, index: int, a: int, b: int) -> list[tuple[str, dict[str, Any]]]:
        """The messages (``("job" | "task" | "safety" | "mode" | "spec", message)``) event ``(kind, t, task, index,
        a, b)`` completes."""
        if kind == K.SAFETY:
            self.level = a
            return [("safety", {"t_ms": t * MS, "level": a, "state": _state(a),
                                "reason": REASONS[b] if 0 <= b < len(REASONS) else str(b), "task": task,
                                "degraded": self._degraded()})]
        if kind not in KINDS or (kind == K.DROP and a != DROP_OUTPUT):   # an input dropped: no job of it
            return []
        if kind == K.REACTION:
            return self._reaction(t, task, index, a, b)
        j = self._job(task, index)
        done = False
        if kind == K.RELEASE:
            j["release_ms"] = t * MS
            return self._flush_old(task, index)
        if kind == K.START:
            if j["start_ms"] is None:
                j["start_ms"] = t * MS
            # b: the job runs the fallback graph. A switch the watchdog made for the task that asked for it
            # (the stack degraded for a stale input, the safety supervisor) has no REACTION of that task.
            return self._mode(t, task, b)
        elif kind == K.FINISH:
            j["finish_ms"] = t * MS
        elif kind == K.MISS:
            j["miss"], j["deadline_ms"] = True, t * MS
        elif kind == K.PUBLISH:
            if not b:   # published at its deadline (LET)
                j["deadline_ms"] = t * MS
            done = True
        elif kind == K.ABORT:
            j["aborted"] = done = True
        elif kind == K.DROP:   # its output dropped (skip, or late)
            done = True
        return self._close(task, index) if done else []

    def _reaction(self, t: int, task: str, index: int, a: int, b: int) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        if index >= 0:   # -1: the task's, not a job's (a mode switch by the watchdog or the supervisor)
            self._job(task, index)["reaction"] = REACTIONS.get(a, str(a))
        if a in (REACT_SPEC_HIT, REACT_SPEC_MISS):
            n = self.spec.setdefault(task, [0, 0])
            n[a == REACT_SPEC_MISS] += 1
            out.append(("spec", {"t_ms": t * MS, "task": task, "job": index, "hit": a == REACT_SPEC_HIT,
                                 "hits": n[0], "misses": n[1], "hit_rate": n[0] / (n[0] + n[1])}))
        return out + self._mode(t, task, b)   # b: the task's mode after the reaction

    def _mode(self, t: int, task: str, fallback: int) -> list[tuple[str, dict[str, Any]]]:
        if bool(fallback) == self.degraded.get(task, False):
            return []
        self.degraded[task] = bool(fallback)
        return [("mode", {"t_ms": t * MS, "task": task, "mode": "fallback" if fallback else "primary",
                          "degraded": self._degraded(), "level": self.level, "state": _state(self.level)})]

    def _degraded(self) -> list[str]:
        return sorted(t for t, on in self.degraded.items() if on)

    def _flush_old(self, task: str, index: int) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        for old in [i for i in self.open.get(task, ()) if i <= index - PENDING]:
            out += self._close(task, old)
        return out

    def _close(self, task: str, index: int) -> list[tuple[str, dict[str, Any]]]:
        j = self.open[task].pop(index)
        if j["release_ms"] is not None and j["finish_ms"] is not None:
            j["response_ms"] = j["finish_ms"] - j["release_ms"]
        if j["release_ms"] is not None and j["deadline_ms"] is not None:   # what a plot sets the response against
            j["relative_deadline_ms"] = j["deadline_ms"] - j["release_ms"]
        self.jobs[task] = self.jobs.get(task, 0) + 1
        self.misses[task] = self.misses.get(task, 0) + int(j["miss"])
        win = self.window.setdefault(task, deque(maxlen=WINDOW))
        slack = None if j["deadline_ms"] is None or j["finish_ms"] is None else j["deadline_ms"] - j["finish_ms"]
        if j["response_ms"] is not None:
            win.append((j["response_ms"], slack))
        resp = sorted(r for r, _ in win)
        slacks = [s for _, s in win if s is not None]
        stats: dict[str, Any] = {"task": task, "jobs": self.jobs[task], "misses": self.misses[task], "window": len(win),
                                 "p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None, "slack_ms": slack,
                                 "min_slack_ms": min(slacks) if slacks else None}
        if resp:
            stats.update(p50_ms=percentile(resp, 50), p90_ms=percentile(resp, 90), p99_ms=percentile(resp, 99),
                         max_ms=resp[-1])
        return [("job", j), ("task", stats)]

    def close(self) -> list[tuple[str, dict[str, Any]]]:
        """The jobs still open at the end of the run, sent as they stand."""
        out: list[tuple[str, dict[str, Any]]] = []
        for task, jobs in self.open.items():
            for index in sorted(jobs):
                out += self._close(task, index)
        return out
