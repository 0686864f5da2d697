"""Kernel compile modes, measured: eager Python body, TorchScript (before, the anchor), torch.compile
(Inductor, default and with its C++ wrapper) and torch.export + AOTInductor.

Two reference-shaped ops: ``small``, ``STEPS`` x 4 small element-wise torch calls on 64 floats between
Python lines (the reference stack's kernels look like this: many short aten calls), and ``masked``, one
masked reduction over a 2M-float tensor (about 2 ms, one long aten call). For each mode: per-call
median (us), seconds for N calls by one thread (N: at least 0.3 s of them) and for the same work twice over by two threads
at once (scaling = 2 x one / two: 2.0 means the call runs off the GIL), whether the output is
bit-identical to the eager body's, the first build (compile) time, and the host allocations a call
makes beside the output view it writes (torch's profiler; every mode writes ``out`` in place). Medians of ``REPEATS``; one
torch thread each, as runtime workers use. Compiled artifacts go to a fresh temporary folder, so the
build times are cold.

    python bench/bench_kernels.py
    BENCH_QUICK=1 python bench/bench_kernels.py        # fewer repeats, eager and TorchScript only
    BENCH_MODES=eager,jit-cpp python bench/bench_kernels.py
    python bench/bench_kernels.py --replay [--baseline DIR] [--modes eager,auto]

``--replay``: the built-in bag replayed at ``--parallel 1`` and ``2``, each in a fresh process, per kernel
mode (``RT_RUNTIME_COMPILE``; ``auto`` reads what ``rt-runtime compile --build`` cached) and, with
``--baseline DIR``, by a checkout of the stack before this change (its TorchScript kernels), the
variants interleaved, 3 rounds: wall time medians, set-up time, and the digests.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

QUICK = bool(os.environ.get("BENCH_QUICK"))
STEPS, REPEATS = 200, (3 if QUICK else 5)
ALL_MODES = ("eager", "torchscript", "jit", "jit-cpp", "aot")
MODES = tuple(os.environ.get("BENCH_MODES", "eager,torchscript" if QUICK else ",".join(ALL_MODES)).split(","))


def small(x: torch.Tensor, out: torch.Tensor) -> None:
    y = x
    for _ in range(200):
        y = (y * 1.0001 + 0.5).clamp(-10.0, 10.0) - 0.5
    out.copy_(y)


def masked(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(torch.where(x > 0.5, x * x, torch.zeros_like(x)).sum(0))


OPS = {"small": (small, lambda: torch.rand(64, generator=torch.Generator().manual_seed(0)), 64, 400),
       "masked": (masked, lambda: torch.rand(2_000_000, generator=torch.Generator().manual_seed(0)), (), 40)}


def build(mode: str, fn, x, out, cache: str):
    """``fn`` built in ``mode``; returns (callable, build seconds)."""
    t0 = time.perf_counter()
    if mode == "eager":
        c = fn
    elif mode == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            c = torch.jit.script(fn)
    elif mode in ("jit", "jit-cpp"):
        opts = {"cpp_wrapper": True} if mode == "jit-cpp" else None
        c = torch.compile(fn, dynamic=False, options=opts)
    elif mode == "aot":
        class M(torch.nn.Module):
            def forward(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
                fn(x, out)
                return out
        ep = torch.export.export(M(), (x, out))
        path = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(cache, f"{fn.__name__}.pt2"))
        c = torch._inductor.aoti_load_package(path)
    else:
        raise SystemExit(f"bench_kernels: BENCH_MODES: unknown mode {mode!r}; expected some of {', '.join(ALL_MODES)}")
    c(x, out)
    c(x, out)
    return c, time.perf_counter() - t0


def allocations(fn, x, out, calls: int = 5) -> tuple[float, float]:
    """Host allocations per call and their bytes (torch's profiler): what a mode allocates beside the views."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        for _ in range(calls):
            fn(x, out)
    ev = [e for e in p.events() if e.name == "[memory]" and e.cpu_memory_usage > 0]
    return len(ev) / calls, sum(e.cpu_memory_usage for e in ev) / calls


def timed(fn, x, shape, threads: int, calls: int) -> float:
    """Seconds for ``threads`` threads each making ``calls`` calls at once."""
    outs = [torch.empty(shape) for _ in range(threads)]

    def work(k: int) -> None:
        for _ in range(calls):
            fn(x, outs[k])
    ths = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    t0 = time.perf_counter()
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return time.perf_counter() - t0


CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from rt_runtime.config.stack import load_stack
from rt_runtime.replay import replay
from rt_runtime.replay.defaults import default_bag, default_config
r = replay(default_bag(), load_stack(default_config()), parallel=int(sys.argv[1]))
print(json.dumps({"wall_s": r.wall_s, "total_s": time.perf_counter() - t0, "digest": r.output_digest,
                  "clean": r.clean}))
"""


def replay_bench(argv: list[str]) -> None:
    """The built-in bag at --parallel 1 and 2 per kernel mode (and a baseline checkout): medians of 3 rounds."""
    import json
    import subprocess

    root = Path(__file__).resolve().parents[1]
    base = argv[argv.index("--baseline") + 1] if "--baseline" in argv else None
    modes = argv[argv.index("--modes") + 1].split(",") if "--modes" in argv else ["eager"]
    variants = [(f"{m}", str(root), m) for m in modes] + ([("baseline (TorchScript)", base, "eager")] if base else [])
    rows: dict[tuple[str, int], list[dict]] = {}
    for _ in range(3):
        for label, tree, mode in variants:
            for par in (1, 2):
                env = {**os.environ, "PYTHONPATH": tree, "RT_RUNTIME_COMPILE": mode}
                p = subprocess.run([sys.executable, "-c", CHILD, str(par)], capture_output=True, text=True, cwd=tree,
                                   env=env, timeout=1800)
                if p.returncode != 0:
                    raise SystemExit(f"bench_kernels: replay {label} -p{par} failed:\n{p.stderr[-1500:]}")
                rows.setdefault((label, par), []).append(json.loads(p.stdout.strip().splitlines()[-1]))
    print(f"built-in bag replay; {os.cpu_count()} CPU(s); medians of 3 rounds, interleaved; torch {torch.__version__}")
    print(f"{'kernels':<24} {'parallel':>8} {'wall s':>7} {'process s':>9} {'clean':>5}  digest")
    for (label, par), rs in rows.items():
        digests = {r["digest"][:12] for r in rs}
        print(f"{label:<24} {par:>8} {statistics.median(r['wall_s'] for r in rs):>7.2f} "
              f"{statistics.median(r['total_s'] for r in rs):>9.2f} {str(all(r['clean'] for r in rs)):>5}  "
              f"{','.join(sorted(digests))}")


def main() -> None:
    if "--replay" in sys.argv:
        return replay_bench(sys.argv)
    torch.set_num_threads(1)
    print(f"kernel modes; {os.cpu_count()} CPU(s); medians of {REPEATS}; one torch thread; torch {torch.__version__}")
    print(f"{'op':<7} {'mode':<12} {'per call us':>11} {'1 thread s':>10} {'2 threads s':>11} {'scaling':>8} "
          f"{'bit-equal':>9} {'max |diff|':>10} {'build s':>8} {'allocs/call':>11} {'KiB/call':>9}")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")   # cold builds
        for op, (fn, make, shape, calls) in OPS.items():
            x = make()
            ref = torch.empty(shape)
            fn(x, ref)
            for mode in MODES:
                out = torch.empty(shape)
                try:
                    c, build_s = build(mode, fn, x, out, cache)
                except Exception as e:  # noqa: BLE001 - a mode that cannot build this op is a row, not a stop
                    print(f"{op:<7} {mode:<12} failed to build: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
                    continue
                c(x, out)
                equal = bool(torch.equal(out, ref))
                t0 = time.perf_counter()
                c(x, out)
                n = max(calls, int(0.3 / max(time.perf_counter() - t0, 1e-7)))   # one thread runs >= 0.3 s
                diff = float((out - ref).abs().max())
                n_alloc, b_alloc = allocations(c, x, out)
                one = statistics.median(timed(c, x, shape, 1, n) for _ in range(REPEATS))
                two = statistics.median(timed(c, x, shape, 2, n) for _ in range(REPEATS))
                print(f"{op:<7} {mode:<12} {one / n * 1e6:>11.1f} {one:>10.3f} {two:>11.3f} {2 * one / two:>7.2f}x "
                      f"{'yes' if equal else 'no':>9} {diff:>10.1e} {build_s:>8.2f} {n_alloc:>11.0f} "
                      f"{b_alloc / 1024:>9.1f}", flush=True)


if __name__ == "__main__":
    main()
