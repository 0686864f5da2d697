"""Where the eager kernels lose to TorchScript: each reference kernel on the arguments it got in a replay.

    python bench/bench_kernel_overhead.py [--calls 8] [--rounds 3] [--threads _predict,_clearance,ground]

Replays the built-in bag once (eager, serial driver), keeping copies of each kernel's first ``--calls``
argument lists after the warm-up (real inputs, not the warm-up's zeros: ``rt_runtime/exec/sample.py``); then, per kernel, one torch thread, thread CPU
time per call (median of ``--rounds`` interleaved rounds of 5 batches): its Python body in grad mode
(what an executor ran before 8386d7c), in inference mode (what it runs now), and the same body
scripted by TorchScript in grad mode (the kernels before 81ff194; an anchor, never used by the
runtime). The column "x calls" is the kernel's calls in the replay, so (eager - TorchScript) x calls
is what the kernel costs the replay against TorchScript. The camera net is left out (it ran in
inference mode in both, and its convolutions cost the same: 3.0 ms a call either way).

``--threads K1,K2``: instead, the named kernels' eager bodies (inference mode) on two threads at once,
each doing what one thread does alone, free or taking one shared lock per call: wall and process CPU
seconds, the cost of the GIL changing hands at every aten call (each releases it) when both threads run
Python between their calls.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

import torch  # noqa: E402

_kernel = importlib.import_module("rt_runtime.exec.kernel")


def _copy(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def record(keep: int) -> tuple[dict[Any, list[tuple[Any, ...]]], dict[Any, int]]:
    """One replay of the built-in bag: each kernel's first ``keep`` argument lists after the warm-up (copies)
    and its calls, by ``rt_runtime.exec.sample.sampling`` (what ``rt-runtime compile --bag`` measures on)."""
    from rt_runtime.config.stack import load_stack
    from rt_runtime.exec.sample import sampling
    from rt_runtime.replay import replay
    from rt_runtime.replay.defaults import default_bag, default_config

    with sampling(keep, "the built-in bag") as s:
        r = replay(default_bag(), load_stack(default_config()))
    by_name = {k.name: k for k in list(_kernel._ALL)}
    print(f"replayed the built-in bag: digest {r.output_digest[:12]}, {sum(s.calls.values())} kernel calls")
    return {by_name[n]: v for n, v in s.args.items()}, {by_name[n]: c for n, c in s.calls.items()}


def per_call(fn: Callable[..., Any], argsets: list[tuple[Any, ...]], mode: Callable[[], Any]) -> float:
    """Median thread-CPU seconds of one call of ``fn`` over ``argsets`` (copies), in ``mode``."""
    work = [_copy(a) for a in argsets]
    with mode():
        for a in work * 2:
            fn(*a)
        batches = []
        for _ in range(5):
            t0 = time.thread_time()
            for a in work * 3:
                fn(*a)
            batches.append((time.thread_time() - t0) / (3 * len(work)))
    return statistics.median(batches)


def threads(seen: dict[Any, list[tuple[Any, ...]]], names: list[str], rounds: int, n: int = 30) -> None:
    """Each named kernel: one thread doing 2n passes, two doing n each, free and under one lock."""
    import threading

    by_name = {k.name.rsplit(".", 1)[-1]: (k, v) for k, v in seen.items()}

    def work(k: Any, argsets: list[tuple[Any, ...]], passes: int, lock: Any) -> None:
        work_ = [_copy(a) for a in argsets]
        with torch.inference_mode():
            for _ in range(passes):
                for a in work_:
                    with lock or contextlib.nullcontext():
                        k.py(*a)

    def run(k: Any, v: list[tuple[Any, ...]], count: int, lock: Any) -> tuple[float, float]:
        ts = [threading.Thread(target=work, args=(k, v, 2 * n // count, lock)) for _ in range(count)]
        t0, c0 = time.perf_counter(), time.process_time()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return time.perf_counter() - t0, time.process_time() - c0

    print(f"two threads, load {os.getloadavg()[0]:.2f}; wall s / CPU s for the same work, medians of {rounds}")
    for name in names:
        k, v = by_name[name]
        got: dict[str, list[tuple[float, float]]] = {"one thread": [], "two threads": [], "two, one lock": []}
        for _ in range(rounds):
            got["one thread"].append(run(k, v, 1, None))
            got["two threads"].append(run(k, v, 2, None))
            got["two, one lock"].append(run(k, v, 2, threading.Lock()))
        print(f"{name:<14} " + "  ".join(f"{m} {statistics.median(w for w, _ in r):.3f} / "
                                          f"{statistics.median(c for _, c in r):.3f}" for m, r in got.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="", help="kernels (names after the module) run on two threads instead")
    a = ap.parse_args()
    seen, calls = record(a.calls)
    torch.set_num_threads(1)
    if a.threads:
        return threads(seen, a.threads.split(","), a.rounds)
    warnings.simplefilter("ignore", DeprecationWarning)   # torch.jit.script's: the anchor only
    rows = []
    for k, argsets in seen.items():
        if isinstance(k.py, torch.nn.Module):
            continue
        ts = torch.jit.script(k.py)
        t: dict[str, list[float]] = {"grad": [], "inference": [], "ts": []}
        for _ in range(a.rounds):
            t["grad"].append(per_call(k.py, argsets, contextlib.nullcontext))
            t["inference"].append(per_call(k.py, argsets, torch.inference_mode))
            t["ts"].append(per_call(ts, argsets, contextlib.nullcontext))
        rows.append((k.name.removeprefix("pipelines."), calls[k], *(statistics.median(v) * 1e6 for v in t.values())))
    print(f"torch {torch.__version__}, one thread, load {os.getloadavg()[0]:.2f}; us per call (thread CPU), "
          f"medians of {a.rounds} rounds")
    print(f"{'kernel':<34} {'x calls':>7} {'eager grad':>10} {'eager inf':>10} {'TorchScript':>11} "
          f"{'gap ms/replay':>13}")
    tot = [0.0, 0.0, 0.0]
    for name, n, g, i, s in sorted(rows, key=lambda r: -(r[3] - r[4]) * r[1]):
        print(f"{name:<34} {n:>7} {g:>10.1f} {i:>10.1f} {s:>11.1f} {(i - s) * n / 1e3:>13.1f}")
        tot = [tot[0] + g * n, tot[1] + i * n, tot[2] + s * n]
    print(f"{'all (s a replay)':<34} {'':>7} {tot[0] / 1e6:>10.3f} {tot[1] / 1e6:>10.3f} {tot[2] / 1e6:>11.3f} "
          f"{(tot[1] - tot[2]) / 1e3:>13.1f}")


if __name__ == "__main__":
    main()
