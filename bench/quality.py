"""Quality of the reference stack against the simulator's ground truth, per scenario.

Records each scenario once (seed 7, 10 s by default; cached under ``$RT_RUNTIME_CACHE``, see
``rt_runtime.replay.defaults.cache_dir``), replays it through config/stack.yaml with the
prediction, planning and minimal-risk graphs given that scenario's road layout
(``pipelines.stack.with_road``), and prints what ``rt_runtime.replay.quality`` measures: LiDAR and
camera detection precision / recall, tracked-object precision / recall, CLEAR MOT tracking figures,
and open-loop planning figures; then the collision-free rate over all scenarios (target 100 %).
The matching rules are in docs/QUALITY.md. Replays in virtual time are deterministic, so one run
per scenario is the default; with ``--repeat N`` each figure is the median of N runs.

With ``--seeds`` (``1-12``, ``3,8``, ``1-4,9``) every scenario is recorded and replayed once per
seed instead, and one line per run and the worst of each figure (with its seed) are printed, with
the targets of issue 17 checked on every run (``TARGETS``): a stack tuned on one seed shows here
what a stranger's seed does to it.

Run: ``PYTHONPATH=. python bench/quality.py [--seconds S] [--seed N | --seeds LIST] [--repeat N]
[--json FILE] [--stack-road] [--cost zero|measured] [scenario ...]`` (``--stack-road``:
config/stack.yaml's own road layout for every scenario, as ``rt-runtime replay`` uses it;
``--cost``: see ``COSTS``).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

from pipelines.stack import with_road  # noqa: E402
from rt_runtime.commands.args import OneLineParser  # noqa: E402
from rt_runtime.config.stack import StackConfig, parse_stack  # noqa: E402
from rt_runtime.config.taskset import load_yaml  # noqa: E402
from rt_runtime.replay import replay  # noqa: E402
from rt_runtime.replay.defaults import cache_dir, default_config  # noqa: E402
from rt_runtime.replay.quality import quality_from_outputs  # noqa: E402
from rt_runtime.sched import measured_cost, zero_cost  # noqa: E402
from rt_runtime.sim import SCENARIOS, build_scenario, record  # noqa: E402

SEED = 7
SECONDS = 10.0
# Virtual time advances by zero per op (default: the LET outputs of a run without timing faults, the
# same on any machine at any load) or by the measured op durations (what this machine would do:
# a deadline miss here degrades planning to the minimal-risk stop, and the figures with it).
COSTS = {"zero": zero_cost, "measured": measured_cost}

# (label, path in the quality document, format)
ROWS: list[tuple[str, tuple[str, ...], str]] = [
    ("LiDAR precision", ("detection", "lidar", "precision"), "{:.3f}"),
    ("LiDAR recall", ("detection", "lidar", "recall"), "{:.3f}"),
    ("LiDAR precision @4 m", ("detection", "lidar", "precision_loose"), "{:.3f}"),
    ("LiDAR recall @4 m", ("detection", "lidar", "recall_loose"), "{:.3f}"),
    ("camera precision", ("detection", "camera", "precision"), "{:.3f}"),
    ("camera recall", ("detection", "camera", "recall"), "{:.3f}"),
    ("camera class accuracy", ("detection", "camera", "class_accuracy"), "{:.3f}"),
    ("tracks precision", ("detection", "precision"), "{:.3f}"),
    ("tracks recall", ("detection", "recall"), "{:.3f}"),
    ("MOTA", ("tracking", "mota"), "{:.3f}"),
    ("ID switches", ("tracking", "id_switches"), "{:d}"),
    ("track position RMSE m", ("tracking", "position_rmse_m"), "{:.2f}"),
    ("track class accuracy", ("tracking", "class_accuracy"), "{:.3f}"),
    ("plans", ("planning", "trajectories"), "{:d}"),
    ("collision-free rate", ("planning", "collision_free_rate"), "{:.3f}"),
    ("min clearance m", ("planning", "min_clearance_m"), "{:.2f}"),
    ("max jerk m/s^3", ("planning", "max_jerk_mps3"), "{:.1f}"),
    ("mean planned speed m/s", ("planning", "mean_planned_speed_mps"), "{:.1f}"),
    ("planned distance 3 s m", ("planning", "mean_planned_distance_m"), "{:.1f}"),
    ("progress ratio", ("planning", "progress_ratio"), "{:.2f}"),
    ("minimal-risk plans", ("planning", "minimal_risk_plans"), "{:d}"),
]


# The sweep's columns: (label, path in the quality document, format, target (op, bound) or None, lower is worse).
SWEEP_ROWS: list[tuple[str, tuple[str, ...], str, tuple[str, float] | None, bool]] = [
    ("tracks P", ("detection", "precision"), "{:.3f}", (">=", 0.9), True),
    ("tracks R", ("detection", "recall"), "{:.3f}", (">=", 0.9), True),
    ("MOTA", ("tracking", "mota"), "{:.3f}", (">=", 0.8), True),
    ("ID sw", ("tracking", "id_switches"), "{:d}", None, False),
    ("LiDAR P", ("detection", "lidar", "precision"), "{:.3f}", None, True),
    ("LiDAR R", ("detection", "lidar", "recall"), "{:.3f}", None, True),
    ("camera P", ("detection", "camera", "precision"), "{:.3f}", None, True),
    ("camera R", ("detection", "camera", "recall"), "{:.3f}", None, True),
    ("coll-free", ("planning", "collision_free_rate"), "{:.3f}", (">=", 1.0), True),
    ("min clr m", ("planning", "min_clearance_m"), "{:.2f}", None, True),
]
TARGETS = "tracked objects precision and recall >= 0.9, MOTA >= 0.8, collision-free 100 %"
MAX_SEED = 2**32 - 1


def seed_list(text: str) -> list[int]:
    """An argparse type: seeds as ranges and single values, ``1-12`` or ``3,8`` or ``1-4,9`` (ascending, no repeats)."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi) if hi else int(lo)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected seeds like 1-12 or 3,8, found {text!r}") from None
        if not 0 <= a <= b <= MAX_SEED:
            raise argparse.ArgumentTypeError(f"expected ranges low-high with 0 <= low <= high <= {MAX_SEED}, "
                                             f"found {part.strip()!r} in {text!r}")
        seeds += range(a, b + 1)
    if len(seeds) > 1000:
        raise argparse.ArgumentTypeError(f"expected at most 1000 seeds, found {len(seeds)} in {text!r}")
    return sorted(set(seeds))


def scenario_bag(name: str, seed: int = SEED, seconds: float = SECONDS) -> Path:
    """The scenario's recording, generated once into the cache folder (same naming as the demo's bag)."""
    path = cache_dir() / f"{name}_seed{seed}_{seconds:g}s"
    if not (path / "metadata.yaml").is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".partial{os.getpid()}")
        if tmp.exists():
            shutil.rmtree(tmp)
        print(f"recording {name} ({seconds:g} s, seed {seed}) into {path}", file=sys.stderr)
        record(tmp, name, seconds, seed, "mcap", workers=min(os.cpu_count() or 1, 2))
        try:
            tmp.rename(path)
        except OSError:  # another process finished it first
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def scenario_config(name: str, seed: int = SEED, stack_road: bool = False) -> StackConfig:
    """config/stack.yaml with the scenario's road layout in prediction, planning and minimal-risk."""
    src = default_config()
    doc = load_yaml(src)
    if stack_road:
        return parse_stack(doc, str(src))
    return parse_stack(with_road(doc, build_scenario(name, seed).road), f"{src} (road of {name})")


def get(doc: dict[str, Any] | None, path: tuple[str, ...]) -> Any:
    """A nested value, None where any level is missing."""
    for key in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def median_doc(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per leaf the median over runs (the first run's value where it is not a number)."""
    first = docs[0]
    if isinstance(first, dict):
        return {k: median_doc([d.get(k) for d in docs]) for k in first}
    nums = [d for d in docs if isinstance(d, (int, float)) and not isinstance(d, bool)]
    if len(nums) == len(docs) and nums:
        m = statistics.median(nums)
        return int(m) if all(isinstance(d, int) for d in nums) and m == int(m) else m
    return first


def run(name: str, seed: int, seconds: float, repeat: int = 1, stack_road: bool = False,
        cost: str = "zero") -> dict[str, Any]:
    """Replay one scenario ``repeat`` times: its quality (medians), timing verdict and wall time."""
    bag = scenario_bag(name, seed, seconds)
    cfg = scenario_config(name, seed, stack_road)
    docs, walls, det, digests = [], [], [], set()
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = replay(bag, cfg, quality=quality_from_outputs, cost=COSTS[cost])
        walls.append(time.perf_counter() - t0)
        docs.append(r.quality or {})
        det.append(r.deterministic)
        digests.add(r.output_digest)
    return {"quality": median_doc(docs), "deterministic": all(det), "digests": len(digests),
            "wall_s": statistics.median(walls)}


def fmt(value: Any, spec: str) -> str:
    """One table cell."""
    if value is None:
        return "n/a"
    try:
        return spec.format(value)
    except (ValueError, TypeError):
        return str(value)


def missed_targets(doc: dict[str, Any]) -> list[str]:
    """The targets (``SWEEP_ROWS``) a run's quality document misses, as "label value" texts."""
    out = []
    for label, path, spec, target, _ in SWEEP_ROWS:
        value = get(doc, path)
        if target is not None and (value is None or value < target[1]):
            out.append(f"{label} {fmt(value, spec)}")
    return out


def worst(by_seed: dict[int, dict[str, Any]], path: tuple[str, ...], lower_is_worse: bool) -> tuple[Any, int] | None:
    """The worst value of one figure over seeds and the (first) seed it came from; None if never measured."""
    values = [(v, seed) for seed, r in by_seed.items() if (v := get(r["quality"], path)) is not None]
    if not values:
        return None
    return (min if lower_is_worse else max)(values, key=lambda vs: vs[0])


def print_sweep(results: dict[str, dict[int, dict[str, Any]]], seeds: list[int], args: argparse.Namespace,
                wall_s: float) -> None:
    """One line per (scenario, seed), then the worst of each figure per scenario and over all, then the targets."""
    w = 12
    name_w = max(len(n) for n in results) + 2
    spans, start = [], seeds[0]
    for a, b in zip(seeds, seeds[1:] + [None]):
        if b != a + 1:
            spans.append(f"{start}-{a}" if a != start else f"{a}")
            start = b
    print(f"quality over seeds {','.join(spans)} ({len(seeds)} seeds): {args.seconds:g} s per scenario, "
          f"{'median of ' + str(args.repeat) + ' runs' if args.repeat > 1 else 'one run each'}, "
          f"road: {'config/stack.yaml' if args.stack_road else 'per scenario'}, op cost: {args.cost}")
    print(f"{'scenario':<{name_w}}{'seed':>6}" + "".join(f"{label:>{w}}" for label, *_ in SWEEP_ROWS)
          + f"{'determ.':>{w}}")
    for name, by_seed in results.items():
        for seed, r in by_seed.items():
            print(f"{name:<{name_w}}{seed:>6}" + "".join(f"{fmt(get(r['quality'], path), spec):>{w}}"
                                                      for _, path, spec, _, _ in SWEEP_ROWS)
                  + f"{str(r['deterministic']):>{w}}")
    print("\nworst (seed; on the line 'all': scenario initials and seed)")
    everything = {(name, seed): r for name, by_seed in results.items() for seed, r in by_seed.items()}
    groups = [(name, {seed: r for seed, r in by_seed.items()}) for name, by_seed in results.items()]
    for name, by_seed in groups + ([("all", dict(enumerate(everything.values())))] if len(results) > 1 else []):
        cells = []
        for _, path, spec, _, lower in SWEEP_ROWS:
            found = worst(by_seed, path, lower)
            if found is None:
                cells.append("n/a")
            elif name == "all":   # a run over all scenarios: its scenario's initials and seed
                key = list(everything)[found[1]]
                cells.append(f"{fmt(found[0], spec)} {''.join(p[0] for p in key[0].split('_'))}{key[1]}")
            else:
                cells.append(f"{fmt(found[0], spec)} ({found[1]})")
        print(f"{name:<{name_w}}{'':>6}" + "".join(f"{c:>{w}}" for c in cells))
    failing = [f"{name} seed {seed} ({', '.join(m)})" for (name, seed), r in everything.items()
               if (m := missed_targets(r["quality"]))]
    print(f"\ntargets ({TARGETS}): " + (f"met by all {len(everything)} runs" if not failing else
                                         f"missed by {len(failing)} of {len(everything)}: " + "; ".join(failing)))
    nondet = [f"{name} seed {seed}" for (name, seed), r in everything.items() if not r["deterministic"]]
    print(f"deterministic: {'every run' if not nondet else 'NOT ' + ', '.join(nondet)}; {wall_s:.0f} s in all")


def main() -> None:
    ap = OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenarios", nargs="*", default=sorted(SCENARIOS))
    ap.add_argument("--seconds", type=float, default=SECONDS)
    seed = ap.add_mutually_exclusive_group()
    seed.add_argument("--seed", type=int, default=SEED)
    seed.add_argument("--seeds", type=seed_list, help="a sweep: seeds as 1-12, 3,8 or 1-4,9; the worst of each figure")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--stack-road", action="store_true", help="config/stack.yaml's road layout for every scenario")
    ap.add_argument("--cost", choices=sorted(COSTS), default="zero", help="the replay's op cost model (virtual time)")
    ap.add_argument("--json", help="also write the full quality documents to this file")
    args = ap.parse_args()
    unknown = [n for n in args.scenarios if n not in SCENARIOS]
    if unknown:
        ap.error(f"argument scenarios: expected one of {', '.join(sorted(SCENARIOS))}, found {unknown[0]!r}")
    t0 = time.perf_counter()
    if args.seeds:
        results_by_seed: dict[str, dict[int, dict[str, Any]]] = {}
        for name in args.scenarios:
            for s in args.seeds:
                r = run(name, s, args.seconds, args.repeat, args.stack_road, args.cost)
                results_by_seed.setdefault(name, {})[s] = r
                print(f"{name} seed {s}: {r['wall_s']:.0f} s", file=sys.stderr, flush=True)
        print_sweep(results_by_seed, args.seeds, args, time.perf_counter() - t0)
        if args.json:
            Path(args.json).write_text(json.dumps({n: {str(s): r for s, r in d.items()}
                                                   for n, d in results_by_seed.items()}, indent=1, default=float))
        return
    results = {name: run(name, args.seed, args.seconds, args.repeat, args.stack_road, args.cost)
               for name in args.scenarios}
    names = list(results)
    width = max(12, *(len(n) for n in names))
    print(f"quality vs ground truth: seed {args.seed}, {args.seconds:g} s per scenario, "
          f"{'median of ' + str(args.repeat) + ' runs' if args.repeat > 1 else 'one run each'}, "
          f"road: {'config/stack.yaml' if args.stack_road else 'per scenario'}, op cost: {args.cost}")
    print(f"{'':<24}" + "".join(f"{n:>{width + 2}}" for n in names))
    for label, path, spec in ROWS:
        print(f"{label:<24}" + "".join(f"{fmt(get(results[n]['quality'], path), spec):>{width + 2}}" for n in names))
    print(f"{'deterministic':<24}" + "".join(f"{str(results[n]['deterministic']):>{width + 2}}" for n in names))
    print(f"{'replay wall s':<24}" + "".join(f"{results[n]['wall_s']:>{width + 2}.1f}" for n in names))
    plans = [get(results[n]["quality"], ("planning", "trajectories")) or 0 for n in names]
    free = [(get(results[n]["quality"], ("planning", "collision_free_rate")) or 0.0) * p for n, p in zip(names, plans)]
    clear = [c for n in names if (c := get(results[n]["quality"], ("planning", "min_clearance_m"))) is not None]
    total = sum(plans)
    print(f"\ncollision-free over all scenarios: {sum(free) / total * 100 if total else float('nan'):.1f} % of "
          f"{total} plans (target 100 %); min clearance {min(clear) if clear else float('nan'):.2f} m; "
          f"{time.perf_counter() - t0:.0f} s in all")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
