"""The dispatch cost of a job (``bench_dispatch.ours_cost``) in several checkouts, interleaved.

Each checkout runs in a process of its own, one after another, round after round, so a shared
machine's load falls on all of them alike. Prints per checkout the median over the rounds of the
wall time per job (the bench's figure) and of the driver thread's CPU time per job
(``time.thread_time``: less sensitive to the machine's other work), for an empty graph and for one
input and one output channel, and the minimum of each.

Run: ``python bench/ab_dispatch_cost.py DIR [DIR ...] ROUNDS`` (each DIR a checkout with
``bench/bench_dispatch.py``, e.g. made by ``git archive REV | tar -x -C DIR``).
"""
from __future__ import annotations

import statistics
import subprocess
import sys

CHILD = r'''
import sys, time
sys.path.insert(0, {tree!r} + "/bench")
import bench_dispatch as b
assert {tree!r} in sys.modules["rt_runtime"].__file__, "bench_dispatch imported another checkout's rt_runtime"
out = []
for channels in (False, True):
    c0 = time.thread_time()
    wall = b.ours_cost(30000, channels)
    out += [wall, (time.thread_time() - c0) / 31000 * 1e6]   # ours_cost runs 1000 jobs of warm-up first
print(*out)
'''


def main() -> None:
    if len(sys.argv) < 3 or not sys.argv[-1].isdigit():
        raise SystemExit("usage: python bench/ab_dispatch_cost.py DIR [DIR ...] ROUNDS")
    trees, rounds = sys.argv[1:-1], int(sys.argv[-1])
    res: dict[str, list[list[float]]] = {t: [[], [], [], []] for t in trees}
    for _ in range(rounds):
        for t in trees:
            p = subprocess.run([sys.executable, "-c", CHILD.format(tree=t)], capture_output=True, text=True, cwd=t)
            if p.returncode:
                raise SystemExit(f"ab_dispatch_cost: {t}: {p.stderr.strip().splitlines()[-1:]}")
            for i, v in enumerate(map(float, p.stdout.split()[-4:])):
                res[t][i].append(v)
    print(f"us per job, median of {rounds} rounds (min in brackets)")
    print(f"{'checkout':28s} {'empty cpu':>16s} {'empty wall':>16s} {'1in1out cpu':>16s} {'1in1out wall':>16s}")
    for t in trees:
        cells = [f"{statistics.median(res[t][i]):7.2f} ({min(res[t][i]):6.2f})" for i in (1, 0, 3, 2)]
        print(f"{t:28s} " + " ".join(f"{c:>16s}" for c in cells))


if __name__ == "__main__":
    main()
