"""Quality of the reference stack against the simulator's ground truth, per scenario.

Records each scenario once (seed 7, 10 s by default; cached under ``$RT_RUNTIME_CACHE``, see
``rt_runtime.replay.defaults.cache_dir``), replays it through config/stack.yaml with the
prediction, planning and minimal-risk graphs given that scenario's road layout
(``pipelines.stack.with_road``), and prints what ``rt_runtime.replay.quality`` measures: LiDAR and
camera detection precision / recall, tracked-object precision / recall, CLEAR MOT tracking figures,
and open-loop planning figures; then the collision-free rate over all scenarios (target 100 %).
The matching rules are in docs/QUALITY.md. Replays in virtual time are deterministic, so one run
per scenario is the default; with ``--repeat N`` each figure is the median of N runs.

Run: ``PYTHONPATH=. python bench/quality.py [--seconds S] [--seed N] [--repeat N] [--json FILE]
[--stack-road] [--cost zero|measured] [scenario ...]`` (``--stack-road``: config/stack.yaml's own
road layout for every scenario, as ``rt-runtime replay`` uses it; ``--cost``: see ``COSTS``).
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenarios", nargs="*", default=sorted(SCENARIOS))
    ap.add_argument("--seconds", type=float, default=SECONDS)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--stack-road", action="store_true", help="config/stack.yaml's road layout for every scenario")
    ap.add_argument("--cost", choices=sorted(COSTS), default="zero", help="the replay's op cost model (virtual time)")
    ap.add_argument("--json", help="also write the full quality documents to this file")
    args = ap.parse_args()
    t0 = time.perf_counter()
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
