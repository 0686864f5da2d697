"""What detecting faults costs: the configured detection (config/stack.yaml: output invariants on every
task) against no detection and against full duplication (dual, bit-exact, on every task).

Per variant, side by side in one run:
* the analysis: `rt-runtime check`'s utilization and verdict on the budgets (what the schedule pays);
* the CPU: the built-in scenario's first ``RT_BENCH_SAFETY_S`` seconds (default 3) replayed by the
  campaign harness (one thread; ops take no virtual time, so every variant runs every job once,
  also the one that would not fit its budgets), CPU time of the process per simulated second, the
  median of ``RT_BENCH_REPEATS`` (default 3) runs, interleaved so load on a shared machine hits
  every variant alike. The anchor is the variant without detection, measured in the same run.
* the checks themselves: the median CPU time of the ``invariants`` step per job, per task.
"""
from __future__ import annotations

import copy
import os
import statistics
import time

from rt_runtime.analysis import analyze_taskset
from rt_runtime.config.stack import parse_stack
from rt_runtime.config.taskset import load_yaml, parse_taskset
from rt_runtime.replay.defaults import default_bag, default_config
from rt_runtime.safety.harness import Harness, Scenario
from rt_runtime.sched import zero_cost

SECONDS = float(os.environ.get("RT_BENCH_SAFETY_S", "3"))
REPEATS = int(os.environ.get("RT_BENCH_REPEATS", "3"))


def variants(doc: dict) -> dict[str, dict]:
    """The stack three ways: no detection, as configured, every task dual."""
    none, dual = copy.deepcopy(doc), copy.deepcopy(doc)
    for t in none["tasks"]:
        t.pop("redundancy", None)
    for t in dual["tasks"]:
        t["redundancy"] = {"mode": "dual", "compare": "exact"}
    return {"none": none, "configured": doc, "dual every task": dual}


def check_cost(h: Harness) -> dict[str, float]:
    """Median CPU time (us) of each task's ``invariants`` step, from one run measuring every step."""
    seen: dict[str, list[int]] = {}

    def record(task: str, job: int, i: int, op, measured: int) -> int:  # noqa: ANN001
        if op.name == "invariants":
            seen.setdefault(task, []).append(measured)
        return h.budget(task, job, i, op, measured)

    record.measure = time.thread_time_ns   # type: ignore[attr-defined]
    record.logical = True                  # type: ignore[attr-defined]
    h.run(base_cost=record)
    return {t: statistics.median(v) / 1e3 for t, v in sorted(seen.items())}


def main() -> None:
    """Print the table."""
    source = default_config()
    bag = default_bag()
    docs = variants(load_yaml(source))
    harnesses, scenarios, rows = {}, [], {}
    for name, doc in docs.items():
        policy, tasks, chains = parse_taskset(copy.deepcopy(doc), str(source))
        rep = analyze_taskset(tasks, policy, chains)
        cfg = parse_stack(copy.deepcopy(doc), str(source))
        sc = Scenario(bag, cfg, int(SECONDS * 1e9))
        scenarios.append(sc)
        harnesses[name] = Harness(cfg, sc, "planning")
        rows[name] = {"util": rep.utilization, "ok": rep.schedulable, "cpu": []}
    for h in harnesses.values():   # warm-up: first-call costs out of the figures
        h.run(base_cost=zero_cost)
    for _ in range(REPEATS):
        for name, h in harnesses.items():
            t0 = time.process_time_ns()
            rec = h.run(base_cost=zero_cost)
            rows[name]["cpu"].append((time.process_time_ns() - t0) / 1e6 / SECONDS)
            assert rec.crash is None, rec.crash
    checks = check_cost(harnesses["configured"])
    for sc in scenarios:
        sc.close()
    base = statistics.median(rows["none"]["cpu"])
    print(f"detection cost: {SECONDS:g} s of {bag} per run, median of {REPEATS} runs (CPU ms per simulated s)\n")
    print(f"{'variant':<18}{'check U':>9}{'verdict':>16}{'CPU ms/s':>10}{'vs none':>9}")
    for name, r in rows.items():
        cpu = statistics.median(r["cpu"])
        print(f"{name:<18}{r['util']:>9.3f}{'schedulable' if r['ok'] else 'NOT schedulable':>16}{cpu:>10.1f}"
              f"{(cpu / base - 1) * 100:>+8.1f}%")
    print("\ninvariant checks, median CPU per job (us): " + ", ".join(f"{t} {us:.0f}" for t, us in checks.items()))


if __name__ == "__main__":
    main()
