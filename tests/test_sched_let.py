"""LET semantics: read at release, write at release + deadline; event-triggered releases; ingress."""
from __future__ import annotations

import torch

from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.sched import (ChannelConfig, EventKind, RecordingSink, Runtime, TaskBinding, VirtualClock,
                              declared_cost)
from rt_runtime.sched.events import DROP_NO_INPUT

MS = 1_000_000


def add_one(name: str, cost_ms: float = 1.0) -> Graph:
    x, y = TensorSpec("x", (1,), "float32"), TensorSpec("y", (1,), "float32")
    return Graph(name, [Op("add", lambda a, o: torch.add(a, 1.0, out=o), (x,), (y,), cost_us=cost_ms * 1000)],
                 [x], ["y"])


def copy(name: str, cost_ms: float = 0.5) -> Graph:
    x, y = TensorSpec("x", (1,), "float32"), TensorSpec("y", (1,), "float32")
    return Graph(name, [Op("copy", lambda a, o: o.copy_(a), (x,), (y,), cost_us=cost_ms * 1000)], [x], ["y"])


class Egress:
    def __init__(self) -> None:
        self.msgs: list[tuple[str, int, int, float]] = []

    def __call__(self, ch: str, t: int, seq: int, data: torch.Tensor) -> None:
        self.msgs.append((ch, t, seq, float(data[0])))

    def on(self, ch: str) -> list[tuple[int, float]]:
        return [(t, v) for c, t, _, v in self.msgs if c == ch]


def _counter(**kw: object) -> TaskBinding:
    """Counts up: reads its own last output, publishes it + 1 at release + 8 ms."""
    return TaskBinding(Task("P", 10 * MS, 2 * MS, deadline_ns=8 * MS, priority=0), add_one("p"),
                       inputs={"x": "/count"}, outputs={"y": "/count"}, **kw)  # type: ignore[arg-type]


def test_outputs_become_visible_exactly_at_release_plus_deadline_not_at_finish() -> None:
    eg, sink = Egress(), RecordingSink()
    rt = Runtime([_counter(),
                  TaskBinding(Task("Ca", 10 * MS, 1 * MS, offset_ns=5 * MS, priority=1), copy("ca"),
                              inputs={"x": "/count"}, outputs={"y": "/a"}),
                  TaskBinding(Task("Cb", 10 * MS, 1 * MS, offset_ns=8 * MS, priority=2), copy("cb"),
                              inputs={"x": "/count"}, outputs={"y": "/b"})],
                 policy="fp", cost=declared_cost, egress=eg, sink=sink)
    rt.push("/count", 0, torch.zeros(1))
    rt.run_until(40 * MS)
    assert [e.t_ns for e in sink.of(EventKind.FINISH, "P")][:3] == [1 * MS, 11 * MS, 21 * MS]
    assert eg.on("/count") == [(8 * MS, 1.0), (18 * MS, 2.0), (28 * MS, 3.0), (38 * MS, 4.0)]
    # Released at 5 ms: P's job 0 has finished (1 ms) but publishes only at 8 ms, so Ca sees 0.
    assert [v for _, v in eg.on("/a")] == [0.0, 1.0, 2.0]
    # Released at 8 ms, the instant of the publish: publish comes first in a cycle, so Cb sees 1.
    assert [v for _, v in eg.on("/b")] == [1.0, 2.0, 3.0]
    assert [t for t, _ in eg.on("/a")] == [15 * MS, 25 * MS, 35 * MS]   # its own r + D (D = period)
    assert rt.deterministic and not rt.errors


def test_a_job_reads_its_inputs_as_they_stood_at_release_even_if_it_starts_later() -> None:
    eg, sink = Egress(), RecordingSink()
    blocker = Task("B", 100 * MS, 7 * MS, offset_ns=3 * MS, priority=9)
    rt = Runtime([_counter(),
                  TaskBinding(blocker, copy("b", cost_ms=6), inputs={"x": "/count"}, outputs={"y": "/blk"}),
                  TaskBinding(Task("C", 100 * MS, 2 * MS, offset_ns=5 * MS, priority=1), copy("c"),
                              inputs={"x": "/count"}, outputs={"y": "/c"})],
                 policy="fp", cost=declared_cost, egress=eg, sink=sink)
    rt.push("/count", 0, torch.zeros(1))
    rt.run_until(110 * MS)
    # C released at 5 ms, blocked by B's 6 ms op until 9 ms; P published 1 at 8 ms in between.
    assert sink.of(EventKind.START, "C")[0].t_ns == 9 * MS
    assert eg.on("/c") == [(105 * MS, 0.0)]


def test_publish_on_finish_trades_determinism_for_latency() -> None:
    eg = Egress()
    rt = Runtime([_counter(publish="on_finish")], cost=declared_cost, egress=eg)
    rt.push("/count", 0, torch.zeros(1))
    rt.run_until(30 * MS)
    assert eg.on("/count") == [(1 * MS, 1.0), (11 * MS, 2.0), (21 * MS, 3.0)]
    assert not rt.deterministic and "on finish" in rt.nondeterminism[0][1]


def _triggered(policy: str, depth: int = 1) -> tuple[list[int], list[float], Runtime]:
    eg, sink = Egress(), RecordingSink()
    e = Task("E", 10 * MS, 1 * MS, trigger="/trig")     # period = minimum inter-arrival time
    rt = Runtime([TaskBinding(e, copy("e"), inputs={"x": "/trig"}, outputs={"y": "/e"})],
                 channels=[ChannelConfig("/trig", policy, depth)], cost=declared_cost, egress=eg, sink=sink)
    for k, t in enumerate((0, 1, 2, 30, 35)):
        rt.push("/trig", t * MS, torch.full((1,), float(k)))
    rt.run_until(100 * MS)
    rel = sink.of(EventKind.RELEASE, "E")
    assert all(r.b == 1 for r in rel)
    return [r.t_ns // MS for r in rel], [v for _, v in eg.on("/e")], rt


def test_event_triggered_release_respects_min_inter_arrival_keep_latest() -> None:
    times, vals, rt = _triggered("latest")
    # 1 ms and 2 ms arrive inside the inter-arrival window: one release at 10 ms reads the newest.
    assert times == [0, 10, 30, 40] and vals == [0.0, 2.0, 3.0, 4.0]
    assert rt.channel_stats()["/trig"]["readers"]["E.x"]["drops"] == 1


def test_event_triggered_release_with_a_queue_takes_every_message_spaced_out() -> None:
    times, vals, rt = _triggered("queue", depth=8)
    assert times == [0, 10, 20, 30, 40] and vals == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert rt.channel_stats()["/trig"]["drops"] == 0


def test_trigger_channel_need_not_be_an_input_and_missing_input_skips_the_job() -> None:
    eg, sink = Egress(), RecordingSink()
    rt = Runtime([TaskBinding(Task("T", 5 * MS, 1 * MS, trigger="/tick"), copy("t"),
                              inputs={"x": "/data"}, outputs={"y": "/t"})],
                 cost=declared_cost, egress=eg, sink=sink, clock=VirtualClock())
    rt.push("/tick", 1 * MS, torch.zeros(1))           # no data yet: released, but nothing to read
    rt.push("/data", 2 * MS, torch.full((1,), 7.0))
    rt.push("/tick", 20 * MS, torch.zeros(1))
    rt.run_until(50 * MS)
    assert [e.a for e in sink.of(EventKind.DROP, "T")] == [DROP_NO_INPUT]
    assert rt.stats()["T"]["no_input"] == 1 and eg.on("/t") == [(25 * MS, 7.0)]
