"""Kernel compile modes, measured: eager Python body, TorchScript (before, the anchor), torch.compile
(Inductor, default and with its C++ wrapper) and torch.export + AOTInductor.

Two reference-shaped ops: ``small``, ``STEPS`` x 4 small element-wise torch calls on 64 floats between
Python lines (the reference stack's kernels look like this: many short aten calls), and ``masked``, one
masked reduction over a 2M-float tensor (about 2 ms, one long aten call). For each mode: per-call
median (us), seconds for ``CALLS`` calls by one thread and for the same work twice over by two threads
at once (scaling = 2 x one / two: 2.0 means the call runs off the GIL), whether the output is
bit-identical to the eager body's, and the first build (compile) time. Medians of ``REPEATS``; one
torch thread each, as runtime workers use. Compiled artifacts go to a fresh temporary folder, so the
build times are cold.

    python bench/bench_kernels.py
    BENCH_QUICK=1 python bench/bench_kernels.py        # fewer repeats, eager and TorchScript only
    BENCH_MODES=eager,jit-cpp python bench/bench_kernels.py
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


def main() -> None:
    torch.set_num_threads(1)
    print(f"kernel modes; {os.cpu_count()} CPU(s); medians of {REPEATS}; one torch thread; torch {torch.__version__}")
    print(f"{'op':<7} {'mode':<12} {'per call us':>11} {'1 thread s':>10} {'2 threads s':>11} {'scaling':>8} "
          f"{'bit-equal':>9} {'max |diff|':>10} {'build s':>8}")
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
                diff = float((out - ref).abs().max())
                one = statistics.median(timed(c, x, shape, 1, calls) for _ in range(REPEATS))
                two = statistics.median(timed(c, x, shape, 2, calls) for _ in range(REPEATS))
                print(f"{op:<7} {mode:<12} {one / calls * 1e6:>11.1f} {one:>10.3f} {two:>11.3f} {2 * one / two:>7.2f}x "
                      f"{'yes' if equal else 'no':>9} {diff:>10.1e} {build_s:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
