"""Import time of the DeadlineExecutor: what a node that swaps its executor pays before it spins.

Each figure is one fresh ``python -c`` process (wall time of the whole process, interpreter start
included), the statements interleaved round by round, the median of ``--runs``. Anchors in the same
run: an empty interpreter and ``import rclpy`` (what any rclpy node pays anyway). ``--before DIR``
adds the same statements against another rt_runtime tree (e.g. ``git archive <rev> rt_runtime | tar
-x -C DIR``), so a change is measured against what it replaced on the same machine in the same run.

    .venv/bin/python bench/bench_deadline_import.py --runs 5
    .venv/bin/python bench/bench_deadline_import.py --runs 5 --before /tmp/before
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATEMENTS = {
    "python -c pass": "pass",
    "import rclpy": "import rclpy",
    "import rt_runtime.ros.deadline": "import rt_runtime.ros.deadline",
    "from rt_runtime.ros import DeadlineExecutor": "from rt_runtime.ros import DeadlineExecutor",
}
_TORCH = "import sys; print(int('torch' in sys.modules))"


def timed(code: str, root: Path) -> tuple[float, bool]:
    """Wall seconds of one fresh interpreter running ``code`` in ``root`` (first on the path); torch loaded?"""
    env = {**os.environ, "PYTHONPATH": str(root), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", f"{code}; {_TORCH}"], capture_output=True, text=True, env=env, cwd=root,
                         check=True).stdout
    return time.perf_counter() - t0, out.strip().endswith("1")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="import time of rt_runtime.ros.deadline (median of fresh processes)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--before", type=Path, help="another rt_runtime tree (its parent folder) to compare with")
    a = ap.parse_args(argv)
    trees = [("now", ROOT)] + ([("before", a.before)] if a.before else [])
    rows = [(t, label, code, root) for label, code in STATEMENTS.items() for t, root in trees
            if t == "now" or "rt_runtime" in code]
    times: dict[tuple[str, str], list[float]] = {(t, label): [] for t, label, _, _ in rows}
    torch: dict[tuple[str, str], bool] = {}
    for _ in range(a.runs):
        for t, label, code, root in rows:
            s, loaded = timed(code, root)
            times[(t, label)].append(s)
            torch[(t, label)] = loaded
    print(f"{'tree':<7} {'statement':<45} {'median s':>9} {'min s':>7}  torch")
    for (t, label), v in times.items():
        print(f"{t:<7} {label:<45} {statistics.median(v):>9.3f} {min(v):>7.3f}  {'yes' if torch[(t, label)] else 'no'}")
    print(f"({a.runs} fresh processes each, interleaved; {os.cpu_count()} CPUs, {sys.version.split()[0]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
