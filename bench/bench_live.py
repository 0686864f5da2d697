"""What `replay --foxglove` costs: the built-in scenario's first ``RT_BENCH_LIVE_S`` seconds (default 5)
replayed at ``--speed max`` (budget timing, one digest) without the live view (the anchor, measured in the
same run), with it and no client, with a Foxglove protocol client subscribed to every channel (in a process
of its own, as the Foxglove app is: ``client``; on a thread of the replay's process, sharing its GIL:
``client thread``), and with ``--foxglove-mcap`` alone (no server: every channel written to a file). Every
channel of the stack is on: jobs and windows, safety, degraded tasks, speculation, chain latencies and the
trajectory and objects, at the default 10 Hz (``live.channels.LiveSpec.of``; ``RT_BENCH_LIVE_HZ``: another
``--foxglove-hz``).

Wall time of ``replay()`` per variant, the median of ``RT_BENCH_REPEATS`` (default 5) runs, interleaved (each round
in its own seeded order) so load on a shared machine hits every variant alike; the digest of each variant, and the events the view
queued and dropped. ``paired`` is the median over rounds of each round's variant / none - 1 (the runs of one
round back to back, so slow drifts of the machine cancel), with the distribution-free 95 % interval of that
median from the order statistics (binomial): a cost is shown where the interval lies above 0, and bounded by
its upper end.

Run: ``PYTHONPATH=. python bench/bench_live.py``
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import websockets

from rt_runtime.commands.replay import stack_for_bag
from rt_runtime.live.channels import LiveSpec
from rt_runtime.live.foxglove import FoxgloveLive
from rt_runtime.replay import replay
from rt_runtime.replay.defaults import default_bag, default_config

SECONDS = float(os.environ.get("RT_BENCH_LIVE_S", "5"))
REPEATS = int(os.environ.get("RT_BENCH_REPEATS", "5"))
HZ = float(os.environ.get("RT_BENCH_LIVE_HZ", "10"))


def client(url: str, ready: threading.Event, counts: dict[str, int]) -> None:
    """Subscribe to every channel as advertised and count the messages, until the server stops."""
    async def go() -> None:
        async with websockets.connect(url, subprotocols=["foxglove.sdk.v1"], max_size=None) as ws:
            ready.set()
            subs = 0
            try:
                async for frame in ws:
                    if isinstance(frame, str):
                        op = json.loads(frame)
                        if op["op"] == "advertise":
                            new = []
                            for ch in op["channels"]:
                                subs += 1
                                new.append({"id": subs, "channelId": ch["id"]})
                            await ws.send(json.dumps({"op": "subscribe", "subscriptions": new}))
                    else:
                        counts["messages"] = counts.get("messages", 0) + 1
            except websockets.ConnectionClosed:
                pass
    asyncio.run(go())


def client_process(url: str) -> subprocess.Popen:
    """``client`` in a process of its own (this file with ``--client URL``), once it is connected."""
    proc = subprocess.Popen([sys.executable, __file__, "--client", url], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def client_main(url: str) -> None:
    """The client process: 'ready' once connected; once the server stopped, the message count and the CPU ms it
    took since it was ready (its start-up, imports included, is before the replay)."""
    import time

    ready, counts = threading.Event(), {}
    th = threading.Thread(target=client, args=(url, ready, counts), daemon=True)
    th.start()
    ready.wait(30)
    cpu0 = time.process_time()
    print("ready", flush=True)
    th.join()
    print(counts.get("messages", 0), round(1e3 * (time.process_time() - cpu0)), flush=True)


def once(bag: Any, cfg: Any, variant: str) -> tuple[float, str, dict[str, int]]:
    """One replay: wall time, digest, the view's counts."""
    spec = LiveSpec.of(cfg, HZ)
    mcap = Path(tempfile.mkdtemp(prefix="bench-live-")) / "live.mcap" if variant == "mcap" else None
    live = None if variant == "none" else FoxgloveLive("127.0.0.1", 0, spec=spec, serve=mcap is None, mcap=mcap)
    counts: dict[str, int] = {}
    th = proc = None
    if variant == "client":
        proc = client_process(live.url)   # type: ignore[union-attr]
    elif variant == "client thread":
        ready = threading.Event()
        th = threading.Thread(target=client, args=(live.url, ready, counts), daemon=True)   # type: ignore[union-attr]
        th.start()
        ready.wait(30)
    r = replay(bag, cfg, until_s=SECONDS, listeners=[live] if live is not None else ())
    if live is not None:
        live.close()
        counts.update(events=live.events, dropped=live.dropped + live.dropped_outputs, outputs=live.outputs,
                      cpu_ms=round(live.cpu_s * 1e3))
        if mcap is not None:
            counts["messages"] = -1   # written to the file, not counted here
            mcap.unlink()
            mcap.parent.rmdir()
    if th is not None:
        th.join(30)
    if proc is not None:
        out, _ = proc.communicate(timeout=30)
        counts["messages"], counts["client_ms"] = (int(x) for x in out.split()[-2:])
    return r.wall_s, r.output_digest, counts


def emit_ns() -> float:
    """What one ``emit`` costs the scheduler's thread (a folded kind, queued), ns: the hot path's share."""
    import time

    from rt_runtime.sched.events import EventKind as K

    live = FoxgloveLive("127.0.0.1", 0, serve=False, capacity=1 << 30)
    live._stop.set()   # nothing drains: only the append is timed
    live.thread.join()
    n = 200_000
    t0 = time.perf_counter_ns()
    for i in range(n):
        live.emit(K.FINISH, i, "planning", i, 0, 0)
    return (time.perf_counter_ns() - t0) / n


def median_interval(xs: list[float], level: float = 0.95) -> tuple[float, float]:
    """The distribution-free ``level`` interval of the median of ``xs``: order statistics k and n + 1 - k, the
    largest k with P(Binomial(n, 1/2) < k) <= (1 - level) / 2 (the whole range for fewer than 6 values)."""
    from scipy.stats import binom

    ys, n = sorted(xs), len(xs)
    k = max([j for j in range(1, n // 2 + 1) if binom.cdf(j - 1, n, 0.5) <= (1 - level) / 2], default=1)
    return ys[k - 1], ys[n - k]


def main() -> None:
    """Print the table."""
    bag = default_bag()
    cfg = stack_for_bag(default_config(), bag)
    variants = ("none", "no client", "client", "client thread", "mcap")
    walls: dict[str, list[float]] = {v: [] for v in variants}
    info: dict[str, tuple[str, dict[str, int]]] = {}
    once(bag, cfg, "none")   # warm: the first replay of the process pays imports and caches
    for k in range(REPEATS):
        for v in random.Random(k).sample(variants, len(variants)):   # each round in its own order: no seat is favoured
            wall, digest, counts = once(bag, cfg, v)
            walls[v].append(wall)
            info[v] = (digest, counts)
    anchor = statistics.median(walls["none"])
    per_emit = statistics.median(emit_ns() for _ in range(5))
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"built-in scenario, first {SECONDS:g} s at --speed max, --foxglove-hz {HZ:g}, median of {REPEATS} "
          f"interleaved runs (load average at the end: {load} on {os.cpu_count()} cores)")
    print(f"{'variant':<13} {'wall s':>8} {'vs none':>8} {'min s':>7} {'digest':>18} {'events':>8} {'dropped':>8} "
          f"{'msgs':>7} {'view cpu ms':>11} {'client ms':>9} {'emits ms':>9} {'paired [95 % interval]':>24}")
    for v in variants:
        m = statistics.median(walls[v])
        ratios = [100 * (a / b - 1) for a, b in zip(walls[v], walls["none"])]
        lo, hi = median_interval(ratios)
        paired = f"{statistics.median(ratios):+.1f}% [{lo:+.1f}, {hi:+.1f}]" if v != "none" else "-"
        digest, c = info[v]
        hot = c.get("events", 0) * per_emit / 1e6   # what the appends cost the scheduler's thread
        print(f"{v:<13} {m:>8.3f} {100 * (m / anchor - 1):>+7.1f}% {min(walls[v]):>7.3f} {digest[:16]:>18} {c.get('events', 0):>8} "
              f"{c.get('dropped', 0):>8} {c.get('messages', 0):>7} {c.get('cpu_ms', 0):>11} {c.get('client_ms', 0):>9} "
              f"{hot:>9.2f} {paired:>24}")
    print(f"one emit: {per_emit:.0f} ns (median of 5 x 200,000 appends); 'emits ms' = events x that, on the "
          "scheduler's thread; 'view cpu ms' = the server thread's CPU (folding, building, logging), off it; 'client ms' = "
          "the client process's CPU during the run (on the same cores)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        client_main(sys.argv[2])
    else:
        main()
