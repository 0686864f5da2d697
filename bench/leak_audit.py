"""Leak audit: what a run leaves behind (threads, executors, arenas, runtimes) and how memory grows.

``snapshot()`` counts live objects after a full collection; compare one taken before a campaign
or a long replay with one taken after. ``soak()`` replays a short scenario in a loop through ONE
runtime on the VirtualClock (each loop shifted by the scenario's length), sampling the resident
set after every loop: a long simulated drive on a short bag.
"""
from __future__ import annotations

import gc
import os
import threading
from typing import Any, Callable

from rt_runtime.exec.executor import GraphExecutor
from rt_runtime.memory.arena import Arena


def rss_bytes() -> int:
    """The process's resident set size now (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def snapshot() -> dict[str, int]:
    """Live threads, runtimes, executors and arenas (after ``gc.collect()``), and RSS."""
    from rt_runtime.sched.runtime import Runtime

    gc.collect()
    counts = {"runtimes": 0, "executors": 0, "arenas": 0}
    kinds = {Arena: "arenas", GraphExecutor: "executors", Runtime: "runtimes"}
    for o in gc.get_objects():
        k = kinds.get(type(o))   # type(), not isinstance: some module proxies warn when asked their class
        if k is not None:
            counts[k] += 1
    return {"threads": threading.active_count(), **counts, "rss": rss_bytes()}


def leaked(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Counts that grew (RSS left out: it is judged by its trend, see ``soak``)."""
    return {k: after[k] - before[k] for k in before if k != "rss" and after.get(k, 0) > before[k]}


def soak(harness: Any, loops: int, cost: Callable[..., int] | None = None,
         on_loop: Callable[[int, int], None] | None = None) -> list[int]:
    """Replay the harness's scenario ``loops`` times through one runtime; RSS after each loop."""
    from rt_runtime.drive import open_stack
    from rt_runtime.safety.monitor import SafetyMonitor
    from rt_runtime.sched import VirtualClock
    from rt_runtime.sched.binding import measured_cost

    sc = harness.scenario
    period = sc.until_ns + 1
    stack = open_stack(harness.cfg, harness.bindings, harness.initial, clock=VirtualClock(),
                       cost=cost or measured_cost, egress=lambda *a: None)
    rt = stack.rt
    mon = SafetyMonitor(rt, harness.planner, periods=sc.periods()).install()
    samples = []
    try:
        stack.push_initial()
        for k in range(loops):
            base = k * period
            for m in sc.messages:
                if m.value is None:
                    continue
                t = base + m.t_ns
                rt.run_until(t - 1)
                mon.check_silence(t - 1)
                for role, ch in m.route.channels.items():
                    rt.push(ch, t, stack.to_tensor(m.value[role]))
                    mon.arrived(ch, t, t)
            rt.run_until(base + period - 1)
            samples.append(rss_bytes())
            if on_loop is not None:
                on_loop(k, samples[-1])
    finally:
        stack.close()
    return samples
