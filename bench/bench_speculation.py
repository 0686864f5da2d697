"""Speculative planning: hit rate, latency saved, work wasted and interference, per scenario.

Replays each scenario (10 s, seed 7; highway_cut_in is the built-in one) through config/stack.yaml
with the planner's ``speculate:`` key off (the anchor, same run) and on, on the virtual clock with
the default cost model (each op's CPU time). Latency is release -> trajectory available (the
planning job's response time; a hit makes it 0). Work wasted: speculative ops whose result was
never committed (the other hypotheses, restarted or abandoned ones), over the planner's own work.
Interference: the largest change of any other task's p99 response time with speculation on.
Then the validator's tolerance: the built-in scenario with config/stack.yaml's ``atol`` scaled down;
then the wall clock: the built-in scenario at real time with two worker threads, off and on (one
run each; speculation runs in the idle worker's slack, a real-time figure on a real machine).
"""
from __future__ import annotations

import os
import statistics

import numpy as np
from quality import scenario_bag, scenario_config

from rt_runtime.config.stack import parse_stack
from rt_runtime.config.taskset import load_yaml
from rt_runtime.replay import replay
from rt_runtime.replay.defaults import default_bag, default_config

RUNS = 3 if not os.environ.get("BENCH_QUICK") else 1
SCENARIOS = ("highway_cut_in", "stop_and_go", "pedestrian_crossing")
PLANNER_OPS = 4   # candidates, minimal-risk, clearance, select


def p(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def main() -> None:
    med = statistics.median
    print(f"{RUNS} runs per scenario and setting, medians; virtual clock, CPU-time cost model; config/stack.yaml")
    print(f"\n{'scenario':<20} {'p50 off':>8} {'p50 on':>7} {'p99 off':>8} {'p99 on':>7} {'hit rate':>9} "
          f"{'misses':>7} {'no hyp':>7} {'saved ms':>9} {'wasted':>7} {'late':>5} {'others p99':>11} "
          f"{'wall off/on':>12}")
    for name in SCENARIOS:
        bag, cfg = scenario_bag(name), scenario_config(name)
        runs = {on: [replay(bag, cfg, speculate=on) for _ in range(RUNS)] for on in (False, True)}
        resp = {on: [r.tasks["planning"].response_ns / 1e6 for r in runs[on]] for on in (False, True)}
        sps = [r.stats["planning"]["speculation"] for r in runs[True]]
        rate = med([s["hits"] / max(1, s["hits"] + s["misses"] + s["no_hypothesis"]) for s in sps])
        wasted = med([s["ops_wasted"] / (PLANNER_OPS * max(1, len(r.tasks["planning"].response_ns)))
                      for s, r in zip(sps, runs[True])])
        others = [t for t in runs[False][0].tasks if t != "planning"]
        delta = max(med([p(r.tasks[t].response_ns / 1e6, 99) for r in runs[True]])
                    - med([p(r.tasks[t].response_ns / 1e6, 99) for r in runs[False]]) for t in others)
        print(f"{name:<20} {med([p(x, 50) for x in resp[False]]):>8.2f} {med([p(x, 50) for x in resp[True]]):>7.2f} "
              f"{med([p(x, 99) for x in resp[False]]):>8.2f} {med([p(x, 99) for x in resp[True]]):>7.2f} "
              f"{rate * 100:>8.1f}% {med([s['misses'] for s in sps]):>7} {med([s['no_hypothesis'] for s in sps]):>7} "
              f"{med([s['latency_saved_ns'] / 1e6 for s in sps]):>9.1f} {wasted:>6.2f}x "
              f"{med([s['late_ops'] for s in sps]):>5} {delta:>+10.2f}ms "
              f"{med([r.wall_s for r in runs[False]]):>5.2f}/{med([r.wall_s for r in runs[True]]):.2f}")
        misses = sum(int(s["missed"]) for r in runs[True] for s in r.stats.values())
        if misses:
            print(f"  ({misses} deadline misses with speculation on)")
    doc = load_yaml(default_config())
    spec = next(e for e in doc["tasks"] if e["name"] == "planning")["speculate"]
    atol = spec["atol"]["odom"]
    print(f"\n{'atol x':>7} {'hits':>5} {'misses':>7} {'no hyp':>7}   (highway_cut_in, one run each)")
    for scale in (1.0, 0.3, 0.1, 0.01):
        spec["atol"] = {"odom": [a * scale for a in atol]}
        sp = replay(default_bag(), parse_stack(doc, "stack.yaml"), speculate=True).stats["planning"]["speculation"]
        print(f"{scale:>7g} {sp['hits']:>5} {sp['misses']:>7} {sp['no_hypothesis']:>7}")
    cfg = scenario_config("highway_cut_in")
    print(f"\n{'wall clock, 2 threads':<22} {'resp p50 ms':>12} {'resp p99 ms':>12} {'hits':>5} {'misses':>7} "
          f"{'others p99 max ms':>18} {'deadline misses':>16}")
    for on in (False, True):
        r = replay(default_bag(), cfg, speed=1.0, workers=2, speculate=on)
        resp = r.tasks["planning"].response_ns / 1e6
        sp = r.stats["planning"].get("speculation", {})
        others = max(p(r.tasks[t].response_ns / 1e6, 99) for t in r.tasks if t != "planning")
        print(f"{'speculation ' + ('on' if on else 'off'):<22} {p(resp, 50):>12.2f} {p(resp, 99):>12.2f} "
              f"{sp.get('hits', '-'):>5} {sp.get('misses', '-'):>7} {others:>18.2f} "
              f"{sum(int(s['missed']) for s in r.stats.values()):>16}")


if __name__ == "__main__":
    main()
