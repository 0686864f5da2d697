"""Joins (release on several channels) and optional inputs (run before a channel's first message)."""
from __future__ import annotations

import pytest
import torch

from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.core.task import TaskError
from rt_runtime.sched import EventKind, RecordingSink, Runtime, TaskBinding, VirtualClock
from rt_runtime.sched.binding import Join
from rt_runtime.sched.budget import BudgetCost
from rt_runtime.sched.meta import meta_spec

MS = 1_000_000
A, B, Y = TensorSpec("a", (1,), "float32"), TensorSpec("b", (1,), "float32"), TensorSpec("y", (1,), "float32")


def adder(seen: list | None = None) -> Graph:
    def fn(a, b, y):
        if seen is not None:
            seen.append((float(a[0]), float(b[0])))
        torch.add(a, b, out=y)
    return Graph("add", [Op("add", fn, (A, B), (Y,))], [A, B], ["y"])


def joined(join: Join, pushes: list[tuple[str, int, float]], optional=frozenset()):
    seen: list = []
    b = TaskBinding(Task("J", 10 * MS, 1 * MS, trigger="join"), adder(seen), inputs={"a": "/a", "b": "/b"},
                    outputs={"y": "/y"}, join=join, optional=optional)
    sink = RecordingSink()
    rt = Runtime([b], clock=VirtualClock(), cost=BudgetCost([b]), sink=sink)
    for ch, t, v in pushes:
        rt.push(ch, t * MS, torch.full((1,), float(v)))
    rt.run_until(200 * MS)
    return [e.t_ns // MS for e in sink.of(EventKind.RELEASE, "J")], seen


def test_all_fires_when_both_inputs_arrived_pairing_each_with_its_own_partner() -> None:
    # a at 0, b at 5: one release at 5, reading (a0, b0); then b first (30), a last (33): release at 33.
    rel, seen = joined(Join("all", ("/a", "/b")), [("/a", 0, 1), ("/b", 5, 10), ("/b", 30, 20), ("/a", 33, 2)])
    assert rel == [5, 33] and seen == [(1, 10), (2, 20)]


def test_all_with_a_window_waits_for_a_partner_stamped_close_enough() -> None:
    # b at 30 is 25 ms after a at 5: no pair within 10 ms; a at 32 pairs with it.
    rel, seen = joined(Join("all", ("/a", "/b"), window_ns=10 * MS), [("/a", 5, 1), ("/b", 30, 10), ("/a", 32, 2)])
    assert rel == [32] and seen == [(2, 10)]
    rel, _ = joined(Join("all", ("/a", "/b"), window_ns=0), [("/a", 5, 1), ("/b", 5, 10)])   # exact stamps
    assert rel == [5]


def test_any_fires_on_either_respecting_the_minimum_inter_arrival() -> None:
    rel, seen = joined(Join("any", ("/a", "/b")), [("/a", 0, 1), ("/b", 0, 10), ("/b", 3, 20), ("/a", 40, 2)],
                       optional=frozenset({"a", "b"}))
    assert rel == [0, 10, 40] and seen == [(1, 10), (1, 20), (2, 20)]   # 3 ms waits for the 10 ms inter-arrival


def test_an_optional_input_reads_its_empty_default_and_says_stale() -> None:
    metas: list = []
    g = Graph("m", [Op("m", lambda a, m, b, y: (metas.append(m.tolist()), torch.add(a, b, out=y))[1],
                       (A, meta_spec("a"), B), (Y,))], [A, meta_spec("a"), B], ["y"])
    b = TaskBinding(Task("O", 10 * MS, 1 * MS), g, inputs={"a": "/a", "b": "/b"}, outputs={"y": "/y"},
                    optional={"a"})
    out: list = []
    rt = Runtime([b], clock=VirtualClock(), cost=BudgetCost([b]), egress=lambda c, t, s, d: out.append(float(d[0])))
    rt.push("/b", 0, torch.full((1,), 5.0))
    rt.push("/a", 15 * MS, torch.full((1,), 1.0))
    rt.run_until(25 * MS)
    assert out[:2] == [5.0, 5.0] and metas[0] == [0, -1, 0, 1, 0] and metas[2][:2] == [15 * MS, 0]


def test_bad_joins_are_refused() -> None:
    with pytest.raises(ValueError, match="two or more distinct channels"):
        Join("all", ("/a",))
    with pytest.raises(TaskError, match=r"join channels \['/c'\] are not inputs"):
        TaskBinding(Task("J", 10 * MS, 1 * MS, trigger="join"), adder(), inputs={"a": "/a", "b": "/b"},
                    join=Join("any", ("/a", "/c")))


@pytest.mark.parametrize("trigger, says", [
    ({"all": ["lidar/boxes", "radar/objects"], "windw": "5ms"}, "unknown key 'windw' (did you mean 'window'?)"),
    ({"all": ["lidar/boxes"], "any": ["radar/objects"]}, "exactly one of 'all' or 'any'"),
    ({"all": ["lidar/boxes", "radar/objects"], "pairing": "approximate"}, "approximate needs a window"),
    ({"any": ["lidar/boxes", "camera/frames"]}, "join channels ['camera/frames'] are not inputs"),
])
def test_a_bad_join_in_a_config_is_one_line(tmp_path, trigger, says) -> None:
    import yaml

    from rt_runtime.config import ConfigError
    from rt_runtime.config.stack import build_bindings, load_stack

    doc = yaml.safe_load(open("config/stack.yaml"))
    next(t for t in doc["tasks"] if t["name"] == "fusion_tracking")["trigger"] = trigger
    path = tmp_path / "join.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError) as e:
        build_bindings(load_stack(path))
    assert says in str(e.value) and "join.yaml: task 'fusion_tracking'" in str(e.value) and "\n" not in str(e.value)


def test_realtime_is_explicit_in_the_config_and_said_at_start(tmp_path) -> None:
    import yaml

    from rt_runtime.config import ConfigError
    from rt_runtime.config.realtime import runtime_kwargs
    from rt_runtime.config.stack import load_stack
    from rt_runtime.sched import WallClock

    doc = yaml.safe_load(open("config/stack.yaml"))
    doc["realtime"] = {"enabled": True, "priority": 20, "cpus": [0]}
    path = tmp_path / "rt.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    kw = runtime_kwargs(load_stack(path).realtime, default=False)
    assert kw == {"realtime": True, "rt_priority": 20, "cpus": [0]}
    b = TaskBinding(Task("T", 10 * MS, 1 * MS), adder(), inputs={"a": "/a", "b": "/b"})
    assert Runtime([b], clock=WallClock(), **kw).describe_realtime().startswith(
        "realtime: SCHED_FIFO priority 20, the runtime thread pinned to CPU 0")
    assert Runtime([b], clock=WallClock(), realtime=False).describe_realtime().startswith("realtime: off")
    for bad, says in (({"priority": 200}, "priority: expected an integer from 1 to 98"),
                      ({"cpus": [4096]}, "cpus: [4096] are not CPUs this process may use"),
                      ({"enable": True}, "unknown key 'enable'")):
        doc["realtime"] = bad
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        with pytest.raises(ConfigError, match="rt.yaml: realtime: "):
            load_stack(path)
