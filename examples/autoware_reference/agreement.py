"""`rt-runtime check`'s answer for this system (tasks.yaml) against what runs of it show.

    .venv/bin/python examples/autoware_reference/agreement.py [--seconds 20] [--wall S]

The logical run: the system on the virtual clock with budget timing (every op takes its budget, the
model the analysis assumes; the crunch is made tiny, it takes no logical time anyway), under edf and
under dm. ``--wall S`` adds run.py's wall-clock run (``system.run``) of S seconds under edf: its
hot-path latency (a stamp in ObjectCollisionEstimator's op minus the newest LiDAR stamp) against the
chain's response bound, and its LET publish latency against the chain-LET bound.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

import system as S  # noqa: E402

TASKS = HERE / "tasks.yaml"


def logical_run(policy: str, seconds: float, steal: bool = True) -> tuple[dict[str, int], int, dict[str, int]]:
    """(misses per task, worst front-chain latency from FrontLidarDriver's release to ObjectCollisionEstimator's
    finish in ns, worker per task) of a run on the virtual clock with budget timing; ``steal`` as tasks.yaml
    has it (work-conserving dispatch)."""
    from rt_runtime.sched import Runtime, VirtualClock
    from rt_runtime.sched.budget import BudgetCost
    from rt_runtime.sched.events import EventKind

    bindings, chains, _ = S.build(16)
    rel: dict[tuple[str, int], int] = {}
    fin: dict[tuple[str, int], int] = {}

    class Log:
        enabled = True

        def emit(self, kind: int, t: int, task: str, idx: int, a: int = 0, b: int = 0) -> None:
            if kind == EventKind.RELEASE:
                rel[(task, idx)] = t
            elif kind == EventKind.FINISH:
                fin[(task, idx)] = t

    rt = Runtime(bindings, policy=policy, clock=VirtualClock(), cost=BudgetCost(bindings), chains=chains,
                 workers=2, sink=Log(), steal=steal)
    where = {n: s.worker for n, s in rt.sched.tasks.items()}
    try:
        rt.run_until(int(seconds * 1e9))
    finally:
        rt.close()
    missed = {n: s["missed"] for n, s in rt.stats().items() if s.get("missed")}
    head = S.FRONT_CHAIN[0]
    lat = [f - rel[(head, i)] for (n, i), f in fin.items() if n == S.HOT_SINK and (head, i) in rel]
    return missed, max(lat), where


def check(policy: str):
    """check's report for tasks.yaml under ``policy``."""
    from rt_runtime.commands.check import analyse_file

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "tasks.yaml"
        path.write_text(TASKS.read_text().replace("policy: edf", f"policy: {policy}"))
        return analyse_file(str(path))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="logical seconds per policy (default 20)")
    ap.add_argument("--wall", type=float, default=0.0, help="also a wall-clock run of this many seconds (edf)")
    a = ap.parse_args(argv)
    print(f"{'policy':6}  {'tasks check says can miss':>25}  {'tasks that missed':>17}  {'named':>5}  "
          f"{'front chain: bound / logical worst (ms)':>40}  ratio")
    for policy in ("edf", "dm"):
        rep = check(policy)
        missed, front, _ = logical_run(policy, a.seconds)
        can = {t.name for t in rep.tasks if not t.schedulable}
        c = next(x for x in rep.chains if x.name == "hot_path_front")
        bound = "-" if c.response_ns is None else f"{c.response_ns / 1e6:.1f}"
        ratio = "-" if c.response_ns is None else f"{c.response_ns / front:.2f}"
        print(f"{policy:6}  {len(can):>25}  {len(missed):>17}  {'all' if set(missed) <= can else 'NOT':>5}  "
              f"{bound + ' / ' + f'{front / 1e6:.1f}':>40}  {ratio}")
        print(f"        missed: {dict(sorted(missed.items()))}")
    if a.wall > 0:
        rep = check("edf")
        c = next(x for x in rep.chains if x.name == "hot_path_front")
        out = S.run(a.wall, S.calibrate(4.0))
        h, p = out["hot_path_latency_ms"], out["rt_runtime"]["hot_path_publish_latency_ms"]
        print(f"wall clock {a.wall:g} s: hot path p50 {h['p50']} p99 {h['p99']} max {h['max']} ms against the response "
              f"bound {c.response_ns / 1e6:.1f} ms (bound / p99 {c.response_ns / 1e6 / h['p99']:.2f}); LET publish "
              f"max {p['max']} ms against chain-LET {c.chain_let_ns / 1e6:.0f} ms; misses: {out['rt_runtime']['missed']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
