"""Fleet replay: 8 bags through `rt-runtime batch` (embedded Dask cluster) against serial `rt-runtime replay`.

Prints, medians of RUNS runs each, all in the same run:

* serial: the 8 bags one after the other with `rt-runtime replay BAG --json` (a process per bag, as
  a script looping over bags does) — the anchor — and in one warm process (``replay()`` 8 times);
* batch: `rt-runtime batch BAGS --workers W --json` (a fresh embedded cluster each run);
* throughput = serial wall / batch wall (issue 19: >= 1.8x over serial `replay`);
* Dask's own overhead per bag, from a batch run through the library (workers' imports done before
  the clock starts): the time a worker waited
  between its previous bag's end (or the submit) and this bag's start, plus the time from this
  bag's end on the worker to its row in the client (scheduling + result transfer), over the bag's
  own time on the worker (issue 19: <= 2 %);
* peak RSS per worker process (``ru_maxrss`` after its last bag).

The 8 bags (highway_cut_in, seeds 1-8, SECONDS each) are recorded once into the cache folder.
BENCH_QUICK=1: one run each.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BAGS, SECONDS = 8, 4.0
RUNS = 1 if os.environ.get("BENCH_QUICK") else 3
BIN = Path(sys.executable).parent


def bags() -> list[Path]:
    """The 8 recordings, made once."""
    from rt_runtime.replay.defaults import cache_dir
    from rt_runtime.sim import record

    out = []
    for seed in range(1, BAGS + 1):
        p = cache_dir() / "bench_batch" / f"highway_seed{seed}_{SECONDS:g}s"
        if not (p / "metadata.yaml").is_file():
            p.parent.mkdir(parents=True, exist_ok=True)
            record(p, "highway_cut_in", SECONDS, seed, "mcap", workers=2)
        out.append(p)
    return out


def timed(cmd: list[str]) -> tuple[float, str]:
    """Wall seconds of one command and its stdout (it must succeed)."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])}...: exit {r.returncode}: {r.stderr[-2000:]}")
    return wall, r.stdout


def serial_cli(paths: list[Path]) -> tuple[float, dict[str, str]]:
    """Every bag through its own `rt-runtime replay` process, one after the other."""
    t0 = time.perf_counter()
    digests = {str(p): json.loads(timed([str(BIN / "rt-runtime"), "replay", str(p), "--json"])[1])["output_digest"]
               for p in paths}
    return time.perf_counter() - t0, digests


def serial_warm(paths: list[Path]) -> float:
    """Every bag through ``replay()`` in this one process (imports and torch paid once)."""
    from rt_runtime.commands.replay import stack_for_bag
    from rt_runtime.replay import replay
    from rt_runtime.replay.defaults import default_config
    from rt_runtime.replay.quality import quality_from_outputs

    cfg = default_config()
    t0 = time.perf_counter()
    for p in paths:
        replay(p, stack_for_bag(cfg, p), quality=quality_from_outputs)
    return time.perf_counter() - t0


def batch_cli(paths: list[Path], workers: int) -> tuple[float, dict[str, str]]:
    """All bags through one `rt-runtime batch` (a fresh embedded cluster)."""
    wall, out = timed([str(BIN / "rt-runtime"), "batch", *map(str, paths), "--workers", str(workers), "--json"])
    return wall, {b["bag"]: b["output_digest"] for b in json.loads(out)["bags"]}


def dask_overhead(paths: list[Path], workers: int) -> tuple[list[float], list[float], dict[str, float]]:
    """(overhead s per bag, bag time s on its worker per bag, peak RSS MiB per worker) of one library batch."""
    from rt_runtime.fleet.cluster import open_client, quiet_dask, run_jobs
    from rt_runtime.fleet.runner import make_jobs
    from rt_runtime.replay.defaults import default_config

    jobs = make_jobs(paths, default_config())
    got: list[tuple[dict, float]] = []
    with quiet_dask(), open_client(None, workers) as (client, _):
        # each worker imports the replay's modules once, before the clock starts: that is start-up, not per bag
        client.run(lambda: __import__("rt_runtime.fleet.task") and __import__("torch") and __import__("pipelines"))
        submitted = time.time()
        run_jobs(client, jobs, lambda row: got.append((row, time.time())))
    overhead, own, peak = [], [], {}
    by_worker: dict[str, list[tuple[dict, float]]] = {}
    for row, received in got:
        by_worker.setdefault(row["worker"], []).append((row, received))
    for worker, rows in by_worker.items():
        rows.sort(key=lambda x: x[0]["started_unix"])
        free_at = submitted
        for row, received in rows:
            # waiting for the task while idle + the row's way back: what Dask adds to the bag's own time
            overhead.append(max(0.0, row["started_unix"] - free_at) + max(0.0, received - row["finished_unix"]))
            own.append(row["finished_unix"] - row["started_unix"])
            free_at = row["finished_unix"]
        peak[worker] = max(r["peak_rss_mb"] for r, _ in rows)
    return overhead, own, peak


def main() -> None:
    paths = bags()
    workers = os.cpu_count() or 1
    med = statistics.median
    ser, warm, bat, equal_runs = [], [], [], 0
    for _ in range(RUNS):
        s_wall, s_dig = serial_cli(paths)
        b_wall, b_dig = batch_cli(paths, workers)
        ser.append(s_wall)
        bat.append(b_wall)
        warm.append(serial_warm(paths))
        equal_runs += s_dig == b_dig
    over, own, peak = dask_overhead(paths, workers)
    print(f"{BAGS} bags of {SECONDS:g} s (highway_cut_in, seeds 1-{BAGS}); {workers} cores, {workers} workers; "
          f"medians of {RUNS} run(s)")
    print(f"{'what':<44} {'wall s':>8} {'bags/min':>9} {'vs serial':>10}")
    for name, xs in ((f"serial: {BAGS} x rt-runtime replay (anchor)", ser),
                     ("serial: replay() x 8 in one warm process", warm),
                     (f"batch: rt-runtime batch --workers {workers}", bat)):
        print(f"{name:<44} {med(xs):>8.2f} {BAGS * 60 / med(xs):>9.1f} {med(ser) / med(xs):>9.2f}x")
    print(f"digests of batch == serial replay (all {BAGS} bags): in {equal_runs} of {RUNS} run(s)")
    print(f"Dask overhead per bag (scheduling + result transfer): median {med(over) * 1e3:.1f} ms, max "
          f"{max(over) * 1e3:.1f} ms; a bag's own time on its worker: median {med(own):.2f} s; "
          f"overhead / bag time: {med(over) / med(own) * 100:.2f} % (max {max(o / w for o, w in zip(over, own)) * 100:.2f} %)")
    print("peak RSS per worker: " + ", ".join(f"{mb:.0f} MiB" for mb in sorted(peak.values())))


if __name__ == "__main__":
    main()
