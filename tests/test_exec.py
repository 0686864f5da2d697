"""The graph executor: correct results inside planned arenas, op-boundary yields, contracts, no allocation."""
import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from rt_runtime import ContractError, Graph, Op, TensorSpec
from rt_runtime.device import CpuDevice
from rt_runtime.exec import GraphExecutor
from rt_runtime.exec.warmup import warm_up
from rt_runtime.memory import PoolKind


def mlp_graph(batch=16, width=64, seed=0):
    """A real two-layer MLP, each op writing into its planned output with torch's out= kernels."""
    g = torch.Generator().manual_seed(seed)
    w1, b1 = torch.randn(width, width, generator=g), torch.randn(width, generator=g)
    w2 = torch.randn(width, 8, generator=g)
    x = TensorSpec("x", (batch, width))
    h = TensorSpec("h", (batch, width))
    r = TensorSpec("r", (batch, width))
    y = TensorSpec("y", (batch, 8))
    ops = [
        Op("fc1", lambda x, h: torch.addmm(b1, x, w1, out=h), (x,), (h,), capturable=True),
        Op("relu", lambda h, r: torch.clamp(h, min=0, out=r), (h,), (r,), inplace={"r": "h"}, capturable=True),
        Op("fc2", lambda r, y: torch.mm(r, w2, out=y), (r,), (y,), capturable=True),
    ]
    reference = lambda x: torch.relu(x @ w1 + b1) @ w2  # noqa: E731
    return Graph("mlp", ops, [x], ["y"]), reference


def test_mlp_matches_eager_reference_and_inplace_shares_bytes():
    graph, reference = mlp_graph()
    ex = GraphExecutor(graph)
    x = torch.randn(16, 64)
    out = ex.run({"x": x})["y"]
    torch.testing.assert_close(out, reference(x))
    act = ex.pools[PoolKind.ACTIVATIONS].plan
    assert act.offsets["r"] == act.offsets["h"], "relu is in-place on h, which nothing reads later"
    assert ex.views["r"].data_ptr() == ex.views["h"].data_ptr()


def test_outputs_are_views_into_the_io_arena():
    graph, _ = mlp_graph()
    ex = GraphExecutor(graph)
    y = ex.run({"x": torch.randn(16, 64)})["y"]
    io = ex.arenas[PoolKind.IO]
    assert y.data_ptr() == io.storage.data_ptr() + io.plan.offsets["y"]
    assert y.data_ptr() % 64 == 0


def test_steps_yield_at_every_op_boundary_in_fixed_order_and_record_times():
    graph, _ = mlp_graph()
    ex = GraphExecutor(graph)
    assert list(ex.steps({"x": torch.randn(16, 64)})) == [0, 1, 2]
    assert all(s <= e for s, e in zip(ex.op_start_ns, ex.op_end_ns))
    assert ex.op_end_ns[0] <= ex.op_start_ns[1] <= ex.op_end_ns[1] <= ex.op_start_ns[2]


def test_closing_the_generator_aborts_at_the_next_boundary():
    ran = []
    a, b, c = TensorSpec("a", (1,)), TensorSpec("b", (1,)), TensorSpec("c", (1,))
    g = Graph("g", [Op("first", lambda a, b: ran.append("first"), (a,), (b,)),
                    Op("second", lambda b, c: ran.append("second"), (b,), (c,))], [a], ["c"])
    ex = GraphExecutor(g)
    job = ex.steps({"a": torch.zeros(1)})
    assert next(job) == 0
    job.close()
    assert ran == ["first"] and ex.jobs == 0
    ex.run({"a": torch.zeros(1)})
    assert ran == ["first", "first", "second"] and ex.jobs == 1


def test_binding_checks_contracts_naming_graph_and_tensor():
    graph, _ = mlp_graph()
    ex = GraphExecutor(graph)
    with pytest.raises(ContractError) as e:
        ex.run({"x": torch.randn(16, 32)})
    assert "graph 'mlp'" in str(e.value) and "tensor 'x'" in str(e.value) and e.value.field == "shape[1]"
    with pytest.raises(ContractError, match="tensor 'x'.*nothing"):
        ex.run({})


def test_workspace_is_planned_per_op():
    x, y = TensorSpec("x", (32,)), TensorSpec("y", (32,))
    tmp = TensorSpec("tmp", (32,))

    def twice_plus_one(x, y, tmp):
        torch.mul(x, 2, out=tmp)
        torch.add(tmp, 1, out=y)

    g = Graph("ws", [Op("f", twice_plus_one, (x,), (y,), workspace=(tmp,))], [x], ["y"])
    ex = GraphExecutor(g)
    torch.testing.assert_close(ex.run({"x": torch.ones(32)})["y"], torch.full((32,), 3.0))
    assert ex.arenas[PoolKind.WORKSPACE].nbytes >= 128


def test_numpy_backend_runs_numpy_ops():
    a, b, c = TensorSpec("a", (8,)), TensorSpec("b", (8,)), TensorSpec("c", (8,))
    g = Graph("np", [Op("sq", lambda a, b: np.multiply(a, a, out=b), (a,), (b,)),
                     Op("inc", lambda b, c: np.add(b, 1, out=c), (b,), (c,))], [a], ["c"])
    ex = GraphExecutor(g, CpuDevice("numpy"))
    out = ex.run({"a": np.arange(8, dtype=np.float32)})["c"]
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, np.arange(8, dtype=np.float32) ** 2 + 1)


def test_torch_jobs_allocate_nothing_after_warmup():
    graph, _ = mlp_graph(batch=32, width=128)
    ex = GraphExecutor(graph)
    x = torch.randn(32, 128)
    for _ in range(3):
        ex.run({"x": x})
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        for _ in range(100):
            ex.run({"x": x})
    allocs = [e for e in prof.events() if e.cpu_memory_usage > 0]
    assert allocs == [], f"{len(allocs)} allocations in 100 jobs, first: {allocs[0].name}"
    # The counter is live: an op that allocates is seen.
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        _ = x @ x.T
    assert any(e.cpu_memory_usage > 0 for e in prof.events())


def test_numpy_jobs_allocate_nothing_after_warmup():
    a, b, c = TensorSpec("a", (256,)), TensorSpec("b", (256,)), TensorSpec("c", (256,))
    g = Graph("np", [Op("sq", lambda a, b: np.multiply(a, a, out=b), (a,), (b,)),
                     Op("inc", lambda b, c: np.add(b, 1.0, out=c), (b,), (c,))], [a], ["c"])
    ex = GraphExecutor(g, CpuDevice("numpy"))
    x = np.ones(256, np.float32)
    for _ in range(3):
        ex.run({"a": x})
    numpy_domain = [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(numpy_domain)
        for _ in range(100):
            ex.run({"a": x})
        after = tracemalloc.take_snapshot().filter_traces(numpy_domain)
        grown = [s for s in after.compare_to(before, "lineno") if s.count_diff > 0]
        assert grown == []
        # Live counter: a fresh numpy array is seen in the same domain.
        keep = np.empty(1024, np.float32)  # noqa: F841
        seen = tracemalloc.take_snapshot().filter_traces(numpy_domain)
        assert any(s.size_diff > 0 for s in seen.compare_to(after, "lineno"))
    finally:
        tracemalloc.stop()


# Random DAGs of elementwise ops: whatever the planner shares, results equal a direct evaluation.
@st.composite
def random_dags(draw):
    n_ops = draw(st.integers(1, 12))
    names = ["in0", "in1"]
    ops = []
    for i in range(n_ops):
        srcs = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
        size_in_place = len(srcs) == 1 and srcs[0].startswith("t") and draw(st.booleans())
        ops.append((f"op{i}", srcs, f"t{i}", size_in_place, draw(st.floats(-2, 2, allow_nan=False))))
        names.append(f"t{i}")
    return ops


@settings(max_examples=60, deadline=None)
@given(random_dags())
def test_random_dags_agree_with_direct_evaluation(dag):
    n = 16
    used = {s for _, srcs, _, _, _ in dag for s in srcs}
    outs = [t for _, _, t, _, _ in dag if t not in used] or [dag[-1][2]]
    ops = []
    for name, srcs, dst, in_place, k in dag:
        def fn(*args, k=k):
            *xs, out = args
            torch.mul(xs[0], k, out=out) if len(xs) == 1 else torch.add(xs[0], xs[1], alpha=k, out=out)
        ops.append(Op(name, fn, tuple(TensorSpec(s, (n,)) for s in srcs), (TensorSpec(dst, (n,)),),
                      inplace={dst: srcs[0]} if in_place else {}))
    graph = Graph("rand", ops, [TensorSpec("in0", (n,)), TensorSpec("in1", (n,))], outs)
    inputs = {"in0": torch.randn(n), "in1": torch.randn(n)}
    env = dict(inputs)
    for name, srcs, dst, _, k in dag:
        env[dst] = env[srcs[0]] * k if len(srcs) == 1 else env[srcs[0]] + k * env[srcs[1]]
    got = GraphExecutor(graph).run(inputs)
    for t in outs:
        torch.testing.assert_close(got[t], env[t])


@pytest.mark.cuda
def test_cuda_capture_replays_after_warmup():
    from rt_runtime.device import device_for

    dev = device_for("cuda")
    # Rebuild the MLP's weights on the GPU: the ops close over CPU tensors otherwise.
    w1, b1, w2 = (torch.randn(64, 64, device="cuda"), torch.randn(64, device="cuda"), torch.randn(64, 8, device="cuda"))
    x, h, r, y = (TensorSpec(n, s, device="cuda") for n, s in (("x", (16, 64)), ("h", (16, 64)), ("r", (16, 64)), ("y", (16, 8))))
    ops = [Op("fc1", lambda x, h: torch.addmm(b1, x, w1, out=h), (x,), (h,), capturable=True),
           Op("relu", lambda h, r: torch.clamp(h, min=0, out=r), (h,), (r,), inplace={"r": "h"}, capturable=True),
           Op("fc2", lambda r, y: torch.mm(r, w2, out=y), (r,), (y,), capturable=True)]
    g = Graph("mlp_cuda", ops, [x], ["y"])
    ex = GraphExecutor(g, dev, capture=True, warmup=2, urgency=1.0)
    assert warm_up(ex) and ex.captures == 1 and ex.jobs == 2   # captured at set-up, not in a live job
    for i in range(6):
        xin = torch.randn(16, 64, device="cuda")
        out = ex.run({"x": xin})
        dev.synchronize(ex.stream)
        torch.testing.assert_close(out["y"], torch.relu(xin @ w1 + b1) @ w2, rtol=1e-3, atol=1e-3)
    assert ex.captures == 1 and ex.replays == 6 and ex.fallbacks == 0


@pytest.mark.parametrize("device", ["cpu", "cpu-async"])
def test_ops_run_in_inference_mode_on_the_thread_that_runs_them(device):
    """Each op runs in inference mode (no autograd dispatch), launched on a stream too; the caller's mode is kept."""
    from rt_runtime.device import device_for

    seen = []
    xs, ys = TensorSpec("x", (4,)), TensorSpec("y", (4,))

    def op(x, y):
        seen.append(torch.is_inference_mode_enabled())
        torch.mul(x, 2.0, out=y)

    ex = GraphExecutor(Graph("inf", [Op("double", op, (xs,), (ys,))], [xs], ["y"]), device_for(device))
    out = ex.run({"x": torch.arange(4.0)})
    ex.device.synchronize()
    assert seen == [True] and torch.equal(out["y"], torch.arange(4.0) * 2) and not torch.is_inference_mode_enabled()
