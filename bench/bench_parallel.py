"""Parallel commit (`replay --parallel N`): the built-in scenario with 1 and 2 threads computing, side by side.

Each replay runs in its own process (peak RSS is a per-process high-water mark), the variants
interleaved, ``RUNS`` rounds; the table has medians. The anchor, in the same run: the serial driver
(``parallel=0``: each op runs where the virtual clock books it, the replay loop before parallel
commit). Columns: wall time, speed-up over real time, ratio to ``--parallel 1``, the runtime's share
of the wall time (everything that is not op execution: 1 - op CPU / wall; with more than one thread
computing it no longer measures the runtime), the runtime's own CPU in the driver thread (its CPU
less the ops it computed itself: booking, channels, trace, egress encoding and the digest), the wall
time the driver waited for a result another thread computed, peak RSS, the publishes made on a bet
(``sched.optimistic``; in brackets the runs that lost one and replayed again), and whether every run
of every variant gave one digest.

    python bench/bench_parallel.py            # 3 rounds
    BENCH_QUICK=1 python bench/bench_parallel.py
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = 3 if not os.environ.get("BENCH_QUICK") else 1
# (label, parallel). The kernels run as the stack file says (`compile:`, eager by default, docs/REPLAY.md);
# the "Python op bodies" rows of issue 18 measured the TorchScript kernels against eager and are gone with them.
VARIANTS = (("serial driver (anchor)", 0), ("--parallel 1", 1), ("--parallel 2", 2))

CHILD = r"""
import json, resource, sys
from rt_runtime.config.stack import load_stack
from rt_runtime.replay import replay
from rt_runtime.replay.defaults import default_bag, default_config
r = replay(default_bag(), load_stack(default_config()), parallel=int(sys.argv[1]))
print(json.dumps({"wall_s": r.wall_s, "speedup": r.speedup, "share": r.runtime_share, "exec_s": r.exec_s,
                  "runtime_cpu_s": r.extra.get("runtime_cpu_s", r.extra.get("driver_cpu_s", 0.0) - r.exec_s),
                  "waited_s": r.extra.get("driver_waited_s", 0.0), "digest": r.output_digest,
                  "duration_s": r.duration_s, "clean": r.clean, "parallel": r.parallel,
                  "bets": r.extra.get("bets", 0), "lost": int("lost_bet" in r.extra),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(parallel: int) -> dict:
    """One replay in a fresh process; its JSON line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", CHILD, str(parallel)], capture_output=True, text=True, cwd=ROOT,
                       env=env, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"bench_parallel: the replay with parallel={parallel} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    from rt_runtime.replay.defaults import default_bag

    default_bag()   # generate the scenario once, outside the measured runs
    results: dict[str, list[dict]] = {label: [] for label, _ in VARIANTS}
    for _ in range(RUNS):
        for label, n in VARIANTS:
            results[label].append(run(n))
    med = statistics.median
    one = med(r["wall_s"] for r in results["--parallel 1"])
    digests = {r["digest"] for rs in results.values() for r in rs}
    r0 = results[VARIANTS[0][0]][0]
    print(f"built-in scenario ({r0['duration_s']:.1f} s of bag), {os.cpu_count()} cores; {RUNS} rounds, "
          f"variants interleaved, medians; one digest over all runs: {len(digests) == 1}")
    print(f"{'variant':<24} {'wall s':>7} {'x real':>7} {'vs -p1':>7} {'share':>7} {'ops cpu s':>9} "
          f"{'runtime cpu s':>13} {'driver waited s':>15} {'peak RSS MB':>11} {'bets (lost)':>11} {'clean':>6}")
    for label, _ in VARIANTS:
        rs = results[label]
        wall = med(r["wall_s"] for r in rs)
        print(f"{label:<24} {wall:>7.2f} {med(r['speedup'] for r in rs):>6.2f}x {one / wall:>6.2f}x "
              f"{med(r['share'] for r in rs) * 100:>6.1f}% {med(r['exec_s'] for r in rs):>9.2f} "
              f"{med(r['runtime_cpu_s'] for r in rs):>13.2f} {med(r['waited_s'] for r in rs):>15.2f} "
              f"{med(r['rss_mb'] for r in rs):>11.0f} "
              f"{med(r['bets'] for r in rs):>6.0f} ({sum(r['lost'] for r in rs)})"
              f"{str(all(r['clean'] for r in rs)):>7}")


if __name__ == "__main__":
    main()
