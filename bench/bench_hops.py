"""The code a message runs through on its way from the bag reader to the bag writer, in functions.

Replays the built-in scenario (``rt-runtime replay --until S``, budget timing) under a profiler hook
(``sys.setprofile`` and ``threading.setprofile``: the driver, the reader, the pool threads) and counts
every call of a function defined in ``rt_runtime``. A function entered at least ``--min-calls`` times
(default 50: more than any set-up runs, fewer than the scenario's messages) is on the path of the
messages: the table gives how many such functions there are per package, and in ``sched/`` and
``safety/`` alone (the scheduler's hops), for a plain replay (the default), ``--parallel 1`` and ``--parallel 2``. Kernels (op
bodies) and decoders are counted under their packages but are the same code in every mode.

Run: ``python bench/bench_hops.py [--until S] [--tree DIR]`` (``--tree``: another checkout's rt_runtime,
to count a commit before and after; the replay runs in a child process per mode).
"""
from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import collections, json, sys, threading
sys.path.insert(0, {tree!r})
import rt_runtime
from rt_runtime.cli import main
base = rt_runtime.__file__.rsplit("/", 1)[0] + "/"
calls = collections.Counter()
def prof(frame, event, arg):
    if event == "call":
        f = frame.f_code.co_filename
        if f.startswith(base):
            calls[(f[len(base):], frame.f_code.co_qualname)] += 1
threading.setprofile(prof)
sys.setprofile(prof)
try:
    main(["replay", "--until", {until!r}, *{par!r}, "--reader", "thread", "--json"])
finally:
    sys.setprofile(None)
    threading.setprofile(None)
print("HOPS" + json.dumps([[k[0], k[1], v] for k, v in calls.items()]), file=sys.stderr)
'''


def count(tree: str, until: str, par: list[str]) -> dict[tuple[str, str], int]:
    p = subprocess.run([sys.executable, "-c", CHILD.format(tree=tree, until=until, par=par)],
                       capture_output=True, text=True, cwd=tree)
    line = next((x for x in p.stderr.splitlines() if x.startswith("HOPS")), None)
    if line is None:
        raise SystemExit(f"bench_hops: the replay in {tree} failed:\n{p.stderr[-2000:]}")
    return {(f, q): n for f, q, n in json.loads(line[4:])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--until", default="3", help="seconds of the built-in bag")
    ap.add_argument("--min-calls", type=int, default=50)
    ap.add_argument("--tree", default=str(ROOT), help="checkout whose rt_runtime is counted")
    args = ap.parse_args()
    print(f"functions of rt_runtime entered >= {args.min_calls} times replaying {args.until} s of the built-in "
          f"bag ({args.tree})")
    # The default: what a plain `rt-runtime replay` runs (the serial driver since issue 28; one thread per
    # core before, i.e. --parallel 2 on 2 cores).
    modes = (("default", []), ("--parallel 1", ["--parallel", "1"]), ("--parallel 2", ["--parallel", "2"]))
    print(f"{'package':12s} " + " ".join(f"{label:>13s}" for label, _ in modes))
    rows: dict[str, list[int]] = collections.defaultdict(lambda: [0] * len(modes))
    for i, (_, par) in enumerate(modes):
        for (f, _), n in count(args.tree, args.until, par).items():
            if n >= args.min_calls:
                pkg = f.split("/")[0] if "/" in f else f
                rows[pkg][i] += 1
                rows["(all)"][i] += 1
                if pkg in ("sched", "safety"):
                    rows["sched+safety"][i] += 1
    for pkg in sorted(rows, key=lambda k: (k.startswith("("), k)):
        print(f"{pkg:12s} " + " ".join(f"{n:13d}" for n in rows[pkg]))


if __name__ == "__main__":
    main()
