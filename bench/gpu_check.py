"""The one GPU check (issue 15): run once on a lent GPU, writes gpu_check.json and gpu_check.md.

    PYTHONPATH=. python3 bench/gpu_check.py --out "$OUT"            # on the device machine, <= 8 min
    .venv/bin/python bench/gpu_check.py --device cpu-async --quick   # smoke run of the script here

Sections: the device and its stream priority range; stream ownership (40 owned streams, distinct,
levels spread most-urgent-lowest); the ``cuda``-marked tests, then again under
``TORCH_CUDA_SANITIZER=1``; ``torch.cuda.set_sync_debug_mode("error")`` over every op marked
capturable in the reference graphs (a hidden host sync is an error); capture of each real graph with
replay equal to eager (a graph that pads its symbolic inputs, at three sizes: one capture replays them all);
capture vs eager time per graph (CUDA events, medians); a two-task Runtime on
the device checking the published sequence; priority isolation (a small urgent graph's latency
under a low-priority matmul load, against equal priorities, in the same run); the compiler seam on the
device (two small graphs' kernels eager, then jit: Inductor's Triton kernels, cold builds). Inputs: floats
uniform in [0, 1), integers zero, symbolic dims at 256 (seeded). Needs no rosbags, no pydantic.
"""
from __future__ import annotations

import argparse
from contextlib import nullcontext
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from rt_runtime.device.base import device_for  # noqa: E402
from rt_runtime.exec.executor import GraphExecutor  # noqa: E402
from rt_runtime.exec.warmup import spec_zeros, warm_up  # noqa: E402

CUDA_TEST_FILES = ["tests/test_exec.py", "tests/test_pipeline_camera.py", "tests/test_pipeline_lidar.py",
                   "tests/test_pipeline_radar.py", "tests/test_device_cpu_async.py"]


def graphs(device: str) -> dict[str, Any]:
    """The reference stack's graphs, built for ``device`` (the pipelines' own builders)."""
    from pipelines.camera import build_camera_graph
    from pipelines.lidar import build_lidar_graph
    from pipelines.planning import build_minimal_risk_graph, build_planning_graph
    from pipelines.prediction import build_prediction_graph
    from pipelines.radar import build_radar_graph
    from pipelines.tracking import build_fusion_tracking_graph

    builders: dict[str, Callable[[], Any]] = {
        "camera": lambda: build_camera_graph(device), "lidar": lambda: build_lidar_graph(device),
        "radar": lambda: build_radar_graph(device), "fusion_tracking": lambda: build_fusion_tracking_graph(device),
        "prediction": lambda: build_prediction_graph(device), "planning": lambda: build_planning_graph(device),
        "minimal_risk": lambda: build_minimal_risk_graph(device)}
    out: dict[str, Any] = {}
    for name, build in builders.items():
        try:
            out[name] = build()
        except Exception as e:  # noqa: BLE001 - reported as a finding, the other graphs go on
            out[name] = e
    return out


def inputs_for(graph: Any, device: str, seed: int = 7, symbolic: int = 256) -> dict[str, torch.Tensor]:
    """Seeded inputs meeting the graph's contracts: floats in [0, 1), integers zero, symbolic dims 256."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for spec in graph.inputs:
        t = spec_zeros(spec, "cpu", symbolic=symbolic)   # warm-up's shapes and layouts
        if t.is_floating_point():
            t.copy_(torch.rand(t.shape, generator=g))
        out[spec.name] = t.to(device)
    return out


def sync(dev: Any) -> None:
    if dev.kind == "cuda":
        torch.cuda.synchronize()
    else:
        dev.synchronize()


def check_streams(dev: Any) -> dict[str, Any]:
    """Owned streams: distinct handles past torch's pool size, levels spread over the range."""
    if dev.kind != "cuda":
        return {"skipped": f"device {dev.name} has no CUDA streams"}
    streams = [dev.stream(urgency=i / 39) for i in range(40)]
    least, greatest = dev.priority_levels
    return {"streams": 40, "distinct": len({s.cuda_stream for s in streams}), "range": [least, greatest],
            "least_urgent_level": streams[0].priority, "most_urgent_level": streams[-1].priority,
            "ok": len({s.cuda_stream for s in streams}) == 40 and streams[-1].priority == greatest}


def run_tests(sanitizer: bool, quick: bool) -> dict[str, Any]:
    """The cuda-marked tests (in a subprocess), optionally under torch's CUDA sanitizer."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
           "ROS_DOMAIN_ID": "77"}
    if sanitizer:
        env["TORCH_CUDA_SANITIZER"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider", *CUDA_TEST_FILES]
    if quick:
        cmd += ["--co"]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
        tail = (p.stdout + p.stderr).strip().splitlines()[-15:]
        return {"rc": p.returncode, "summary": tail[-1] if tail else "", "tail": tail,
                "wall_s": round(time.monotonic() - t0, 1)}
    except subprocess.TimeoutExpired:
        return {"rc": None, "summary": "timed out after 240 s"}


def check_sync_free(dev: Any, gs: dict[str, Any], device: str) -> dict[str, Any]:
    """Every capturable op run under sync_debug_mode('error'): a host sync inside it is a finding."""
    found: dict[str, Any] = {}
    for name, graph in gs.items():
        if isinstance(graph, Exception):
            found[name] = {"build_error": repr(graph)}
            continue
        ex = GraphExecutor(graph, dev, owner=name)
        ex.bind(inputs_for(graph, device))
        ex.run(inputs_for(graph, device))   # warm: lazy initialisation may sync once
        sync(dev)
        bad = []
        for op, (fn, args) in zip(graph.ops, ex._calls):
            if not op.capturable:
                continue
            if dev.kind == "cuda":
                torch.cuda.set_sync_debug_mode("error")
            try:
                with torch.cuda.stream(ex.stream) if dev.kind == "cuda" else nullcontext():
                    fn(*args)
            except RuntimeError as e:
                bad.append({"op": op.name, "error": str(e).splitlines()[0][:200]})
            finally:
                if dev.kind == "cuda":
                    torch.cuda.set_sync_debug_mode(0)
        found[name] = {"capturable_ops": sum(o.capturable for o in graph.ops), "syncing_ops": bad}
    return found


def check_capture(dev: Any, gs: dict[str, Any], device: str, repeats: int) -> dict[str, Any]:
    """Capture each graph after warm-up; replay equals eager; capture vs eager time (medians)."""
    out: dict[str, Any] = {}
    for name, graph in gs.items():
        if isinstance(graph, Exception):
            continue
        inp = inputs_for(graph, device)
        eager = GraphExecutor(graph, dev, owner=f"{name}/eager")
        cap = GraphExecutor(graph, dev, owner=f"{name}/capture", capture=True, warmup=2)
        try:
            warm_up(cap)   # eager warm-up jobs, then the capture (at set-up, never in a live job)
            diff = 0.0
            # A graph that pads its symbolic inputs (Graph.pad) replays at other sizes too: one fewer row each.
            for size in (256, 255, 97) if graph.pad else (256,):
                other = inputs_for(graph, device, symbolic=size)
                for _ in range(2):
                    ref = {k: v.clone() for k, v in eager.run(other).items()}
                    got = cap.run(other)
                sync(dev)
                diff = max(diff, max((_diff(got[k], ref[k]) for k in ref), default=0.0))
        except Exception as e:  # noqa: BLE001 - a finding
            out[name] = {"error": repr(e)[:300]}
            continue
        row = {"capturable": graph.capturable, "padded": sorted(graph.pad), **cap.stats(), "max_abs_diff_replay_vs_eager": diff,
               "eager_ms": _median_ms(dev, eager, inp, repeats), "capture_ms": _median_ms(dev, cap, inp, repeats)}
        out[name] = row
    return out


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute difference; equal values (infinities) and NaN against NaN count as equal."""
    if a.numel() == 0:
        return 0.0
    a, b = a.double(), b.double()
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))   # equal infinities too
    d = torch.where(same, torch.zeros_like(a), (a - b).abs())
    return float(torch.nan_to_num(d, nan=float("inf")).max())


def _median_ms(dev: Any, ex: GraphExecutor, inp: dict[str, Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        if dev.kind == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(ex.stream)
            ex.run(inp)
            b.record(ex.stream)
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            ex.run(inp)
            sync(dev)
            times.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(times), 4)


def check_runtime(dev: Any, device: str) -> dict[str, Any]:
    """Two tasks on the device (producer x->2x+1, consumer y->y+1) over LET channels, virtual clock."""
    from rt_runtime.core import Graph, Op, Task, TensorSpec
    from rt_runtime.sched import ChannelConfig, Runtime, TaskBinding

    ms = 1_000_000
    x, y = TensorSpec("x", (4,), "float32", device=device), TensorSpec("y", (4,), "float32", device=device)
    prod = Graph("prod", [Op("affine", lambda a, o: torch.add(a * 2.0, 1.0, out=o), (x,), (y,), capturable=True)],
                 [x], ["y"])
    cons = Graph("cons", [Op("inc", lambda a, o: torch.add(a, 1.0, out=o), (x,), (y,), capturable=True)], [x], ["y"])
    seen: list[float] = []
    rt = Runtime([TaskBinding(Task("prod", 10 * ms, 1 * ms, trigger="/in"), prod, inputs={"x": "/in"},
                              outputs={"y": "/mid"}),
                  TaskBinding(Task("cons", 10 * ms, 1 * ms, trigger="/mid"), cons, inputs={"x": "/mid"},
                              outputs={"y": "/out"})],
                 channels=[ChannelConfig("/in"), ChannelConfig("/mid"), ChannelConfig("/out")], device=dev,
                 egress=lambda ch, t, seq, data: seen.append(float(data.to("cpu")[0])) if ch == "/out" else None)
    for i in range(20):
        rt.push("/in", i * 10 * ms, torch.full((4,), float(i), device=device))
    rt.run_until(400 * ms)
    rt.close()
    want = [2.0 * i + 2.0 for i in range(20)]
    return {"published": len(seen), "ok": seen == want, "first": seen[:3], "want_first": want[:3]}


def check_isolation(dev: Any, gs: dict[str, Any], device: str, repeats: int) -> dict[str, Any]:
    """An urgent graph's latency under a low-priority matmul load: urgent vs equal stream priorities."""
    if dev.kind != "cuda":
        return {"skipped": f"device {dev.name}: no stream priorities"}
    graph = gs.get("camera")
    if isinstance(graph, Exception) or graph is None:
        return {"skipped": "camera graph did not build"}
    inp = inputs_for(graph, device)
    load_stream = dev.stream(urgency=0.0)
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)

    def latency(urgency: float, loaded: bool) -> float:
        ex = GraphExecutor(graph, dev, owner=f"camera@{urgency}", urgency=urgency)
        ex.run(inp)
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            if loaded:
                with torch.cuda.stream(load_stream):
                    for _ in range(64):
                        torch.mm(a, a)
            times.append(_median_ms(dev, ex, inp, 1))
            torch.cuda.synchronize()
        return statistics.median(times)

    unloaded = latency(1.0, False)
    urgent = latency(1.0, True)
    equal = latency(0.0, True)
    return {"unloaded_ms": round(unloaded, 3), "loaded_urgent_ms": round(urgent, 3),
            "loaded_equal_ms": round(equal, 3), "urgent_ratio": round(urgent / unloaded, 3),
            "equal_ratio": round(equal / unloaded, 3), "ok": urgent <= 1.2 * unloaded}


def check_compile(dev: Any, gs: dict[str, Any], device: str, repeats: int) -> dict[str, Any]:
    """The compiler seam on the device (``exec/compile.py``): per small graph, its kernels eager and then
    ``jit`` (Inductor's Triton kernels), per-job medians, the largest difference from eager's outputs, each
    kernel's build time and bit-identity on the warm-up's arguments; the cache in a fresh folder (cold builds)."""
    if dev.kind != "cuda":
        return {"skipped": "no CUDA (on the CPU: tests/test_kernels.py and bench/bench_kernels.py)"}
    import tempfile

    from rt_runtime.exec.compile import compile_graph

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as cache:
        os.environ["RT_RUNTIME_CACHE"] = cache
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)   # into the fresh folder: cold builds, measured
        for name in ("radar", "prediction"):
            g = gs.get(name)
            if isinstance(g, Exception) or g is None:
                out[name] = {"error": repr(g)}
                continue
            ex = GraphExecutor(g, dev)
            inp = inputs_for(g, device)
            compile_graph(ex, inp, "eager", runs=2)
            want = {k: v.clone() for k, v in ex.run(inp).items()}
            sync(dev)
            eager_ms = _median_ms(dev, ex, inp, repeats)
            t0 = time.monotonic()
            choices = compile_graph(ex, inp, "jit", jobs=repeats, runs=2)
            build_s = time.monotonic() - t0
            got = ex.run(inp)
            sync(dev)
            out[name] = {"eager_ms": eager_ms, "jit_ms": _median_ms(dev, ex, inp, repeats),
                         "build_s": round(build_s, 1),
                         "max_diff": max((_diff(got[k], v) for k, v in want.items()), default=0.0),
                         "kernels": {c.kernel: {"mode": c.mode, "build_s": round(c.cost.get("jit", 0.0), 1),
                                                "bit_equal": c.bit_equal.get("jit"), "why": c.why} for c in choices}}
            compile_graph(ex, inp, "eager", runs=1)   # the next sections run the eager kernels
    os.environ.pop("RT_RUNTIME_CACHE", None)
    torch.compiler.set_stance("default")
    return out


def report_md(res: dict[str, Any]) -> str:
    """The JSON as a short markdown report."""
    lines = [f"# gpu_check — {res['env'].get('device_name', res['env']['device'])}, {res['env']['date']}", ""]
    for k, v in res.items():
        if k == "env":
            lines += [f"- {kk}: {vv}" for kk, vv in v.items()] + [""]
            continue
        lines += [f"## {k}", "", "```", json.dumps(v, indent=1)[:4000], "```", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default), or cpu-async/cpu for a smoke run")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out"), help="folder for the JSON and markdown")
    ap.add_argument("--quick", action="store_true", help="fewer repeats; tests only collected")
    args = ap.parse_args()
    dev = device_for(args.device)
    tdev = "cuda" if dev.kind == "cuda" else "cpu"   # where the graphs' tensors live
    torch.manual_seed(0)
    repeats = 5 if args.quick else 30
    env = {"device": dev.name, "torch": torch.__version__, "python": sys.version.split()[0],
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if dev.kind == "cuda":
        env["device_name"] = torch.cuda.get_device_name()
        env["priority_range"] = list(dev.priority_levels)
        try:
            import cupy
            env["cupy"] = cupy.__version__
        except ImportError:
            env["cupy"] = None
    res: dict[str, Any] = {"env": env}
    gs = graphs(tdev)
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("streams", lambda: check_streams(dev)),
        ("tests", lambda: run_tests(False, args.quick)),
        ("tests_sanitizer", lambda: run_tests(True, args.quick) if dev.kind == "cuda" else {"skipped": "no CUDA"}),
        ("sync_free", lambda: check_sync_free(dev, gs, tdev)),
        ("capture", lambda: check_capture(dev, gs, tdev, repeats)),
        ("runtime", lambda: check_runtime(dev, tdev)),
        ("isolation", lambda: check_isolation(dev, gs, tdev, repeats)),
        ("compile", lambda: check_compile(dev, gs, tdev, repeats)),
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, step in steps:
        t0 = time.monotonic()
        try:
            res[name] = step()
        except Exception as e:  # noqa: BLE001 - one broken section must not lose the others
            res[name] = {"error": repr(e)[:500]}
        print(f"{name}: {time.monotonic() - t0:.1f} s", flush=True)
        (out / "gpu_check.json").write_text(json.dumps(res, indent=1, default=str))   # partial results survive
    (out / "gpu_check.md").write_text(report_md(res))
    print(report_md(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
