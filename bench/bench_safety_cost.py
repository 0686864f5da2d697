"""What detecting faults costs: the configured detection (config/stack.yaml: output invariants on every
task) against no detection and against full duplication (dual, bit-exact, on every task).

Per variant, side by side in one run:
* the analysis: `rt-runtime check`'s utilization and verdict on the budgets (what the schedule pays);
* the CPU: the built-in scenario's first ``RT_BENCH_SAFETY_S`` seconds (default 3) replayed by the
  campaign harness (one thread; ops take no virtual time, so every variant runs every job once,
  also the one that would not fit its budgets), CPU time of the process per simulated second, the
  median of ``RT_BENCH_REPEATS`` (default 3) runs, interleaved so load on a shared machine hits
  every variant alike. The anchor is the variant without detection, measured in the same run.
* the checks themselves: the median CPU time of the ``invariants`` step per job, per task, in the
  runtime; and, on every checked job's outputs of that run, the checks as the executor runs them
  (``safety/screen.py``'s compiled pass, the checks of ``invariants.py`` only when it flags
  something) against the checks of ``invariants.py`` run on every job as before: from this checkout,
  or from ``--baseline DIR`` (another checkout, e.g. the unchanged head), timed interleaved, warm
  (job after job) and cold (the caches evicted before each job, as after the job's kernels).

Run: ``PYTHONPATH=. python bench/bench_safety_cost.py [--baseline DIR]``
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import numpy as np

from rt_runtime.analysis import analyze_taskset
from rt_runtime.config.stack import parse_stack
from rt_runtime.config.taskset import load_yaml, parse_taskset
from rt_runtime.replay.defaults import default_bag, default_config
from rt_runtime.safety import invariants
from rt_runtime.faults.harness import Harness, Scenario
from rt_runtime.safety.screen import Screen
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


def checked_outputs(h: Harness) -> list[tuple[Screen, dict[str, Any]]]:
    """What every check step of one run saw: its task's screen and a copy of the outputs it checked."""
    checked: list[tuple[Screen, dict[str, Any]]] = []

    def holds(screen: Screen, outputs: dict[str, Any]) -> bool:
        checked.append((screen, {k: v.copy() for k, v in outputs.items()}))
        return screen_holds(screen, outputs)

    screen_holds, Screen.holds = Screen.holds, holds   # type: ignore[method-assign]
    try:
        h.run(base_cost=zero_cost)
    finally:
        Screen.holds = screen_holds        # type: ignore[method-assign]
    return checked


def load_invariants(root: Path) -> ModuleType:
    """``rt_runtime/safety/invariants.py`` of another checkout, loaded by file (it imports only numpy)."""
    spec = importlib.util.spec_from_file_location("baseline_invariants", root / "rt_runtime/safety/invariants.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


class Evict:
    """A pass over 32 MB between two checks: as after a job's kernels, the caches hold none of the code
    or data the checks touch (where each numpy call costs tens of us)."""

    def __init__(self) -> None:
        self.buf = np.zeros(4 << 20)

    def __call__(self) -> None:
        self.buf += 1.0


def check_ways(doc: dict, checked: list[tuple[Screen, dict[str, Any]]], before: ModuleType,
               rounds: int = 3) -> dict[str, tuple[int, dict[str, float], int]]:
    """Per task: us per job of the checks before (every job) and now (screen, checks when flagged),
    warm (job after job) and cold (the caches evicted before each job), the minimum over ``rounds``
    interleaved passes over the same outputs; with the jobs, and those the screen flagged. Asserts
    that both ways give every job the same verdict."""
    specs = {t["name"]: t["redundancy"]["checks"] for t in doc["tasks"] if "redundancy" in t}
    task_of = {tuple(specs[t]): t for t in specs}
    jobs: dict[str, list[tuple[Screen, dict[str, Any]]]] = {}
    for screen, outputs in checked:
        jobs.setdefault(task_of[tuple(p.checks.output for p in screen.plans)], []).append((screen, outputs))
    evict = Evict()
    out = {}
    for task, runs in sorted(jobs.items()):
        old = before.parse_checks(specs[task])
        new = tuple(p.checks for p in runs[0][0].plans)

        def now(screen: Screen, o: dict[str, Any]) -> Any:
            return None if screen.holds(o) else invariants.violation(o, new)

        ways: dict[str, Callable[[Screen, dict[str, Any]], Any]] = {
            "before": lambda _, o: before.violation(o, old), "now": now}
        best = {f"{w} {c}": float("inf") for c in ("warm", "cold") for w in ways}
        for _ in range(rounds):
            for w, fn in ways.items():
                t0 = time.thread_time_ns()
                for screen, o in runs:
                    fn(screen, o)
                best[f"{w} warm"] = min(best[f"{w} warm"], (time.thread_time_ns() - t0) / len(runs) / 1e3)
                spent = 0
                for screen, o in runs:
                    evict()
                    t0 = time.thread_time_ns()
                    fn(screen, o)
                    spent += time.thread_time_ns() - t0
                best[f"{w} cold"] = min(best[f"{w} cold"], spent / len(runs) / 1e3)
        flagged = sum(not screen.holds(o) for screen, o in runs)
        assert all(before.violation(o, old) == now(screen, o) for screen, o in runs), task   # same verdicts
        out[task] = (len(runs), best, flagged)
    return out


def main() -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="another checkout: its invariants.py is the 'before' of the checks")
    args = ap.parse_args()
    before = load_invariants(args.baseline) if args.baseline else invariants
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
    checked = checked_outputs(harnesses["configured"])
    ways = check_ways(docs["configured"], checked, before)
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
    print(f"\nthe checks on every checked job's outputs of that run, us per job (CPU, best of 3 interleaved; "
          f"cold: caches evicted before each job); before: {args.baseline or 'this checkout'}'s invariants.py "
          "on every job")
    print(f"{'task':<18}{'jobs':>6}{'warm before':>13}{'now':>7}{'x':>7}{'cold before':>13}{'now':>7}{'x':>7}"
          f"{'flagged':>9}")
    for task, (jobs, t, flagged) in ways.items():
        print(f"{task:<18}{jobs:>6}" + "".join(f"{t['before ' + c]:>13.1f}{t['now ' + c]:>7.1f}"
                                               f"{t['before ' + c] / t['now ' + c]:>6.1f}x" for c in ("warm", "cold"))
              + f"{flagged:>9}")


if __name__ == "__main__":
    main()
