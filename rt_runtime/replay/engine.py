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

import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from ..bag import BagError, BagReader, open_bag
from ..config.stack import IngressRoute, StackConfig
from ..sched import CostModel
from ..sched.events import Observer
from ..sched.optimistic import Mispredicted
from .controller import Controller
from .feed import codec_problems
from .feed_process import READERS, ProcessFeed, bag_bytes, reader_kind
from .paced import Seek
from .parallel import wanted_threads
from .result import ReplayError, ReplayResult
from .run import DIAGNOSTICS_TOPIC, LET_COUNTERS, ReplayRun

__all__ = ["DIAGNOSTICS_TOPIC", "LET_COUNTERS", "ReplayError", "ReplayResult", "codec_problems", "replay"]


def replay(bag_path: str | Path, cfg: StackConfig, *, out: str | Path | None = None, speed: str | float = "max",
           workers: int | None = None, trace: str | Path | None = None, out_format: str = "mcap",
           progress: bool = False, until_s: float | None = None,
           quality: Callable[..., dict[str, Any]] | None = None,
           retain_channels: Sequence[str] | None = None, cost: CostModel | None = None,
           speculate: bool | None = None, timing: str = "budget", hardware: bool = True,
           replace: bool = False, stop: Callable[[], str | None] | None = None,
           parallel: int | None = None, reader: str = "auto", listeners: Sequence[Observer] = (),
           control: Controller | None = None, start_s: float | None = None) -> ReplayResult:
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
    the serial driver, as 0); it applies under budget timing, where the schedule is known before any op runs;
    elsewhere (measured timing, the wall clock) the ops run where they are scheduled, with a note when
    asked for. 0: the serial driver (ops run as they are booked, the driver before parallel commit).
    ``out`` is written into a temporary sibling and renamed on success (``replace``: over an existing
    bag); an exception removes it. ``stop`` is polled before each input message (it returns a signal
    name once one arrived): the replay then ends after the message before, the output bag is closed
    readable and marked partial, the trace's metadata says ``"partial": true``, and
    ``ReplayResult.extra["interrupted"]`` names the signal.
    ``listeners``: ``Observer``s (the live view, ``rt_runtime.live``), told the tasks once the stack is built,
    then attached with ``Scheduler.listen(hot=True)`` (every event); they observe and change nothing (a lost
    bet's rerun: they hear both runs).
    ``control``: on the wall clock, pause, step, rate and seek from a ``replay.controller.Controller``
    (``replay.paced``: the runtime stands still while paused and logical time resumes where it stopped; a seek
    starts the replay again at that instant, as ``start_s`` there would, and what it returns and writes is
    that run's, ``extra["seeks"]`` listing the jumps); ignored on the virtual clock.
    ``start_s``: start that far into the bag, as a fresh start there (logical 0 at that instant: the first
    release of every task, channels at their initial values); ``until_s`` still counts from the bag's start.
    ``reader``: where the bag is read and decoded, ahead of the driver: ``"thread"`` (a thread here),
    ``"process"`` (a child process, off this process's GIL; it starts while the stack builds) or
    ``"auto"`` (the process where the replay reads ``feed_process.PROCESS_MIN_BYTES`` or more and the
    ``parallel`` threads leave a core free).
    """
    if reader not in READERS:
        raise ReplayError(f"reader: expected one of {', '.join(READERS)}, found {reader!r}")
    wanted = {r.topic: r for r in cfg.ingress}
    lost = None
    cut: ReplayRun | None = None   # a first run that a signal had ended: the rerun ends where it did
    computing = max(1, wanted_threads(parallel))
    skip = 0 if start_s is None else int(start_s * 1e9)
    sought: list[float] = []   # the instants each seek restarted at, s
    seen: int | None = None   # the control's jumps acted on (a seek made while the stack is rebuilt is one more)
    optimistic = True   # a lost bet (sched.optimistic): once more, each result settled first
    while True:
        bag = _checked_bag(bag_path, cfg, wanted)
        end_ns = bag.duration_ns if until_s is None else min(bag.duration_ns, int(until_s * 1e9))
        if not 0 <= skip < max(1, end_ns):
            bag.close()
            raise ReplayError(f"--start: expected seconds from 0 to before the end ({end_ns / 1e9:.3f} s"
                              f"{' with --until' if until_s is not None else ''}), found {skip / 1e9:g}")
        duration_ns = end_ns - skip if cut is None else cut.duration_ns
        # The reader process starts first: its start-up overlaps building and warming the stack.
        in_process = reader_kind(reader, bag_bytes(bag, duration_ns), computing) == "process"
        feed = ProcessFeed(bag_path, wanted, duration_ns, skip_ns=skip) if in_process else None
        run = ReplayRun(bag_path, cfg, bag, wanted, feed, duration_ns, quality=quality, progress=progress,
                        stop=stop if cut is None else None, control=control, skip_ns=skip, seeks=seen)
        if cut is not None:   # the same cut, marked as the first run would have marked it
            run.interrupted, run.bag_ns = cut.interrupted, cut.bag_ns
        try:
            run.open(out=out, out_format=out_format, replace=replace, speed=speed, workers=workers, timing=timing,
                     cost=cost, speculate=speculate, hardware=hardware, retain_channels=retain_channels,
                     parallel=parallel, optimistic=optimistic, listeners=listeners)
        except BaseException:
            if feed is not None:   # a set-up that failed leaves no reader process behind
                feed.close()
            run.discard()   # nor computing, device or writer threads
            raise
        try:
            run.feed()
        except Mispredicted as e:
            run.abort()   # nothing of it is kept: the rerun writes ``out`` from the start
            lost = str(e)
            cut = run if run.interrupted else None
            optimistic = False
            print(f"rt-runtime replay: note: --parallel: {lost}; replaying again with each result computed before "
                  "it is published (the same outputs, slower)", file=sys.stderr)
            continue
        except Seek as e:
            run.abort()   # a fresh start at the instant sought: ``out`` and the report are that run's
            skip, seen = min(e.target_ns, max(0, end_ns - 1)), e.seeks
            sought.append(skip / 1e9)
            print(f"rt-runtime replay: seek to {skip / 1e9:.3f} s: the stack starts there afresh (channels at their "
                  "initial values, every task released anew; docs/ROS.md)", file=sys.stderr)
            continue
        except BaseException:
            run.abort()   # an error mid-run: nothing is left at ``out``, a rerun starts clean
            raise
        finally:
            run.close()
        break
    result = run.result(trace)
    if lost is not None:
        result.extra["lost_bet"] = lost
    if sought:
        result.extra["seeks"] = sought
    return result


def _checked_bag(bag_path: str | Path, cfg: StackConfig, wanted: dict[str, IngressRoute]) -> BagReader:
    """The bag, open, once it has every topic the configuration reads, each with a codec that fits."""
    try:
        bag = open_bag(bag_path)
    except BagError as e:
        raise ReplayError(str(e)) from None
    missing = sorted(set(wanted) - set(bag.topics))
    problems = [f"{bag_path}: the configuration needs topic(s) {missing} that the bag does not have; "
                f"the bag has {sorted(bag.topics)} (remap with --remap FROM=TO)"] if missing else []
    problems += codec_problems(cfg, bag.topics)
    if problems:
        bag.close()
        raise ReplayError(problems[0] if len(problems) == 1 else
                          f"{bag_path}: {len(problems)} problems, one per line:\n" + "\n".join(problems))
    return bag

