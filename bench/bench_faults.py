"""Safety benches: what time redundancy costs, how long the default campaign takes, and whether a
long simulated drive leaks (resident memory at the start and end of a looped replay).

1. Redundancy overhead: the planner graph alone, one run vs a dual redundant job (measured).
2. The default campaign (config/campaign.yaml): wall time and runs. Skipped with BENCH_QUICK.
3. Soak: the built-in scenario's first 3 s replayed in a loop through ONE runtime on the
   VirtualClock with the ops' measured cost; RSS after the first loop (warm) and the last.
   ``RT_BENCH_SOAK_S`` sets the simulated duration (default 120 s; 3600 for "one hour").
Anchors in the same run: a plain GraphExecutor job for (1); the first loop's RSS for (3).
"""
from __future__ import annotations

import os
import statistics
import time

from leak_audit import leaked, snapshot, soak  # bench/leak_audit.py, beside this script
from rt_runtime.config.stack import build_bindings
from rt_runtime.exec import GraphExecutor
from rt_runtime.exec.warmup import synthetic_inputs
from rt_runtime.replay.defaults import default_bag, default_config
from rt_runtime.faults.campaign import load_campaign, render, run_campaign, stack_under_test
from rt_runtime.faults.harness import Harness, Scenario
from rt_runtime.safety.redundancy import RedundantExecutor
from rt_runtime.safety.spec import RedundancySpec

QUICK = bool(os.environ.get("BENCH_QUICK"))
SOAK_S = float(os.environ.get("RT_BENCH_SOAK_S", "20" if QUICK else "120"))


def redundancy_overhead(cfg) -> None:  # noqa: ANN001
    """Median job time: the planner graph once, and as a dual redundant job (copies + compare)."""
    bindings, _ = build_bindings(cfg)
    b = next(b for b in bindings if b.name == "planning")
    plain = GraphExecutor(b.graph)
    dual = RedundantExecutor(b.graph, RedundancySpec(), b.fallback)
    inputs = synthetic_inputs(b.graph)
    for ex in (plain, dual):
        for _ in range(3):
            ex.run(inputs)
    samples: dict[str, list[int]] = {"single": [], "dual": []}
    for _ in range(30):   # interleaved, so a load change on a shared machine hits both alike
        for name, ex in (("single", plain), ("dual", dual)):
            t0 = time.perf_counter_ns()
            ex.run(inputs)
            samples[name].append(time.perf_counter_ns() - t0)
    times = {k: statistics.median(v) / 1e6 for k, v in samples.items()}
    print(f"planner job: single {times['single']:.2f} ms, dual {times['dual']:.2f} ms "
          f"({times['dual'] / times['single']:.2f}x; arenas {plain.arena_bytes} B -> {dual.arena_bytes} B)")


def main() -> None:
    bag = default_bag()
    campaign = load_campaign(os.path.join(os.path.dirname(default_config()), "campaign.yaml"))
    cfg = stack_under_test(default_config(), campaign)
    redundancy_overhead(cfg)

    if not QUICK:
        t0 = time.perf_counter()
        result = run_campaign(campaign, cfg, bag)
        print(render(result))
        print(f"default campaign: {result.runs} runs, {time.perf_counter() - t0:.1f} s wall")

    before = snapshot()
    sc = Scenario(bag, cfg, 3_000_000_000)
    h = Harness(cfg, sc, campaign.planner)
    loops = max(2, int(SOAK_S / 3))
    t0 = time.perf_counter()
    rss = soak(h, loops)
    wall = time.perf_counter() - t0
    sc.close()
    del h
    after = snapshot()
    mb = [r / 2**20 for r in rss]
    print(f"soak: {loops} loops = {loops * 3} s simulated in {wall:.1f} s wall; RSS after loop 1 {mb[0]:.1f} MiB, "
          f"after the last {mb[-1]:.1f} MiB (growth {mb[-1] - mb[0]:+.1f} MiB, max {max(mb):.1f} MiB); "
          f"leaked objects: {leaked(before, after) or 'none'}")
    marks = [0, len(mb) // 4, len(mb) // 2, 3 * len(mb) // 4, len(mb) - 1]
    print("RSS over the soak: " + ", ".join(f"{(i + 1) * 3} s {mb[i]:.1f} MiB" for i in marks))


if __name__ == "__main__":
    main()
