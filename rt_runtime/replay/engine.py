"""Deterministic replay: a bag's sensor messages in, the configured stack under the scheduler,
outputs and a deadline report out.

Order of one replay step (see docs/CYCLE.md for what the runtime does inside ``run_until``):

1. Read the next message; its logical time is its log time minus the bag's start.
2. Let the runtime run everything strictly before that instant (releases, jobs, LET publishes),
   then flush the outputs published so far, in (time, topic) order, to the digest and the bag.
3. Decode the message with its topic's codec and push it into its channel at its logical time.
   A message that cannot be decoded, carries NaN/Inf or lies in a damaged chunk is counted (per
   topic and kind, ``ReplayResult.bad_messages``), skipped and told to the safety monitor as a
   rejection; a header stamp going backwards or far from the log time is counted, the message used.
4. Diagnostics are published at every multiple of the diagnostics period, after the outputs of
   that instant.

On the ``VirtualClock`` (``--speed max``) time jumps from event to event. Under budget timing (the
default) every op takes its budget (``sched.budget``): the schedule, misses and reactions included,
depends only on the bag and the config, and what each op really took is recorded beside it and
simulated into the hardware timeline (``analysis.hardware``). Under measured timing ops advance
time by the CPU time they used: the outputs show what this hardware's overruns would do. On the
WallClock (``--speed X``) messages are fed at X times their recorded pace; timing is real.
"""
from __future__ import annotations

import dataclasses
import gc
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..analysis.hardware import hardware_report
from ..analysis.trace_stats import TaskTimes, task_times
from ..bag import BagError, BagWriter, open_bag
from ..config.stack import StackConfig, build_bindings, run_chains
from ..drive import open_stack
from ..io.egress import diagnostics
from ..safety.degrade import STATES
from ..sched import CostModel, VirtualClock, WallClock
from ..sched.binding import cpu_time_cost
from ..sched.budget import BudgetCost
from ..sched.events import EventKind
from ..trace import TraceColumns, TraceRing, save_trace
from .feed import codec_problems, decoded_feed, prefetched
from .feed_process import READERS, ProcessFeed, bag_bytes, reader_kind
from .parallel import parallel_threads

DIAGNOSTICS_TOPIC = "/diagnostics"
# Counters that depend only on logical time under LET while no timing fault occurs (overruns and
# response times do not): the ones replay diagnostics carry, so the
# output stream is the same on any machine, at any speed, with any number of workers.
LET_COUNTERS = ("released", "published", "missed", "skipped", "aborted", "degraded", "recovered",
                "dropped_releases", "no_input", "errors", "stalls", "mode", "safety_state")


# Counters of jobs that did not run as planned: a run with none of them is clean (ReplayResult.clean).
FAULTS = ("missed", "skipped", "aborted", "degraded", "stalls", "errors", "dropped_releases")
TIMINGS = ("budget", "measured")


class ReplayError(ValueError):
    """A replay that cannot start: unreadable bag, missing topics, bad configuration."""


@dataclass
class ReplayResult:
    """What a replay did: per-task timing, digest, counts, and whether it stayed deterministic."""

    bag: str
    duration_s: float
    wall_s: float
    output_digest: str
    tasks: dict[str, TaskTimes]
    stats: dict[str, dict[str, Any]]
    outputs: dict[str, int]
    bad_messages: dict[str, dict[str, int]]   # topic -> kind (undecodable, nonfinite, crc, stamp_backwards, ...) -> n
    inputs: int
    exec_s: float = 0.0
    quality: dict[str, Any] | None = None
    out_bag: str | None = None
    trace: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    timing: str = "budget"   # "budget" | "measured" on the virtual clock; "wall" on the wall clock
    # Outputs depend only on the bag and the config (always so under budget timing); else why not.
    deterministic: bool = True
    nondeterminism: list[tuple[int, str]] = field(default_factory=list)
    hardware: dict[str, Any] | None = None   # analysis.hardware.hardware_report: this machine's timeline
    parallel: int = 1   # threads that computed the jobs (sched.parallel); 1 also where the driver computed them
    device: str = "cpu"   # what the graphs ran on: cpu, cpu-async (the asynchronous twin), cuda:N

    @property
    def speedup(self) -> float:
        """Bag duration over wall time."""
        return self.duration_s / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def misses(self) -> int:
        """Deadline misses over all tasks."""
        return sum(int(s.get("missed", 0)) for s in self.stats.values())

    @property
    def errors(self) -> int:
        """Jobs ended by an op that raised (a deterministic error, not a timing fault)."""
        return sum(int(s.get("errors", 0)) for s in self.stats.values())

    @property
    def faults(self) -> dict[str, int]:
        """Jobs that did not run as planned, by kind (missed, skipped, aborted, ...), the non-zero ones."""
        out = {k: sum(int(s.get(k, 0)) for s in self.stats.values()) for k in FAULTS}
        return {k: v for k, v in out.items() if v}

    @property
    def clean(self) -> bool:
        """No miss, no error, no watchdog reaction, no dropped release, no stall."""
        return not self.faults

    @property
    def inexact_commits(self) -> int:
        """Speculative outputs committed for inputs that were within tolerance but not bit-equal."""
        return sum(int(s.get("speculation", {}).get("inexact_hits", 0)) for s in self.stats.values())

    @property
    def runtime_share(self) -> float:
        """The part of wall time that was not op execution (scheduling, channels, decode, encode)."""
        return max(0.0, 1.0 - self.exec_s / self.wall_s) if self.wall_s > 0 else 0.0


def replay(bag_path: str | Path, cfg: StackConfig, *, out: str | Path | None = None, speed: str | float = "max",
           workers: int | None = None, trace: str | Path | None = None, out_format: str = "mcap",
           progress: bool = False, until_s: float | None = None,
           quality: Callable[..., dict[str, Any]] | None = None,
           retain_channels: Sequence[str] | None = None, cost: CostModel | None = None,
           speculate: bool | None = None, timing: str = "budget", hardware: bool = True,
           replace: bool = False, stop: Callable[[], str | None] | None = None,
           parallel: int | None = None, reader: str = "auto") -> ReplayResult:
    """Replay a bag through the configured stack and return what happened.

    ``quality(bag, retained egress groups, start_ns, odometry)`` measures the outputs after the run.
    ``retain_channels`` (default: the ``channels`` attribute of ``quality``, if any) are channels
    whose publications are kept too, though not egressed, neither written nor hashed; they go to
    ``quality`` as ``channels=`` along with ``cfg=``, and into ``ReplayResult.extra["channels"]``.
    ``timing`` on the virtual clock: ``"budget"`` (each op takes its budget: one schedule on every
    machine) or ``"measured"`` (each op takes the CPU time its thread used here); ``cost`` overrides
    either with any cost model. ``hardware``: record what each op took here and simulate it (the
    hardware timeline, ``ReplayResult.hardware``).
    ``speculate``: None runs the config's ``speculate:`` keys as they say (``enabled``), True turns them
    all on, False off (speculation runs in slack on the virtual clock or in worker threads).
    ``parallel``: threads computing jobs while the virtual clock books them (``sched.parallel``; None:
    one per core); it applies under budget timing, where the schedule is known before any op runs;
    elsewhere (measured timing, the wall clock) the ops run where they are scheduled, with a note when
    asked for. 0: the serial driver (ops run as they are booked, the driver before parallel commit).
    ``out`` is written into a temporary sibling and renamed on success (``replace``: over an existing
    bag); an exception removes it. ``stop`` is polled before each input message (it returns a signal
    name once one arrived): the replay then ends after the message before, the output bag is closed
    readable and marked partial, the trace's metadata says ``"partial": true``, and
    ``ReplayResult.extra["interrupted"]`` names the signal.
    ``reader``: where the bag is read and decoded, ahead of the driver: ``"thread"`` (a thread here),
    ``"process"`` (a child process, off this process's GIL; it starts while the stack builds) or
    ``"auto"`` (the process where the replay reads ``feed_process.PROCESS_MIN_BYTES`` or more and the
    ``parallel`` threads leave a core free).
    """
    from .outputs import OutputCollector

    if reader not in READERS:
        raise ReplayError(f"reader: expected one of {', '.join(READERS)}, found {reader!r}")
    try:
        bag = open_bag(bag_path)
    except BagError as e:
        raise ReplayError(str(e)) from None
    wanted = {r.topic: r for r in cfg.ingress}
    missing = sorted(set(wanted) - set(bag.topics))
    problems = [f"{bag_path}: the configuration needs topic(s) {missing} that the bag does not have; "
                f"the bag has {sorted(bag.topics)} (remap with --remap FROM=TO)"] if missing else []
    problems += codec_problems(cfg, bag.topics)
    if problems:
        bag.close()
        raise ReplayError(problems[0] if len(problems) == 1 else
                          f"{bag_path}: {len(problems)} problems, one per line:\n" + "\n".join(problems))

    duration_ns = bag.duration_ns if until_s is None else min(bag.duration_ns, int(until_s * 1e9))
    # The reader process starts first: its start-up overlaps building and warming the stack.
    computing = max(1, parallel if parallel is not None else os.cpu_count() or 1)   # as parallel_threads asks
    in_process = reader_kind(reader, bag_bytes(bag, duration_ns), computing) == "process"
    feed = ProcessFeed(bag_path, wanted, duration_ns) if in_process else None
    try:
        import torch

        if timing not in TIMINGS:
            raise ReplayError(f"--timing: expected one of {', '.join(TIMINGS)}, found {timing!r}")
        bindings, initial = build_bindings(cfg, speculate=speculate)
        workers = workers or cfg.workers
        virtual = speed == "max"
        if not virtual:
            timing = "wall"
        elif cost is None:
            cost = BudgetCost(bindings) if timing == "budget" else cpu_time_cost
        clock = VirtualClock() if virtual else WallClock(rate=float(speed))
        ring = TraceRing(1 << 20)
        parts: list[TraceColumns] = []
        writer: BagWriter | None = None   # created once the stack is built and warm (below)
        if retain_channels is None:
            retain_channels = tuple(getattr(quality, "channels", ())) if quality is not None else ()
        collector = OutputCollector(cfg.egress, cfg.frame, bag.start_ns, writer, retain=quality is not None,
                                    background=True,
                                    retain_channels=retain_channels)
        ego: list[tuple[int, Any]] = []  # odometry as pushed, for the quality measures
        chains, notes = run_chains(cfg, bindings)
        threads = parallel_threads(parallel, virtual and bool(getattr(cost, "logical", False)), bindings, notes)
        for note in notes:
            print(f"rt-runtime replay: note: {note}", file=sys.stderr)
        stack = open_stack(cfg, bindings, initial, clock=clock, workers=workers, cost=cost, sink=ring,
                           egress=collector.on_publish, chains=chains, parallel=threads or None,
                           adopt_ingress=True,   # the feed's tensors are fresh: no copy at ingress
                           # on the wall clock a speculating task needs worker threads (the inline driver does not
                           # speculate), and SCHED_FIFO applies where the OS permits unless the config's realtime: says
                           threaded=not virtual and (workers > 1 or any(b.speculate is not None for b in bindings)),
                           realtime=True)
        rt = stack.rt
        rt.sched.hw = hardware
        if not virtual:   # say what "realtime" does here, before it does it
            print(f"rt-runtime replay: {rt.describe_realtime()}", file=sys.stderr)
        monitor = stack.safety_monitor()
        # Intra-op threads per computing thread: more only fight over the cores.
        torch.set_num_threads(max(1, min(cfg.threads, (os.cpu_count() or 1) // max(1, threads))))
        stack.warm_up()
        bad: dict[str, dict[str, int]] = {}
        said: set[str] = set()   # damaged chunks already warned of
        inputs = 0
        next_diag = cfg.diagnostics_period_ns

        def run_until(t_ns: int) -> None:
            """The runtime up to ``t_ns``, stopping where a sensor falls silent for the safety monitor."""
            while monitor is not None:
                t = monitor.next_check()
                if t is None or t > t_ns:
                    break
                rt.run_until(t)
                monitor.check_silence(t)
            rt.run_until(t_ns)

        def advance(t_ns: int) -> None:
            """Run the runtime up to ``t_ns``, publishing diagnostics at their instants on the way."""
            nonlocal next_diag
            while next_diag <= t_ns:
                run_until(next_diag)
                collector.flush(next_diag)
                stats = rt.stats()
                collector.emit(DIAGNOSTICS_TOPIC, next_diag, diagnostics(
                    {n: {k: s[k] for k in LET_COUNTERS if k in s} for n, s in stats.items()},
                    bag.start_ns + next_diag))
                next_diag += cfg.diagnostics_period_ns
                parts.append(ring.drain())
                if progress:
                    _progress(next_diag, duration_ns)
            run_until(t_ns)
            collector.flush(t_ns)

        if out is not None:   # only now: a stack that fails to build leaves nothing at ``out``
            writer = BagWriter(out, out_format, replace=replace)
            try:
                writer.add_topic(DIAGNOSTICS_TOPIC, "diagnostic_msgs/msg/DiagnosticArray")
                collector.attach(writer)
            except BaseException:
                writer.abort()
                raise
    except BaseException:
        if feed is not None:
            feed.close()
        raise
    interrupted: str | None = None
    bag_ns, last_ns = duration_ns, 0
    gc.collect()
    gc.freeze()  # what exists now is never collected: a full collection cannot stall a job mid-run
    wall0 = time.perf_counter()
    cpu0 = time.thread_time()   # the driver's own CPU (booking, channels, encoding), beside the computing threads'
    if not virtual:
        clock.reset_epoch()
    try:
        stack.push_initial()
        triggers = rt.sched.triggers
        # decoding overlaps the jobs (another core), in order
        reading: dict[str, Any] = {"reader": "thread" if feed is None else "process"}
        items = feed if feed is not None else prefetched(decoded_feed(bag, wanted, duration_ns), stats=reading)
        for item in items:
            if stop is not None and stop():   # a signal (its handler only set a flag): end after the last message
                interrupted, duration_ns = stop(), last_ns
                break
            last_ns = item.t_ns
            # On the virtual clock a message that triggers no task goes onto the timeline ahead of
            # time: the runtime then knows it is coming, and slack is not cut at every odometry tick.
            if item.t_ns > 0 and (not virtual or any(ch in triggers for ch in item.route.channels.values())):
                advance(item.t_ns - 1)
            for kind, why in item.notes:   # counted, and the message is still used
                _count_bad(bad, item.topic, kind, why, said)
            if item.value is None:   # rejected: undecodable, nonfinite, or in a damaged chunk (crc, chunk)
                _count_bad(bad, item.topic, item.kind or "undecodable", item.error or "", said)
                if monitor is not None:
                    monitor.rejected(next(iter(item.route.channels.values())), item.t_ns)
                continue
            for role, channel in item.route.channels.items():
                rt.push(channel, item.t_ns, stack.to_tensor(item.value[role]), item.stamp_ns)
                if monitor is not None:
                    monitor.arrived(channel, item.t_ns, item.t_ns)   # no transport delay in a recording
            inputs += 1
            if quality is not None and item.route.codec == "odometry":
                ego.append((item.log_ns, item.value["value"]))
        advance(duration_ns)
        collector.drain()   # the writer thread's last batches (and its error, if it had one)
    except BaseException:
        collector.close()
        if writer is not None:   # an error mid-run: nothing is left at ``out``, a rerun starts clean
            writer.abort()
        raise
    finally:
        if feed is not None:
            feed.close()
        gc.unfreeze()
        collector.close()
        stack.close()
        bag.close()
        if writer is not None:
            writer.close(partial=f"interrupted by {interrupted} after {duration_ns / 1e9:.3f} s of "
                         f"{bag_ns / 1e9:.3f} s" if interrupted else None)
    wall = time.perf_counter() - wall0
    driver_cpu = time.thread_time() - cpu0
    if progress:
        print(file=sys.stderr)
    parts.append(ring.drain())
    cols = TraceColumns.concat(parts, ring.tasks)
    meta = stack.trace_meta(clock="virtual" if virtual else "wall", timing=timing, bag=str(bag_path))
    if trace is not None:
        cut = {"partial": True, "interrupted": interrupted, "bag_duration_s": bag_ns / 1e9} if interrupted else {}
        save_trace(trace, cols, {**meta, "lost_events": ring.lost, **cut})
    times = task_times(cols)
    measured = cols.kind == EventKind.MEASURED
    # What the ops really took: under budget timing the trace's execution times are the budgets.
    exec_s = float(cols.b[measured].sum()) / 1e9 if measured.any() else \
        sum(float(t.exec_ns.sum()) for t in times.values()) / 1e9
    result = ReplayResult(bag=str(bag_path), duration_s=duration_ns / 1e9, wall_s=wall,
                          output_digest=collector.digest.hexdigest(), tasks=times, stats=rt.stats(),
                          outputs=dict(collector.counts), bad_messages=bad, inputs=inputs, exec_s=exec_s,
                          out_bag=str(out) if out is not None else None,
                          trace=str(trace) if trace is not None else None, timing=timing,
                          deterministic=rt.deterministic, nondeterminism=rt.nondeterminism,
                          hardware=hardware_report(cols, meta) if hardware else None,
                          parallel=max(1, rt.sched.par.threads if rt.sched.par is not None else 1),
                          device=stack.device.name)
    if monitor is not None:
        result.extra["safety"] = {**monitor.status(), "history": [
            {"t_s": tr.t_ns / 1e9, "from": STATES[tr.before], "to": STATES[tr.after], "reason": tr.reason}
            for tr in monitor.machine.transitions]}
    result.extra["driver_cpu_s"] = driver_cpu
    result.extra["reading"] = {**reading, **(feed.stats() if feed is not None else {})}   # CPU seconds
    if rt.sched.par is not None:   # the driver's own work is its CPU less what it computed itself
        ps = rt.sched.par.stats()
        result.extra.update(compute_cpu_s=ps["compute_ns"] / 1e9, driver_waited_s=ps["waited_ns"] / 1e9,
                            runtime_cpu_s=driver_cpu - ps["driver_compute_ns"] / 1e9)
    if retain_channels:
        result.extra["channels"] = collector.channels
    if interrupted:
        result.extra.update(interrupted=interrupted, bag_duration_s=bag_ns / 1e9)
    if quality is not None and not interrupted:   # measured over a whole bag only
        ran = dataclasses.replace(cfg, chains=[c for c in cfg.chains if c.deadline_ns is None] + chains)
        extra = {"channels": collector.channels, "cfg": ran} if retain_channels else {}
        result.quality = quality(bag_path, collector.retained, bag.start_ns, ego, **extra)
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
