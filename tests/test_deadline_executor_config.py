"""The DeadlineExecutor's pure core and configuration, without ROS: the ready queue's order under each
policy, the watchdog's verdicts, the derived deadlines, and one clear line for each bad configuration."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rt_runtime.config.yamlfile import ConfigError
from rt_runtime.ros.deadline.config import load_config
from rt_runtime.ros.deadline.jobs import Callback, ReadyQueue, Timing, judge, late_at_start, rank
from rt_runtime.sched.policy import Policy

MS = 1_000_000


def cb(name: str, deadline_ms: float | None = None, period_ms: float | None = None, priority: int | None = None,
       **timing) -> Callback:
    t = Timing(deadline_ns=int(deadline_ms * MS) if deadline_ms else None, priority=priority, **timing)
    return Callback(name, "timer", t, 100 * MS, period_ns=int(period_ms * MS) if period_ms else None)


def drain(q: ReadyQueue, eligible=lambda j: True) -> list[str]:
    out = []
    while (j := q.pop(eligible)) is not None:
        out.append(j.cb.name)
    return out


def test_edf_runs_the_earliest_absolute_deadline_first():
    a, b, c = cb("a", 50), cb("b", 5), cb("c", 20)
    q = ReadyQueue(Policy("edf"))
    q.push(a.release(0, False))       # deadline 50 ms
    q.push(b.release(40 * MS, False))  # released later, deadline 45 ms: before a's
    q.push(c.release(0, False))       # 20 ms
    assert drain(q) == ["c", "b", "a"]


@pytest.mark.parametrize("policy, order", [("rm", ["fast", "mid", "slow"]), ("dm", ["tight", "fast", "mid", "slow"]),
                                           ("fp", ["slow", "mid", "fast", "tight"])])
def test_fixed_priorities_rank_by_period_deadline_or_number(policy, order):
    cbs = [cb("slow", period_ms=100, priority=1), cb("fast", period_ms=10, priority=3),
           cb("mid", period_ms=50, priority=2)]
    if policy != "rm":
        cbs.append(cb("tight", deadline_ms=2, period_ms=100, priority=4))
    p = Policy(policy)
    rank(p, cbs)
    q = ReadyQueue(p)
    for i, c in enumerate(cbs):
        q.push(c.release(i * MS, False))
    assert drain(q) == order


def test_an_ineligible_job_waits_and_the_next_runs():
    a, b = cb("a", 5), cb("b", 50)
    q = ReadyQueue(Policy("edf"))
    q.push(a.release(0, False))
    q.push(b.release(0, False))
    assert [j.cb.name for j in [q.pop(lambda j: j.cb.name != "a")]] == ["b"]
    assert drain(q) == ["a"]


def test_a_miss_owes_its_reaction_to_the_next_release_and_an_overrun_its_own():
    c = cb("a", 10, on_miss="skip", budget_ns=2 * MS, on_overrun="degrade")
    job = c.release(0, False)
    v = judge(job, 11 * MS, 1 * MS)            # late, within budget: the miss's reaction
    assert (v.missed, v.overran, v.reaction) == (True, False, "skip")
    assert c.release(20 * MS, False).action == "skip" and c.pending == "none"
    v = judge(c.release(40 * MS, False), 45 * MS, 3 * MS)   # on time, over budget
    assert (v.missed, v.overran, v.reaction, c.pending) == (False, True, "degrade", "degrade")
    assert (c.missed, c.overruns) == (1, 1)


def test_abort_drops_only_a_job_not_started_by_its_deadline():
    c = cb("a", 10, on_miss="abort")
    job = c.release(0, False)
    assert not late_at_start(job, 9 * MS) and late_at_start(job, 11 * MS)
    assert not late_at_start(cb("b", 10).release(0, False), 11 * MS)


def test_a_derived_deadline_follows_the_arrivals_and_forgives_a_late_then_early_pair():
    c = Callback("s", "subscription", Timing(), 100 * MS)
    assert c.release(0, True).deadline_ns == 100 * MS   # nothing observed yet: the default
    c.arrival(0)
    c.arrival(30 * MS)
    assert c.deadline_ns == 30 * MS
    c = Callback("s", "subscription", Timing(), 100 * MS)
    for t in (0, 20, 57, 60, 80, 100):          # a 20 ms publisher whose tick at 40 came 17 ms late
        c.arrival(t * MS)
    assert c.deadline_ns == 20 * MS             # not 3 ms
    assert c.release(200 * MS, True).deadline_ns == 220 * MS


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "callbacks.yaml"
    p.write_text(text)
    return p


def one_line(tmp_path: Path, text: str) -> str:
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{p}: ")
    return msg


def test_a_typo_in_a_key_is_one_line_with_the_close_match(tmp_path):
    msg = one_line(tmp_path, "callbacks:\n  - {node: planner, timer: 100ms, deadlin: 80ms}\n")
    assert "callbacks[0]" in msg and "'deadlin'" in msg and "did you mean 'deadline'?" in msg
    msg = one_line(tmp_path, "polcy: edf\n")
    assert "did you mean 'policy'?" in msg


def test_a_bad_choice_names_the_entry_the_choices_and_a_close_one(tmp_path):
    msg = one_line(tmp_path, "callbacks:\n  - {node: planner, topic: /x, on_miss: skp}\n")
    assert "callbacks[0] (node planner).on_miss" in msg and "none, skip, abort, degrade" in msg
    assert "did you mean 'skip'?" in msg
    assert "did you mean 'edf'?" in one_line(tmp_path, "policy: edg\n")


@pytest.mark.parametrize("text, words", [
    ("callbacks:\n  - {node: a, topic: /x, timer: 10ms}\n", "at most one of topic, timer, service, client"),
    ("callbacks:\n  - {node: a, deadline: 10}\n", "a bare number has no unit"),
    ("callbacks:\n  - {node: a, deadline: -1ms}\n", "must not be negative"),
    ("callbacks:\n  - {topic: /x}\n", "'node:' is missing"),
    ("callbacks:\n  - {node: a, on_miss: degrade}\n", "degrade needs 'fallback"),
    ("callbacks:\n  - {node: a, on_overrun: skip}\n", "needs a 'budget:'"),
    ("callbacks:\n  - {node: a, fallback: 'no_such_module_x:f', on_miss: degrade}\n", "cannot import module"),
    ("workers: 0\n", "workers: expected an integer from 1 to 64"),
    ("policy: fp\ncallbacks:\n  - {node: a}\n", "policy fp needs a 'priority:'"),
    ("realtime: {priority: 120}\n", "realtime: priority: expected an integer from 1 to 98"),
])
def test_bad_values_each_give_one_line(tmp_path, text, words):
    assert words in one_line(tmp_path, text)


def test_the_first_selecting_entry_gives_the_timing(tmp_path):
    p = write(tmp_path, "policy: DM\nworkers: 2\ncallbacks:\n"
                        "  - {node: 'plan*', timer: 100ms, deadline: 80ms, budget: 20ms, on_miss: skip}\n"
                        "  - {node: 'plan*', topic: '/perception/*', deadline: 30ms, priority: 2}\n"
                        "  - {node: '*', deadline: 1s}\n")
    cfg = load_config(p)
    assert (cfg.policy, cfg.workers) == ("dm", 2)
    t = cfg.timing(("planner", "/planner"), "timer", 100 * MS)
    assert (t.deadline_ns, t.budget_ns, t.on_miss, t.rule) == (80 * MS, 20 * MS, "skip", 0)
    assert cfg.timing(("planner",), "timer", 50 * MS).deadline_ns == 1_000 * MS   # another period: the catch-all
    assert cfg.timing(("planner",), "subscription", "/perception/objects").deadline_ns == 30 * MS
    assert cfg.timing(("fusion",), "subscription", "/perception/objects").rule == 2
    assert load_config(None).timing(("x",), "timer", 1).rule is None


def test_the_executor_imports_without_torch_or_the_stack_schema():
    # a drop-in executor is imported by nodes that never touch the runtime's graphs: torch (1.3 s) and the
    # stack file's schema (the scheduler, the codecs) are not its to load; rclpy's own modules are
    mods = "rt_runtime.ros.deadline" + (", rt_runtime.ros.deadline.executor, rt_runtime.trace"
                                        if importlib.util.find_spec("rclpy") else "")
    code = (f"import sys, {mods}; from rt_runtime.ros.deadline import load_config; "
            "load_config({'callbacks': [{'node': 'n', 'timer': '10ms', 'budget': '2ms'}]}); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch' "
            "or m in ('rt_runtime.config.schema', 'rt_runtime.sched.runtime', 'rt_runtime.io'))[:5])")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", (proc.stdout, proc.stderr)


def test_layers_merge_key_by_key_and_the_whole_is_checked():
    from rt_runtime.ros.deadline import deadline
    from rt_runtime.ros.deadline.decorator import declared
    from rt_runtime.ros.deadline.timing import merge, parse_fields

    @deadline(deadline="7ms", budget="3ms", on_overrun="skip")
    def tick() -> None:
        pass
    layers = {"decorator": declared(tick), "file": {"budget": 4 * MS},
              "parameter": parse_fields({"deadline": "9ms", "on_miss": None}, "node /n", "parameter rt.tick")}
    t = merge(layers, "node /n", "callback n/timer:10ms", rule=3)
    assert (t.deadline_ns, t.budget_ns, t.on_overrun, t.on_miss, t.rule) == (9 * MS, 4 * MS, "skip", "none", 3)
    with pytest.raises(ConfigError, match=r"^node /n: callback n/timer:10ms: on_overrun: skip \(from the parameter\) "
                                          r"needs a 'budget:' to overrun$"):
        merge({"parameter": {"on_overrun": "skip"}}, "node /n", "callback n/timer:10ms")
    assert declared(lambda: None) == {} and deadline()(tick) is tick   # the function itself, unwrapped


@pytest.mark.parametrize("kw, says", [
    ({"deadline": "20"}, "f: deadline: expected a duration such as"),
    ({"budget": 5}, "f: budget: expected a duration with a unit such as \"10ms\", found 5 (a bare"),
    ({"on_miss": "skp"}, "f: on_miss: expected one of none, skip, abort, degrade, found 'skp' (did"),
    ({"priority": "high"}, "f: priority: expected an integer, found 'high'"),
    ({"fallback": "no_such_module_x:g"}, "f: fallback: cannot import module 'no_such_module_x'"),
])
def test_a_bad_decorator_value_is_one_line_naming_the_function(kw, says):
    from rt_runtime.ros.deadline import deadline
    with pytest.raises(ConfigError) as e:
        @deadline(**kw)
        def f() -> None:
            pass
    msg = str(e.value)
    assert msg.startswith("@deadline on test_a_bad_decorator_value_is_one_line_naming_the_function.f: ")
    assert says in msg and "\n" not in msg
