"""Scheduler events folded into the live view's messages: per task, the jobs that ended in an interval of the
runtime's time with the task's sliding window then (``batch``); the safety level with the degraded tasks, a
task's mode changes and its speculation verdicts as they happen (``fold``; chains: ``live.chains``).

Pure: plain data in (the event tuples ``Scheduler.listen`` delivers), plain dicts out (a batch: its JSON text);
no threads, no I/O. Times are the runtime's logical time in milliseconds since its start (virtual or wall clock),
kept in ns until they are written."""
from __future__ import annotations

import json
from bisect import bisect_left, insort
from collections import deque
from typing import Any, Callable

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
# A job as it is folded (a list, not a dict: a dict is made only for a batch someone receives)
_IDX, _REL, _START, _FIN, _DL, _MISS, _REACT, _ABORTED = range(8)

_NUM = {"type": ["number", "null"]}
JOB_SCHEMA: dict[str, Any] = {
    "title": "rt_runtime.Job", "type": "object",
    "description": "One job of a task; times in ms of the runtime's logical time (null: not reached)",
    "properties": {"job": {"type": "integer"}, "release_ms": _NUM, "start_ms": _NUM, "finish_ms": _NUM,
                   "deadline_ms": _NUM, "response_ms": _NUM, "relative_deadline_ms": _NUM, "slack_ms": _NUM,
                   "miss": {"type": "boolean"}, "reaction": {"type": ["string", "null"]},
                   "aborted": {"type": "boolean"}},
    "required": ["job", "miss"]}
WINDOW_SCHEMA: dict[str, Any] = {
    "title": "rt_runtime.TaskWindow", "type": "object",
    "description": f"A task over its last {WINDOW} jobs: response percentiles and slack (deadline - finish), ms",
    "properties": {"jobs": {"type": "integer"}, "misses": {"type": "integer"}, "window": {"type": "integer"},
                   "p50_ms": _NUM, "p90_ms": _NUM, "p99_ms": _NUM, "max_ms": _NUM, "slack_ms": _NUM,
                   "min_slack_ms": _NUM},
    "required": ["jobs", "misses", "window"]}
JOBS_SCHEMA: dict[str, Any] = {
    "title": "rt_runtime.TaskJobs", "type": "object",
    "description": "A task's jobs that ended (published, output dropped, aborted) in an interval of the runtime's "
                   "time (1 / --foxglove-hz s) up to t_ms, and its sliding window then",
    "properties": {"task": {"type": "string"}, "t_ms": {"type": "number"},
                   "jobs": {"type": "array", "items": JOB_SCHEMA}, "window": WINDOW_SCHEMA},
    "required": ["task", "t_ms", "jobs", "window"]}
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

Messages = list[tuple[str, dict[str, Any]]]
_NONE: Messages = []   # what most events complete (shared: never appended to)


def _state(level: int) -> str:
    return STATES[level] if 0 <= level < len(STATES) else str(level)


def percentile(xs: list[Any], q: float) -> Any:
    """The nearest-rank ``q``-th percentile of sorted ``xs`` (not empty)."""
    return xs[min(len(xs) - 1, max(0, int(round(q / 100 * len(xs) + 0.5)) - 1))]


class Window:
    """A task's last ``WINDOW`` finished jobs: their responses and slacks (ns) kept sorted as they come and go, so
    a batch reads its percentiles rather than sorting the window again."""

    __slots__ = ("jobs", "responses", "slacks")

    def __init__(self) -> None:
        self.jobs: deque[tuple[int, int | None]] = deque()
        self.responses: list[int] = []
        self.slacks: list[int] = []   # those known (a deadline and a finish)

    def add(self, response: int, slack: int | None) -> None:
        """A job finished; the oldest leaves once there are ``WINDOW``."""
        if len(self.jobs) == WINDOW:
            r, s = self.jobs.popleft()
            del self.responses[bisect_left(self.responses, r)]
            if s is not None:
                del self.slacks[bisect_left(self.slacks, s)]
        self.jobs.append((response, slack))
        insort(self.responses, response)
        if slack is not None:
            insort(self.slacks, slack)


class LiveState:
    """Per task: the open jobs, those ended since the last batch and the window of finished ones; ``fold`` takes
    an event (and returns what it completes at once), ``batch`` the interval's jobs per task."""

    def __init__(self) -> None:
        self.open: dict[str, dict[int, list[Any]]] = {}
        self.ended: dict[str, list[list[Any]]] = {}   # task -> jobs ended since the last batch
        self.window: dict[str, Window] = {}
        self.jobs: dict[str, int] = {}
        self.misses: dict[str, int] = {}
        self.last_slack: dict[str, int | None] = {}
        self.level = 0                          # the safety supervisor's, after its last change
        self.degraded: dict[str, bool] = {}     # task -> on its fallback graph (REACTION's b: the mode after it)
        self.spec: dict[str, list[int]] = {}    # task -> [hits, misses]
        self._on: dict[int, Callable[[int, str, int, int, int], Messages]] = {
            K.RELEASE: self._release, K.START: self._start, K.FINISH: self._finish, K.PUBLISH: self._publish,
            K.MISS: self._miss, K.ABORT: self._abort, K.DROP: self._drop, K.REACTION: self._reaction,
            K.SAFETY: self._safety}

    def fold(self, kind: int, t: int, task: str, index: int, a: int, b: int) -> Messages:
        """Take event ``(kind, t, task, index, a, b)``; the messages (``("safety" | "mode" | "spec", message)``)
        it completes at once (a job's go into the next ``batch``)."""
        on = self._on.get(kind)
        return _NONE if on is None else on(t, task, index, a, b)

    def _job(self, task: str, index: int) -> list[Any]:
        jobs = self.open.get(task)
        if jobs is None:
            jobs = self.open[task] = {}
        j = jobs.get(index)
        if j is None:
            j = jobs[index] = [index, None, None, None, None, False, None, False]
        return j

    def _release(self, t: int, task: str, index: int, a: int, b: int) -> Messages:
        self._job(task, index)[_REL] = t
        jobs = self.open[task]
        if len(jobs) > 1:   # one: the job just released
            for old in [i for i in jobs if i <= index - PENDING]:
                self._close(task, old)
        return _NONE

    def _start(self, t: int, task: str, index: int, a: int, b: int) -> Messages:
        j = self._job(task, index)
        if j[_START] is None:
            j[_START] = t
        # b: the job runs the fallback graph. A switch the watchdog made for the task that asked for it (the
        # stack degraded for a stale input, the safety supervisor) has no REACTION of that task.
        return self._mode(t, task, b)

    def _finish(self, t: int, task: str, index: int, a: int, b: int) -> Messages:
        self._job(task, index)[_FIN] = t
        return _NONE

    def _miss(self, t: int, task: str, index: int, a: int, b: int) -> Messages:
        j = self._job(task, index)
        j[_MISS], j[_DL] = True, t
        return _NONE

    def _publish(self, t: int, task: str, index: int, a: int, b: int) -> Messages:
        j = self._job(task, index)
        if not b:   # published at its deadline (LET)
            j[_DL] = t
        self._close(task, index)
        return _NONE

    def _abort(self, t: int, task: str, index: int, a: int, b: int) -> Messages:
        self._job(task, index)[_ABORTED] = True
        self._close(task, index)
        return _NONE

    def _drop(self, t: int, task: str, index: int, a: int, b: int) -> Messages:
        if a == DROP_OUTPUT:   # its output dropped (skip, or late); an input dropped: no job of it
            self._job(task, index)
            self._close(task, index)
        return _NONE

    def _safety(self, t: int, task: str, index: int, a: int, b: int) -> Messages:
        self.level = a
        return [("safety", {"t_ms": t / 1e6, "level": a, "state": _state(a),
                            "reason": REASONS[b] if 0 <= b < len(REASONS) else str(b), "task": task,
                            "degraded": self._degraded()})]

    def _reaction(self, t: int, task: str, index: int, a: int, b: int) -> Messages:
        out: Messages = []
        if index >= 0:   # -1: the task's, not a job's (a mode switch by the watchdog or the supervisor)
            self._job(task, index)[_REACT] = REACTIONS.get(a, str(a))
        if a in (REACT_SPEC_HIT, REACT_SPEC_MISS):
            n = self.spec.setdefault(task, [0, 0])
            n[a == REACT_SPEC_MISS] += 1
            out.append(("spec", {"t_ms": t / 1e6, "task": task, "job": index, "hit": a == REACT_SPEC_HIT,
                                 "hits": n[0], "misses": n[1], "hit_rate": n[0] / (n[0] + n[1])}))
        mode = self._mode(t, task, b)   # b: the task's mode after the reaction
        return out + mode if mode else out

    def _mode(self, t: int, task: str, fallback: int) -> Messages:
        if bool(fallback) == self.degraded.get(task, False):
            return _NONE
        self.degraded[task] = bool(fallback)
        return [("mode", {"t_ms": t / 1e6, "task": task, "mode": "fallback" if fallback else "primary",
                          "degraded": self._degraded(), "level": self.level, "state": _state(self.level)})]

    def _degraded(self) -> list[str]:
        return sorted(t for t, on in self.degraded.items() if on)

    def _close(self, task: str, index: int) -> None:
        j = self.open[task].pop(index)
        rel, fin, dl = j[_REL], j[_FIN], j[_DL]
        slack = None if dl is None or fin is None else dl - fin
        self.jobs[task] = self.jobs.get(task, 0) + 1
        self.misses[task] = self.misses.get(task, 0) + j[_MISS]
        self.last_slack[task] = slack
        if rel is not None and fin is not None:
            win = self.window.get(task)
            if win is None:
                win = self.window[task] = Window()
            win.add(fin - rel, slack)
        ended = self.ended.get(task)
        if ended is None:
            self.ended[task] = [j]
        else:
            ended.append(j)

    def pending(self) -> bool:
        """Jobs ended since the last batch."""
        return any(self.ended.values())

    def batch(self, t: int, wanted: Callable[[str], bool] | None = None) -> list[tuple[str, str]]:
        """Per task with jobs ended since the last batch, ``(task, message)`` at ``t`` (ns), the message JSON text
        (``rt_runtime.TaskJobs``); ``wanted(task)`` False: that task's are let go unbuilt (nobody receives them)."""
        out = []
        at = num(t)
        for task, ended in self.ended.items():
            if ended and (wanted is None or wanted(task)):
                out.append((task, '{"task":%s,"t_ms":%s,"jobs":[%s],"window":%s}' % (
                    json.dumps(task), at, ",".join([_job_json(j) for j in ended]), self._window(task))))
        self.ended = {}
        return out

    def _window(self, task: str) -> str:
        win = self.window.get(task)
        resp = win.responses if win is not None else []
        p50 = p90 = p99 = top = "null"
        if resp:
            p50, p90, p99, top = (num(percentile(resp, 50)), num(percentile(resp, 90)), num(percentile(resp, 99)),
                                  num(resp[-1]))
        slacks = win.slacks if win is not None else []
        return ('{"jobs":%d,"misses":%d,"window":%d,"p50_ms":%s,"p90_ms":%s,"p99_ms":%s,"max_ms":%s,"slack_ms":%s,'
                '"min_slack_ms":%s}') % (self.jobs.get(task, 0), self.misses.get(task, 0), len(resp), p50, p90, p99,
                                         top, num(self.last_slack.get(task)), num(slacks[0] if slacks else None))

    def close(self) -> None:
        """End the jobs still open at the end of the run as they stand (the next ``batch`` has them)."""
        for task, jobs in self.open.items():
            for index in sorted(jobs):
                self._close(task, index)


def num(t_ns: int | None) -> str:
    """A time or duration in ns as JSON ms (``null``: None); divided, not multiplied by 1e-6: the nearest double
    to the exact ms, short (``483.79``, not ``483.78999999999996``)."""
    return "null" if t_ns is None else repr(t_ns / 1e6)


_TRUTH = ("false", "true")
_REACTION_JSON = {None: "null", **{name: json.dumps(name) for name in REACTIONS.values()}}


def _job_json(j: list[Any]) -> str:
    """A job as JSON text (``rt_runtime.Job``): a format, not a dict dumped (a third of the time: the view's CPU
    is taken from the replay's thread, through the GIL)."""
    rel, fin, dl = j[_REL], j[_FIN], j[_DL]
    react = j[_REACT]
    return ('{"job":%d,"release_ms":%s,"start_ms":%s,"finish_ms":%s,"deadline_ms":%s,"response_ms":%s,'
            '"relative_deadline_ms":%s,"slack_ms":%s,"miss":%s,"reaction":%s,"aborted":%s}') % (
        j[_IDX], num(rel), num(j[_START]), num(fin), num(dl),
        "null" if rel is None or fin is None else num(fin - rel),
        "null" if rel is None or dl is None else num(dl - rel),
        "null" if dl is None or fin is None else num(dl - fin),
        _TRUTH[j[_MISS]], _REACTION_JSON.get(react) or json.dumps(react), _TRUTH[j[_ABORTED]])
