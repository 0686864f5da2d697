"""The tests that run on the wall clock or over DDS, N times beside K CPU hogs: passes/runs per test.

    make test-stress                                   # 10 runs beside one hog
    .venv/bin/python bench/stress.py --runs 3 --hogs 2 -k ros_e2e

It selects the tests marked ``wallclock`` or ``ros`` (pytest.ini): a new wall-clock test joins by
carrying the marker. Each run is one pytest process over all of them, on its own ROS_DOMAIN_ID (three
ids a run: the ROS end-to-end tests take ID, ID+1 and ID+2), taken in turn from ``--domains``; DDS
discovery stays on this machine. The hogs (``while True: pass``, one process each) are started before
the first run and killed at the end, also on Ctrl-C or SIGTERM. Exit status: 0 when every test passed
every run it ran in, 1 otherwise, 2 on a bad flag.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKERS = "wallclock or ros"
IDS_PER_RUN = 3          # tests/test_ros_e2e.py puts its three tests on ID, ID+1, ID+2
OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS) (\S+\.py::.+?)(?: - (.*))?$")   # pytest -rA
DURATION = re.compile(r"^([\d.]+)s (?:setup|call|teardown) +(\S+\.py::.+)$")            # pytest --durations


def domain_range(text: str) -> range:
    """``LO-HI`` (inclusive) as the ROS domain ids the runs may take."""
    m = re.fullmatch(r"(\d+)-(\d+)", text)
    if not m or not 0 <= int(m[1]) <= int(m[2]) - (IDS_PER_RUN - 1) or int(m[2]) > 232:
        raise argparse.ArgumentTypeError(f"expected LO-HI, 0 <= LO, LO + {IDS_PER_RUN - 1} <= HI <= 232; "
                                         f"found {text!r}")
    return range(int(m[1]), int(m[2]) + 1)


def positive(text: str) -> int:
    """A whole number >= 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, found {text!r}")
    return int(text)


def whole(text: str) -> int:
    """A whole number >= 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, found {text!r}")
    return int(text)


def parse_args(argv: list[str]) -> argparse.Namespace:
    base = int(os.environ.get("ROS_DOMAIN_ID", "42") or 42)
    p = argparse.ArgumentParser(prog="stress.py", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=positive, default=10, help="pytest runs (default 10)")
    p.add_argument("--hogs", type=whole, default=1, help="CPU hogs beside them (default 1)")
    p.add_argument("-k", dest="keyword", default=None, help="pytest -k expression: a subset of the tests")
    p.add_argument("--domains", type=domain_range, default=domain_range(f"{base}-{min(base + 9, 232)}"),
                   help="ROS domain ids the runs take in turn, LO-HI (default: ROS_DOMAIN_ID to +9)")
    p.add_argument("--logs", type=Path, default=None, help="where each run's pytest log (and a failed run's test "
                   "folders) go (default: a new temporary folder)")
    return p.parse_args(argv)


def start_hogs(k: int) -> list[subprocess.Popen]:
    """``k`` busy loops, each its own process (and process group)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                             start_new_session=True) for _ in range(k)]


def kill(procs: list[subprocess.Popen]) -> None:
    """SIGKILL each process's group, then reap it."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait()


def stop_pytest(p: subprocess.Popen) -> None:
    """SIGINT first, so that its tests' own clean-up kills the nodes they started; SIGKILL after 30 s."""
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGINT)
        try:
            p.wait(30)
        finally:
            kill([p])


def selection(args: argparse.Namespace) -> list[str]:
    """pytest's arguments that select the tests: their files (collected once, so that each run imports
    only those), the markers and ``-k``."""
    select = ["-m", MARKERS, *(["-k", args.keyword] if args.keyword else [])]
    p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *select],
                       cwd=ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    files = sorted({line.split("::")[0] for line in p.stdout.splitlines() if "::" in line})
    if not files:
        last = (p.stdout.strip().splitlines() or [p.stderr.strip()])[-1]
        raise SystemExit(f"stress.py: no test selected by {' '.join(select)!r} (pytest --collect-only: {last})")
    return [*files, *select]


def one_run(i: int, select: list[str], domain: int, log: Path) -> dict[str, tuple[str, str, float]]:
    """One pytest process over the selected tests; {test id: (outcome, reason, seconds)}. Its tests'
    folders (node logs, traces) are kept beside the log when one failed."""
    tmp = log.with_suffix(".tmp")
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "--durations=0", "--durations-min=0", "-p",
           "no:cacheprovider", f"--basetemp={tmp}", *select]
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
           "COLUMNS": "240"}   # room for each failure's reason on its summary line
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            p.wait()
        finally:
            stop_pytest(p)
    outcomes: dict[str, tuple[str, str]] = {}
    seconds: dict[str, float] = defaultdict(float)
    for line in log.read_text(errors="replace").splitlines():
        if m := OUTCOME.match(line):
            outcomes[m[2]] = (m[1], (m[3] or "")[:100])
        elif m := DURATION.match(line):
            seconds[m[2]] += float(m[1])
    if not outcomes:
        outcomes[f"(run {i}: pytest exit {p.returncode}, no test ran)"] = ("ERROR", str(log))
    if all(o == "PASSED" for o, _ in outcomes.values()):
        shutil.rmtree(tmp, ignore_errors=True)
    return {test: (o, why, seconds[test]) for test, (o, why) in outcomes.items()}


def table(results: dict[str, list[tuple[str, str, float]]]) -> str:
    """One line a test: passes/runs it ran in, its slowest run (set-up included), the id, and the first
    failure's reason (skips are not listed)."""
    lines = [f"{'passes':>8} {'slowest':>8}  test"]
    for test in sorted(results):
        outcomes = results[test]
        passed = sum(o == "PASSED" for o, _, _ in outcomes)
        slowest = max(s for _, _, s in outcomes)
        why = next((f"  <- {o}: {r}" for o, r, _ in outcomes if o != "PASSED"), "")
        lines.append(f"{f'{passed}/{len(outcomes)}':>8} {slowest:>7.1f}s  {test}{why}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logs = args.logs or Path(tempfile.mkdtemp(prefix="rt-stress-"))
    logs.mkdir(parents=True, exist_ok=True)
    bases = list(args.domains)[::IDS_PER_RUN]
    bases = [b for b in bases if b + IDS_PER_RUN - 1 <= args.domains[-1]]
    results: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # unwinds through the finally below
    select = selection(args)
    hogs = start_hogs(args.hogs)
    t0 = time.monotonic()
    try:
        for i in range(1, args.runs + 1):
            domain, t_run = bases[(i - 1) % len(bases)], time.monotonic()
            got = one_run(i, select, domain, logs / f"run-{i:02d}.log")
            for test, outcome in got.items():
                results[test].append(outcome)
            bad = sum(o != "PASSED" for o, _, _ in got.values())
            print(f"run {i}/{args.runs} (ROS_DOMAIN_ID {domain}, {args.hogs} hogs): {len(got)} tests, "
                  f"{bad} failed, {time.monotonic() - t_run:.0f} s", flush=True)
    except KeyboardInterrupt:
        print("interrupted: the table covers the runs that finished", file=sys.stderr)
    finally:
        kill(hogs)
    runs = max((len(v) for v in results.values()), default=0)
    print(table(results))
    print(f"{len(results)} tests, {runs} runs beside {args.hogs} CPU hogs, {time.monotonic() - t0:.0f} s; "
          f"logs in {logs}")
    return 0 if results and all(o == "PASSED" for v in results.values() for o, _, _ in v) else 1


if __name__ == "__main__":
    sys.exit(main())
