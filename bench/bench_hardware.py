"""What recording and simulating the hardware timeline costs a replay (target: <= 2 % of its wall time).

Replays the built-in scenario under budget timing with the hardware timeline (a MEASURED event per
step, then the what-if schedule) and without it, interleaved, and prints the medians. The anchor is
the replay without it, in the same run. Beside the end-to-end difference (noisy: a few percent of a
replay's wall time varies from run to run) it times the two parts directly: the simulation after
the run, and the per-step event (its cost on the trace ring times the number of steps).
"""
from __future__ import annotations

import os
import statistics
import time

from rt_runtime.analysis.hardware import hardware_report
from rt_runtime.config.stack import load_stack
from rt_runtime.replay import replay
from rt_runtime.replay.defaults import default_bag, default_config
from rt_runtime.sched.events import EventKind
from rt_runtime.trace import TraceRing, load_trace

RUNS = 5 if not os.environ.get("BENCH_QUICK") else 1


def emit_cost_ns(n: int = 200_000) -> float:
    """One MEASURED event into a trace ring, as the inline driver emits it."""
    ring = TraceRing(1 << 20)
    emit, k = ring.emit, EventKind.MEASURED
    t0 = time.perf_counter_ns()
    for i in range(n):
        emit(k, i, "planning", i, 3, 12345)
    return (time.perf_counter_ns() - t0) / n


def main(tmp: str = "/tmp/rt_bench_hardware.rttrace") -> None:
    bag, cfg = default_bag(), load_stack(default_config())
    on, off, sim = [], [], []
    for _ in range(RUNS):
        off.append(replay(bag, cfg, hardware=False).wall_s)
        r = replay(bag, cfg, hardware=True, trace=tmp)
        on.append(r.wall_s)
        cols, meta = load_trace(tmp)
        t0 = time.perf_counter()
        hardware_report(cols, meta)
        sim.append(time.perf_counter() - t0)
    steps = int((cols.kind == EventKind.MEASURED).sum())
    emit_s = steps * emit_cost_ns() / 1e9
    m_on, m_off, m_sim = statistics.median(on), statistics.median(off), statistics.median(sim)
    print(f"bag: {bag} ({r.duration_s:.1f} s); {RUNS} interleaved runs each, medians; {steps} steps measured")
    print(f"{'replay without (anchor) s':>26} {'with s':>8} {'difference':>11} | {'simulation s':>13} "
          f"{'events s':>9} {'parts / anchor':>15}")
    print(f"{m_off:>26.3f} {m_on:>8.3f} {(m_on - m_off) / m_off * 100:>10.2f}% | {m_sim:>13.4f} {emit_s:>9.4f} "
          f"{(m_sim + emit_s) / m_off * 100:>14.2f}%")
    os.unlink(tmp)


if __name__ == "__main__":
    main()
