"""One replay, run: the stack built and warmed, the bag's messages fed through it in order, what
happened summed up. ``engine.replay`` composes these parts and owns their error and clean-up paths;
the order of one replay step is told in ``engine``'s docstring."""
from __future__ import annotations

import dataclasses
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..analysis.hardware import hardware_report
from ..analysis.trace_stats import task_times
from ..bag import BagReader, BagWriter
from ..config.stack import IngressRoute, StackConfig, build_bindings, run_chains
from ..drive import StackRuntime, open_stack
from ..io.egress import diagnostics
from ..safety.degrade import STATES
from ..sched import CostModel, Runtime, VirtualClock, WallClock
from ..sched.binding import cpu_time_cost
from ..sched.budget import BudgetCost
from ..sched.events import EventKind, Observer
from ..sched.runtime import freeze_heap
from ..trace import TraceColumns, TraceRing, save_trace
from .controller import Controller
from .feed import FeedItem, decoded_feed, prefetched
from .feed_process import ProcessFeed
from .paced import Paced
from .parallel import parallel_threads
from .result import TIMINGS, ReplayError, ReplayResult

DIAGNOSTICS_TOPIC = "/diagnostics"
# Counters that depend only on logical time under LET while no timing fault occurs (overruns and
# response times do not): the ones replay diagnostics carry, so the
# output stream is the same on any machine, at any speed, with any number of workers.
LET_COUNTERS = ("released", "published", "missed", "skipped", "aborted", "degraded", "recovered",
                "dropped_releases", "no_input", "errors", "stalls", "mode", "safety_state")


class ReplayRun:
    """One replay's state: the stack built and warmed (``open``), the bag fed through it (``feed``),
    what happened (``result``); ``replay`` owns the error and clean-up paths (``abort``, ``close``)."""

    # Set by ``open``.
    virtual: bool
    timing: str
    clock: VirtualClock | WallClock
    ring: TraceRing
    collector: Any   # outputs.OutputCollector
    chains: list[Any]
    retain_channels: Sequence[str]
    stack: StackRuntime
    rt: Runtime
    monitor: Any   # safety.monitor.SafetyMonitor, or None without a ``safety:`` config
    hardware: bool
    out: str | Path | None
    next_diag: int
    # Set by ``feed``.
    wall0: float
    cpu0: float
    reading: dict[str, Any]

    def __init__(self, bag_path: str | Path, cfg: StackConfig, bag: BagReader, wanted: dict[str, IngressRoute],
                 feed: ProcessFeed | None, duration_ns: int, *, quality: Callable[..., dict[str, Any]] | None,
                 progress: bool, stop: Callable[[], str | None] | None, control: Controller | None = None,
                 skip_ns: int = 0, seeks: int | None = None) -> None:
        self.bag_path, self.cfg, self.bag, self.wanted = bag_path, cfg, bag, wanted
        self.skip_ns = skip_ns   # logical 0 is this far into the bag (a fresh start there: --start, a seek)
        self.origin_ns = bag.start_ns + skip_ns   # ... at this bag time
        self.reader = feed   # the reader process, or None: a thread here reads the bag
        self.bag_ns = duration_ns   # what was asked for
        self.duration_ns = duration_ns   # what ran: cut to the message before a stop
        self.quality, self.progress, self.stop = quality, progress, stop
        self.control = control   # pause, step and rate on the wall clock (replay.paced); the virtual clock ignores it
        self.seeks = seeks   # the control's jumps this run starts from (a seek's); None: as many as it has now
        self.parts: list[TraceColumns] = []
        self.ego: list[tuple[int, Any]] = []  # odometry as pushed, for the quality measures
        self.bad: dict[str, dict[str, int]] = {}
        self.said: set[str] = set()   # damaged chunks already warned of
        self.inputs = 0
        self.interrupted: str | None = None

    def open(self, *, out: str | Path | None, out_format: str, replace: bool, speed: str | float,
             workers: int | None, timing: str, cost: CostModel | None, speculate: bool | None, hardware: bool,
             retain_channels: Sequence[str] | None, parallel: int | None, optimistic: bool = False,
             listeners: Sequence[Observer] = ()) -> None:
        """Build and warm the stack, then create the output bag (``replay``'s arguments of the same names)."""
        import torch

        from .outputs import OutputCollector

        cfg, quality = self.cfg, self.quality
        if timing not in TIMINGS:
            raise ReplayError(f"--timing: expected one of {', '.join(TIMINGS)}, found {timing!r}")
        bindings, initial = build_bindings(cfg, speculate=speculate)
        workers = workers or cfg.workers
        self.virtual = virtual = speed == "max"
        if not virtual:
            timing = "wall"
        elif cost is None:
            cost = BudgetCost(bindings) if timing == "budget" else cpu_time_cost
        self.timing, self.hardware, self.out = timing, hardware, out
        self.clock = VirtualClock() if virtual else WallClock(rate=float(speed))
        self.ring = TraceRing(1 << 20)
        if retain_channels is None:
            retain_channels = tuple(getattr(quality, "channels", ())) if quality is not None else ()
        self.retain_channels = retain_channels
        self.collector = OutputCollector(cfg.egress, cfg.frame, self.origin_ns, retain=quality is not None,
                                         background=True, retain_channels=retain_channels)
        self.chains, notes = run_chains(cfg, bindings)
        threads = parallel_threads(parallel, virtual and bool(getattr(cost, "logical", False)), bindings, notes)
        for note in notes:
            print(f"rt-runtime replay: note: {note}", file=sys.stderr)
        self.stack = stack = open_stack(
            cfg, bindings, initial, clock=self.clock, workers=workers, cost=cost, sink=self.ring,
            egress=self.collector.on_publish, chains=self.chains, parallel=threads or None,
            optimistic=optimistic and threads > 1,   # publish on a bet (sched.optimistic); a lost bet: rerun
            adopt_ingress=True,   # the feed's tensors are fresh: no copy at ingress
            # on the wall clock a speculating task needs worker threads (the inline driver does not
            # speculate), and SCHED_FIFO applies where the OS permits unless the config's realtime: says
            threaded=not virtual and (workers > 1 or any(b.speculate is not None for b in bindings)),
            realtime=True)
        self.rt = stack.rt
        self.rt.sched.hw = hardware
        if not virtual:   # say what "realtime" does here, before it does it
            print(f"rt-runtime replay: {self.rt.describe_realtime()}", file=sys.stderr)
        self.monitor = stack.safety_monitor()
        start_ns = self.origin_ns
        # after the monitor: they hear its SAFETY events too; stamped as the output bag is (the input bag's time)
        self.collector.taps = stack.observe(listeners, lambda t: start_ns + t)
        # Intra-op threads per computing thread: more only fight over the cores.
        torch.set_num_threads(max(1, min(cfg.threads, (os.cpu_count() or 1) // max(1, threads))))
        stack.warm_up(seconds=self.duration_ns / 1e9)   # auto weighs a compile against this bag, not 10 min
        if self.reader is None:   # a reader thread decodes here: its decoders are made now, not in the run
            self.bag.prepare(self.wanted)
        self.next_diag = cfg.diagnostics_period_ns
        if out is not None:   # only now: a stack that fails to build leaves nothing at ``out``
            self.collector.attach(lambda: BagWriter(out, out_format, replace=replace),
                                  [(DIAGNOSTICS_TOPIC, "diagnostic_msgs/msg/DiagnosticArray")])

    def feed(self) -> None:
        """Feed the bag's messages to the stack in order, then run it to the end (or to the message before a stop)."""
        gc.collect()    # before the clock starts: set-up's garbage is not frozen with the rest
        freeze_heap()
        self.wall0 = time.perf_counter()
        # the driver's own CPU (booking, channels, encoding), beside the computing threads'
        self.cpu0 = time.thread_time()
        if not self.virtual:
            self.clock.reset_epoch()
        paced = None if self.virtual or self.control is None else \
            Paced(self.control, self.clock, self._advance, self.stop, self.skip_ns, self.seeks)  # type: ignore[arg-type]
        if paced is not None:
            paced.start()
        self.stack.push_initial()
        triggers = self.rt.sched.triggers
        # decoding overlaps the jobs (another core), in order
        self.reading = {"reader": "thread" if self.reader is None else "process"}
        items = self.reader if self.reader is not None else \
            prefetched(decoded_feed(self.bag, self.wanted, self.duration_ns, self.skip_ns), stats=self.reading)
        last_ns = 0
        for item in items:
            if paced is not None:   # paused: the runtime stands still here (before the signal check)
                paced.before(item.t_ns, last_ns)
            signal = self.stop() if self.stop is not None else None
            if signal:   # a signal (its handler only set a flag): end after the last message
                self.interrupted, self.duration_ns = signal, last_ns
                break
            last_ns = item.t_ns
            # On the virtual clock a message that triggers no task goes onto the timeline ahead of
            # time: the runtime then knows it is coming, and slack is not cut at every odometry tick.
            if item.t_ns > 0 and (not self.virtual or any(ch in triggers for ch in item.route.channels.values())):
                self._advance(item.t_ns - 1)
            self._push(item)
        self._advance(self.duration_ns, last=True)
        self.collector.drain()   # the writer thread's last batches (and its error, if it had one)

    def _push(self, item: FeedItem) -> None:
        """Push one message into its channels at its logical time, or count it as bad and skip it."""
        for kind, why in item.notes:   # counted, and the message is still used
            _count_bad(self.bad, item.topic, kind, why, self.said)
        if item.value is None:   # rejected: undecodable, nonfinite, or in a damaged chunk (crc, chunk)
            _count_bad(self.bad, item.topic, item.kind or "undecodable", item.error or "", self.said)
            if self.monitor is not None:
                self.monitor.rejected(next(iter(item.route.channels.values())), item.t_ns)
            return
        for role, channel in item.route.channels.items():
            self.rt.push(channel, item.t_ns, self.stack.to_tensor(item.value[role]), item.stamp_ns)
            if self.monitor is not None:
                self.monitor.arrived(channel, item.t_ns, item.t_ns)   # no transport delay in a recording
        self.inputs += 1
        if self.quality is not None and item.route.codec == "odometry":
            self.ego.append((item.log_ns, item.value["value"]))

    def _run_until(self, t_ns: int) -> None:
        """The runtime up to ``t_ns``, stopping where a sensor falls silent for the safety monitor."""
        while self.monitor is not None:
            t = self.monitor.next_check()
            if t is None or t > t_ns:
                break
            self.rt.run_until(t)
            self.monitor.check_silence(t)
        self.rt.run_until(t_ns)

    def _advance(self, t_ns: int, last: bool = False) -> None:
        """Run the runtime up to ``t_ns``, publishing diagnostics at their instants on the way."""
        while self.next_diag <= t_ns:
            self._run_until(self.next_diag)
            self._flush(self.next_diag, False)
            stats = self.rt.stats()
            self.collector.emit(DIAGNOSTICS_TOPIC, self.next_diag, diagnostics(
                {n: {k: s[k] for k in LET_COUNTERS if k in s} for n, s in stats.items()},
                self.origin_ns + self.next_diag))
            self.next_diag += self.cfg.diagnostics_period_ns
            self.parts.append(self.ring.drain())
            if self.progress:
                _progress(self.next_diag, self.duration_ns)
        self._run_until(t_ns)
        self._flush(t_ns, last)

    def _flush(self, t_ns: int, wait: bool) -> None:
        """Write the outputs of the instants <= ``t_ns``. Where results were published on a bet
        (``sched.optimistic``): with ``wait`` every bet settled first (a lost one raises here, in the
        run), else only the instants before the oldest egress still waiting for one."""
        if wait:
            self.rt.settle(t_ns)
        else:
            t_ns = min(t_ns, self.rt.egress_floor() - 1)
        self.collector.flush(t_ns)

    def discard(self) -> None:
        """After ``open`` failed: close what it had built (the collector, the stack: its computing and
        device threads, the bag), so a failed replay leaves no thread behind in a long-lived process."""
        collector, stack = getattr(self, "collector", None), getattr(self, "stack", None)
        if collector is not None:
            collector.close()
        if stack is not None:
            stack.close()
        self.bag.close()

    def abort(self) -> None:
        """After an error mid-run: stop the writer thread and remove the output bag."""
        self.rt.abandon()   # its bets are no longer checked at close
        self.collector.abort()

    def close(self) -> None:
        """Close the reader process, the collector, the stack, the bag and the output bag (partial if interrupted)."""
        if self.reader is not None:
            self.reader.close()
        gc.unfreeze()
        try:
            self.collector.finish(partial=f"interrupted by {self.interrupted} after {self.duration_ns / 1e9:.3f} s "
                                  f"of {self.bag_ns / 1e9:.3f} s" if self.interrupted else None)
        finally:
            self.stack.close()
            self.bag.close()

    def result(self, trace: str | Path | None) -> ReplayResult:
        """What the run did, right after ``close`` (its wall time includes the closing); writes ``trace``."""
        wall = time.perf_counter() - self.wall0
        driver_cpu = time.thread_time() - self.cpu0
        rt, collector, monitor, interrupted = self.rt, self.collector, self.monitor, self.interrupted
        if self.progress:
            print(file=sys.stderr)
        self.parts.append(self.ring.drain())
        cols = TraceColumns.concat(self.parts, self.ring.tasks)
        meta = self.stack.trace_meta(clock="virtual" if self.virtual else "wall", timing=self.timing,
                                     bag=str(self.bag_path))
        if trace is not None:
            cut = {"partial": True, "interrupted": interrupted, "bag_duration_s": self.bag_ns / 1e9} \
                if interrupted else {}
            save_trace(trace, cols, {**meta, "lost_events": self.ring.lost, **cut})
        times = task_times(cols)
        measured = cols.kind == EventKind.MEASURED
        # What the ops really took: under budget timing the trace's execution times are the budgets.
        exec_s = float(cols.b[measured].sum()) / 1e9 if measured.any() else \
            sum(float(t.exec_ns.sum()) for t in times.values()) / 1e9
        result = ReplayResult(bag=str(self.bag_path), duration_s=self.duration_ns / 1e9, wall_s=wall,
                              output_digest=collector.digest.hexdigest(), tasks=times, stats=rt.stats(),
                              outputs=dict(collector.counts), bad_messages=self.bad, inputs=self.inputs,
                              exec_s=exec_s, out_bag=str(self.out) if self.out is not None else None,
                              trace=str(trace) if trace is not None else None, timing=self.timing,
                              deterministic=rt.deterministic, nondeterminism=rt.nondeterminism,
                              hardware=hardware_report(cols, meta) if self.hardware else None,
                              parallel=rt.compute_threads,
                              device=self.stack.device.name)
        if monitor is not None:
            result.extra["safety"] = {**monitor.status(), "history": [
                {"t_s": tr.t_ns / 1e9, "from": STATES[tr.before], "to": STATES[tr.after], "reason": tr.reason}
                for tr in monitor.machine.transitions]}
        result.extra["driver_cpu_s"] = driver_cpu
        reader = self.reader.stats() if self.reader is not None else {}
        result.extra["reading"] = {**self.reading, **reader}   # CPU seconds
        ps = rt.commit_stats()
        if ps:   # the driver's own work is its CPU less what it computed itself
            result.extra.update(compute_cpu_s=ps["compute_ns"] / 1e9, driver_waited_s=ps["waited_ns"] / 1e9,
                                runtime_cpu_s=driver_cpu - ps["driver_compute_ns"] / 1e9)
            if "bets" in ps:
                result.extra["bets"] = ps["bets"]
        if self.retain_channels:
            result.extra["channels"] = collector.channels
        if self.skip_ns:
            result.extra["start_s"] = self.skip_ns / 1e9
        if interrupted:
            result.extra.update(interrupted=interrupted, bag_duration_s=self.bag_ns / 1e9)
        if self.quality is not None and not interrupted:   # measured over a whole bag only
            cfg = self.cfg
            ran = dataclasses.replace(cfg, chains=[c for c in cfg.chains if c.deadline_ns is None] + self.chains)
            extra = {"channels": collector.channels, "cfg": ran} if self.retain_channels else {}
            result.quality = self.quality(self.bag_path, collector.retained, self.origin_ns, self.ego, **extra)
        return result


def _count_bad(bad: dict[str, dict[str, int]], topic: str, kind: str, why: str, said: set[str]) -> None:
    """Count a bad message by topic and kind; the first of each kind on a topic is one line on stderr
    (a damaged chunk's line, which names the chunk, once for all its topics: ``said``)."""
    kinds = bad.setdefault(topic, {})
    if kind not in kinds and why not in said:
        chunk = kind in ("crc", "chunk")
        if chunk:
            said.add(why)
        print(f"rt-runtime replay: warning: {why}" + ("" if chunk else
              f" (further {kind} messages on {topic} are counted silently)"), file=sys.stderr)
    kinds[kind] = kinds.get(kind, 0) + 1


def _progress(t_ns: int, total_ns: int) -> None:
    """A one-line progress bar on stderr (only called on a TTY)."""
    frac = min(1.0, t_ns / total_ns) if total_ns else 1.0
    bar = "#" * int(frac * 30)
    print(f"\rreplay [{bar:<30}] {frac * 100:5.1f}%", end="", file=sys.stderr, flush=True)
