"""Fault injectors: seeded plans, one bit exactly, one-shot op wrappers, ingress corruptions."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rt_runtime.config.taskset import ConfigError
from rt_runtime.core import Graph, Op, Task, TensorSpec
from rt_runtime.faults.campaign import parse_campaign
from rt_runtime.faults.inject import (CLASSES, InjectedFault, Injection, Injector, OpHung, corrupt_bytes, flip_bit,
                                      oversize, plan, poison)
from rt_runtime.sched import EventKind, RecordingSink, Runtime, TaskBinding, declared_cost

MS = 1_000_000
X, H, Y = (TensorSpec(n, (4,), "float32") for n in ("x", "h", "y"))


def graph() -> Graph:
    return Graph("g", [Op("a", lambda x, h: torch.mul(x, 2.0, out=h), (X,), (H,), cost_us=1000),
                       Op("b", lambda h, y: torch.add(h, 1.0, out=y), (H,), (Y,), cost_us=1000)], [X], ["y"])


def test_plans_are_deterministic_from_the_seed_and_cover_every_class() -> None:
    g = {"t": graph()}
    for cls in CLASSES:
        targets = ["t"] if cls in ("bitflip", "exception", "overrun", "hang") else ["/x"]
        a = plan(cls, 5, targets, np.random.default_rng(3), (100, 200), g)
        assert a == plan(cls, 5, targets, np.random.default_rng(3), (100, 200), g)
        assert a != plan(cls, 5, targets, np.random.default_rng(4), (100, 200), g)
        assert all(100 <= i.t_ns <= 200 and i.cls == cls for i in a)
    outs = plan("bitflip", 20, ["t"], np.random.default_rng(0), (0, 1), g, outputs_only=True)
    assert {i.op for i in outs} == {1}   # only op b writes the graph output
    with pytest.raises(ValueError, match="unknown fault class"):
        plan("meteor", 1, ["t"], np.random.default_rng(0), (0, 1), g)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.uint8])
def test_flip_bit_flips_exactly_one_bit(dtype: torch.dtype) -> None:
    x = torch.arange(12, dtype=dtype).reshape(3, 4)
    for element, bit in ((0.0, 0), (0.5, 13), (0.99, 63)):
        y = x.clone()
        flip_bit(y, element, bit)
        diff = (x.reshape(-1).view(torch.uint8) ^ y.reshape(-1).view(torch.uint8)).tolist()
        assert sum(bin(d).count("1") for d in diff) == 1
    a = np.zeros(5, np.float32)
    flip_bit(a, 0.5, 31)
    assert np.signbit(a[2]) and a[2] == 0


def test_op_faults_land_once_on_the_first_call_at_or_after_their_time() -> None:
    inj = Injector()
    stalls: list[tuple[str, int]] = []
    b = TaskBinding(Task("T", 10 * MS, 5 * MS), inj.wrap("T", graph()), inputs={"x": "/x"}, outputs={"y": "/y"},
                    on_overrun="none")
    sink, out = RecordingSink(), {}
    rt = Runtime([b], sink=sink, cost=inj.cost(declared_cost),
                 egress=lambda ch, t, s, d: out.__setitem__(t // MS, d.clone()))
    inj.arm([Injection(0, "exception", 15 * MS, "T", 1), Injection(1, "overrun", 25 * MS, "T", 0, magnitude=0.5),
             Injection(2, "hang", 35 * MS, "T", 1), Injection(3, "bitflip", 45 * MS, "T", 1, 0, 0.0, 31)],
            rt.clock.now, lambda task: 4 * MS)
    inj.on_hang = lambda task, t: stalls.append((task, t))
    rt.push("/x", 0, torch.ones(4))
    rt.run_until(70 * MS)
    assert [(i.id, t // MS) for i, t in inj.fired] == [(0, 21), (1, 30), (2, 41), (3, 51)]
    errs = [type(e) for _, _, e in rt.errors]
    assert errs == [InjectedFault, OpHung] and stalls == [("T", 45 * MS)]
    # The failed op is booked (1 ms declared; the hang: its stall threshold on top).
    aborts = {e.job_index: e.t_ns // MS for e in sink.of(EventKind.ABORT)}
    assert aborts == {2: 22, 4: 46}
    assert [e.a // MS for e in sink.of(EventKind.FINISH) if e.job_index == 3] == [4]   # 2 ms + 2 ms overrun
    assert torch.equal(out[60], torch.tensor([-3.0, 3, 3, 3])) and torch.equal(out[70], torch.full((4,), 3.0))


def test_ingress_corruptions() -> None:
    v = {"value": np.arange(40, dtype=np.float32).reshape(10, 4)}
    p = poison(v, Injection(0, "nan_input", 0, "/x", magnitude=5, seed=1))
    assert (~np.isfinite(p["value"])).sum() == 5 and np.isfinite(v["value"]).all()
    raw = bytes(range(200))
    c = corrupt_bytes(raw, Injection(0, "corrupt", 0, "/x", seed=2))
    assert c[:4] == raw[:4] and c != raw and len(c) == len(raw)
    big = oversize(v, 25)
    assert big["value"].shape == (26, 4) and np.array_equal(big["value"][10:20], v["value"])


def test_campaign_files_are_validated_with_clear_errors() -> None:
    ok = {"classes": {"drop": {"n": 2, "topics": ["/a"]}}}
    assert parse_campaign(ok, "c.yaml").classes["drop"]["n"] == 2
    for doc, msg in (({"classes": {"meteor": {"n": 1}}}, "unknown class"),
                     ({"classes": {"drop": {"n": 1}}}, "topics"),
                     ({"classes": {"hang": {"n": -1, "tasks": ["p"]}}}, "non-negative"),
                     ({**ok, "duration": 3}, "duration"), ({**ok, "inject": {"from": "5s"}}, "inject"),
                     ({**ok, "speed": 1}, "unknown key")):
        with pytest.raises(ConfigError, match=msg):
            parse_campaign(doc, "c.yaml")
