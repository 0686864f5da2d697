"""Why op bodies are kernels: one thread against two, Python body against TorchScript kernel.

A toy op shaped like the reference stack's (``STEPS`` small element-wise torch calls on a 64-float
tensor between Python lines), called ``CALLS`` times by one thread, then the same work twice over by
two threads at once. With the Python body the two threads trade the GIL between every two torch
calls; the kernel (``rt_runtime.exec.kernel``) is one call that runs in C++ without it. Also the
compile time of the kernel (``torch.jit.script``, once per process) and, in the same run, what
``torch.compile`` (the API torch points to instead of TorchScript) takes for the same function.
Medians of ``REPEATS``; one torch thread each, as runtime workers use.

    python bench/bench_kernels.py
    BENCH_QUICK=1 python bench/bench_kernels.py        # fewer repeats, no torch.compile
"""
from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

from rt_runtime.exec.kernel import Kernel  # noqa: E402

QUICK = bool(os.environ.get("BENCH_QUICK"))
STEPS, CALLS, REPEATS = 200, 200, (3 if QUICK else 7)


def body(x: torch.Tensor, out: torch.Tensor) -> None:
    y = x
    for _ in range(200):
        y = (y * 1.0001 + 0.5).clamp(-10.0, 10.0) - 0.5
    out.copy_(y)


def timed(fn, threads: int) -> float:
    """Seconds for ``threads`` threads each making CALLS calls at once."""
    x = torch.rand(64, generator=torch.Generator().manual_seed(0))
    outs = [torch.empty(64) for _ in range(threads)]

    def work(k: int) -> None:
        for _ in range(CALLS):
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
    k = Kernel(body)
    t0 = time.perf_counter()
    k.compile()
    compile_s = time.perf_counter() - t0
    rows = []
    for name, fn in (("Python body", body), ("kernel (TorchScript)", k)):
        fn(torch.zeros(64), torch.empty(64))
        one = statistics.median(timed(fn, 1) for _ in range(REPEATS))
        two = statistics.median(timed(fn, 2) for _ in range(REPEATS))
        rows.append((name, one, two, 2 * one / two))
    print(f"toy op: {STEPS} x 4 small torch calls on 64 floats, {CALLS} calls per thread; {os.cpu_count()} CPU(s); "
          f"medians of {REPEATS}; torch {torch.__version__}")
    print(f"{'body':<22} {'1 thread s':>10} {'2 threads s (2x work)':>22} {'scaling':>8}")
    for name, one, two, sc in rows:
        print(f"{name:<22} {one:>10.3f} {two:>22.3f} {sc:>7.2f}x")
    print(f"kernel vs Python on one thread: {rows[0][1] / rows[1][1]:.2f}x; TorchScript compile {compile_s:.3f} s")
    if not QUICK:
        t0 = time.perf_counter()
        c = torch.compile(body, dynamic=False)
        c(torch.zeros(64), torch.empty(64))
        print(f"torch.compile of the same function, first call: {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
