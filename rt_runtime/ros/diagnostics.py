"""The live node's ``/diagnostics``: one ``DiagnosticStatus`` per task, input topic, and for the watchdog.

Statuses (``name`` -> what it says):

* ``rt_runtime: task <name>``: jobs, misses, overruns, reactions, drops (and speculation hits,
  misses, ... for a task that speculates); ERROR ``degraded`` while the task runs its fallback graph, WARN ``N deadline misses`` when it missed during the last period.
* ``rt_runtime: watchdog``: stalled workers, degraded tasks, whether the run is still deterministic,
  stale inputs; ERROR when a worker is stalled, WARN ``degraded: ...`` while any task is degraded.
* ``rt_runtime: input <topic>``: messages received, bad (undecodable), NaN points dropped, header
  stamps going backwards, backlog drops, decode time, receive latency; WARN ``stale`` when silent.
* ``rt_runtime: safety``: the degrade supervisor (when the stack has a ``safety:`` key): its state
  (OK nominal, WARN degraded, ERROR minimal_risk), entries per state, fault counts, silent sensors.
* ``rt_runtime: clock``: wall or sim, logical time, ``/clock`` jumps backwards.
* ``rt_runtime: outputs``: messages published per topic, encode time, watched channels (the
  planner's ``plan_status``: 1 = minimal-risk), channel drops.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..bag.types import header, msg_class

OK, WARN, ERROR = 0, 1, 2
TASK_KEYS = ("released", "published", "missed", "overruns", "skipped", "aborted", "degraded", "recovered",
             "dropped_releases", "no_input", "errors", "stalls", "mode", "safety_state")


def _status(level: int, name: str, message: str, values: Mapping[str, Any]) -> Any:
    Status, KeyValue = msg_class("diagnostic_msgs/msg/DiagnosticStatus"), msg_class("diagnostic_msgs/msg/KeyValue")
    return Status(level=level, name=name, message=message, hardware_id="rt_runtime",
                  values=[KeyValue(key=str(k), value=str(v)) for k, v in values.items()])


def _task_statuses(tasks: Mapping[str, Mapping[str, Any]], before: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    out = []
    for name in sorted(tasks):
        s = tasks[name]
        prev = before.get(name, {})
        new_misses = int(s.get("missed", 0)) - int(prev.get("missed", 0))
        new_overruns = int(s.get("overruns", 0)) - int(prev.get("overruns", 0))
        values = {k: s[k] for k in TASK_KEYS if k in s}
        values["max_exec_ms"] = round(int(s.get("max_exec_ns", 0)) / 1e6, 3)
        sp = s.get("speculation")
        if sp is not None:   # docs/SAFETY.md, "Speculative execution"
            values.update({f"speculation {k}": sp[k] for k in ("hits", "misses", "no_hypothesis", "ops_wasted")})
        if s.get("mode") == "fallback":
            level, msg = ERROR, "degraded"
        elif new_misses or new_overruns:
            level, msg = WARN, f"{new_misses} deadline misses, {new_overruns} overruns in the last period"
        else:
            level, msg = OK, "ok"
        out.append(_status(level, f"rt_runtime: task {name}", msg, values))
    return out


def build(t_ns: int, stats: Mapping[str, Any], before: Mapping[str, Any], inputs: Mapping[str, Mapping[str, Any]],
          clock: Mapping[str, Any], outputs: Mapping[str, Any]) -> Any:
    """A DiagnosticArray (rosbags object) stamped ``t_ns`` (ROS time)."""
    tasks = stats["tasks"]
    statuses = _task_statuses(tasks, before.get("tasks", {}))
    degraded = sorted(n for n, s in tasks.items() if s.get("mode") == "fallback")
    stalled = stats.get("stalled", {})
    stale = sorted(t for t, v in inputs.items() if v.get("stale"))
    wd = {"stalled_workers": ",".join(f"{w}:{job[0]}" for w, job in sorted(stalled.items())) or "none",
          "degraded_tasks": ",".join(degraded) or "none", "stale_inputs": ",".join(stale) or "none",
          "deterministic": stats.get("deterministic", True), "op_errors": stats.get("errors", 0)}
    if stats.get("why"):
        wd["nondeterministic_since_ns"], wd["nondeterministic_why"] = stats["why"][0]
    if stalled:
        level, msg = ERROR, f"stalled worker(s): {wd['stalled_workers']}"
    elif degraded:
        level, msg = WARN, f"degraded: {wd['degraded_tasks']}"
    elif stale:
        level, msg = WARN, f"stale input(s): {wd['stale_inputs']}"
    else:
        level, msg = OK, "ok"
    statuses.append(_status(level, "rt_runtime: watchdog", msg, wd))
    for topic in sorted(inputs):
        v = inputs[topic]
        prev_bad = before.get("inputs", {}).get(topic, {}).get("bad", 0)
        if v.get("stale"):
            level, msg = WARN, f"stale: no message for {v.get('silent_ms', 0):.0f} ms"
        elif not v.get("received"):
            level, msg = WARN, "no message yet"
        elif v.get("bad", 0) > prev_bad:
            level, msg = WARN, f"{v['bad'] - prev_bad} bad message(s) in the last period"
        else:
            level, msg = OK, "ok"
        statuses.append(_status(level, f"rt_runtime: input {topic}", msg, v))
    safety = stats.get("safety")
    if safety is not None:
        level = {"nominal": OK, "degraded": WARN}.get(safety["state"], ERROR)
        values = {"state": safety["state"], "transitions": safety["transitions"],
                  "silent": ",".join(safety["silent"]) or "none",
                  **{f"entries {k}": n for k, n in safety["entries"].items()},
                  **{f"faults {k}": n for k, n in sorted(safety["faults"].items())}}
        statuses.append(_status(level, "rt_runtime: safety", safety["state"], values))
    statuses.append(_status(WARN if clock.get("jumps_back") else OK, "rt_runtime: clock",
                            "jumped backwards" if clock.get("jumps_back") else "ok", clock))
    drops = {f"drops {name}": c["drops"] for name, c in stats.get("channels", {}).items() if c.get("drops")}
    statuses.append(_status(OK, "rt_runtime: outputs", "ok", {**outputs, **drops}))
    return msg_class("diagnostic_msgs/msg/DiagnosticArray")(header=header(t_ns, ""), status=statuses)
