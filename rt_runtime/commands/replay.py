"""`rt-runtime replay [BAG]`: a recorded bag through the whole stack, outputs and a deadline report out."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register the subcommand."""
    from . import args as A

    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("bag", nargs="?", help="rosbag2 folder, .mcap or .db3 (default: the built-in scenario)")
    p.add_argument("--config", help="stack configuration (default: config/stack.yaml)")
    p.add_argument("--out", help="write the outputs (Path, MarkerArray, diagnostics) into this new bag")
    p.add_argument("--out-format", choices=("mcap", "sqlite3"), default="mcap", help="output bag storage")
    p.add_argument("--speed", default="max", type=A.speed, help="'max' (virtual time, as fast as the CPU allows) or a factor "
                                                 "of real time on the wall clock, e.g. 1 or 0.5")
    p.add_argument("--timing", choices=("budget", "measured"), default=None,
                   help="on the virtual clock: 'budget' (default; every op takes its budget, one schedule and one "
                        "digest on any machine) or 'measured' (ops take the CPU time they used here)")
    p.add_argument("--workers", type=A.workers, help="worker count, 1 or more (default: the config's)")
    p.add_argument("--parallel", type=A.int_range(1, 1024, what="a thread count from 1 to 1024"), metavar="N", help="threads computing jobs under budget timing, "
                   "committed in logical order: one digest for every N (default: none, each op computed where it is booked; "
                   "docs/REPLAY.md, --workers and --parallel)")
    p.add_argument("--reader", choices=("auto", "thread", "process"), default="auto",
                   help="where the bag is read and decoded: a thread, a child process (off the driver's GIL), or "
                        "auto (the process where the replay reads 128 MiB or more and --parallel leaves a core free)")
    p.add_argument("--device", type=A.device, help="cpu, cpu-async (the asynchronous CPU twin of CUDA: ops "
                   "launched on stream threads, completion events), cuda or cuda:N (default: the config's)")
    p.add_argument("--trace", help="write a trace file for `rt-runtime analyze`")
    p.add_argument("--force", action="store_true", help="replace an existing --out bag or --trace file "
                   "(never an input); without it an existing one is refused")
    p.add_argument("--remap", action="append", default=[], metavar="FROM=TO", help="rename a topic the config uses")
    p.add_argument("--until", type=A.seconds, metavar="S", help="stop after S seconds of the bag (S > 0)")
    p.add_argument("--start", type=A.nonneg_seconds, metavar="S", help="start S seconds into the bag, as a fresh "
                   "start there: channels at their initial values, every task released anew (docs/REPLAY.md)")
    p.add_argument("--speculate", action=argparse.BooleanOptionalAction, default=None,
                   help="turn the config's speculate: keys on (or off with --no-speculate); default: as configured")
    p.add_argument("--expect", metavar="FILE", help="gates: YAML of dotted paths into the replay JSON and their "
                   "bounds, e.g. 'misses: {max: 0}'; exit 1 when one does not hold (docs/REPLAY.md, Fleet replay)")
    p.add_argument("--foxglove", nargs="?", const="", metavar="[HOST:]PORT",
                   help="serve the runtime's state live (jobs, per-task response and slack, safety level, degraded "
                        "tasks, chain latencies, speculation, trajectory and objects) on a Foxglove websocket at "
                        "127.0.0.1:8765, or [HOST:]PORT (0: any free port); docs/ROS.md, Live view")
    add_live_flags(p)
    p.add_argument("--services", action="store_true",
                   help="with --speed X: pause, resume, step, rate and seek over ROS 2 services and parameters on node "
                        "rt_runtime_replay, named as play's (docs/ROS.md, Controlling playback; the ros extra)")
    p.add_argument("--clock", action="store_true", help="with --speed X: publish /clock with the bag time the "
                   "replay stands at, as play --clock does (held while paused; node rt_runtime_replay; the ros extra)")
    p.add_argument("--clock-hz", type=A.float_range(0.0, 10_000.0, low_open=True, what="a rate above 0 up to 10000 Hz"),
                   default=100.0, help="/clock ticks per wall second (with --clock; default 100)")
    p.add_argument("--paused", action="store_true",
                   help="with --speed X: start paused (resume from the keys, --foxglove's playback bar or --services)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON document")
    return p


def add_live_flags(p: argparse.ArgumentParser) -> None:
    """``--foxglove-hz`` and ``--foxglove-mcap`` (replay and run)."""
    from . import args as A

    p.add_argument("--foxglove-hz", type=A.float_range(0, 1000, low_open=True, what="a rate in Hz above 0, at most 1000"),
                   default=10.0, metavar="HZ", help="the live view's rate per second of the runtime's time: "
                   "trajectory and objects at most HZ, jobs and chain latencies batched per 1/HZ s (default 10)")
    p.add_argument("--foxglove-mcap", metavar="FILE", help="write the live view's channels into this new MCAP "
                   "file (with or without --foxglove; Foxglove opens it); an interrupted run leaves it marked partial")


def live_view(args: argparse.Namespace, cfg: Any, who: str, server_options: dict[str, Any] | None = None) -> Any:
    """``--foxglove`` / ``--foxglove-mcap``'s live view for stack ``cfg`` (None without either); a bad value, a busy
    port or an output path that may not be written: one line (``UsageError``)."""
    endpoint, mcap = getattr(args, "foxglove", None), getattr(args, "foxglove_mcap", None)
    if endpoint is None and mcap is None:
        return None
    from ..cli import UsageError
    from ..live.channels import LiveSpec
    from ..live.foxglove import LiveError, start

    try:
        return start(endpoint or None, who, spec=LiveSpec.of(cfg, getattr(args, "foxglove_hz", 10.0)),
                     serve=endpoint is not None, mcap=mcap, replace=bool(getattr(args, "force", False)),
                     server_options=server_options)
    except LiveError as e:
        raise UsageError(str(e)) from None


def result_json(r: Any) -> dict[str, Any]:
    """The documented JSON shape (plus a few extra keys)."""
    doc: dict[str, Any] = {
        "bag": r.bag, "duration_s": round(r.duration_s, 6), "wall_s": round(r.wall_s, 6),
        "speedup": round(r.speedup, 3), "output_digest": r.output_digest, "timing": r.timing,
        "deterministic": r.deterministic, "clean": r.clean, "misses": r.misses, "faults": r.faults,
        "nondeterminism": [{"t_ms": t / 1e6, "why": why} for t, why in r.nondeterminism[:10]],
        "tasks": [{"name": name, "jobs": t.released, "misses": int(r.stats[name].get("missed", 0)),
                   "errors": int(r.stats[name].get("errors", 0)),
                   "response_ms": {k: round(v, 4) for k, v in t.percentiles_ms().items() if k != "p90"}}
                  for name, t in r.tasks.items()],
        "outputs": r.outputs, "bad_messages": r.bad_messages, "inputs": r.inputs,
        "runtime_share": round(r.runtime_share, 4), "parallel": r.parallel, "device": r.device,
    }
    if r.hardware is not None:
        doc["hardware"] = r.hardware
    if r.quality is not None:
        doc["quality"] = r.quality
    if "safety" in r.extra:
        doc["safety"] = r.extra["safety"]
    for key in ("bets", "lost_bet", "start_s", "seeks"):   # bets (--parallel 2 or more), a lost one; --start, seeks
        if key in r.extra:
            doc[key] = r.extra[key]
    spec = {name: s["speculation"] for name, s in r.stats.items() if "speculation" in s}
    if spec:
        doc["speculation"] = spec
    return doc


def print_summary(r: Any, out: Any = None) -> None:
    """The human summary: per task jobs, misses and response times; duration, wall time, speed-up."""
    out = out if out is not None else sys.stdout   # the stream now, not the one at import
    head = {"budget": "logical timeline (budget timing: every op takes its budget)",
            "measured": "timeline (measured timing: ops take the CPU time they used here)",
            "wall": "timeline (wall clock)"}.get(r.timing, r.timing)
    print(head, file=out)
    print(f"{'task':<22} {'jobs':>6} {'misses':>7} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'mode':>9}", file=out)
    for name, t in r.tasks.items():
        p = t.percentiles_ms()
        s = r.stats[name]
        print(f"{name:<22} {t.released:>6} {int(s.get('missed', 0)):>7} {int(s.get('errors', 0)):>7} "
              f"{p['p50']:>8.2f} {p['p99']:>8.2f} {p['max']:>8.2f} {s.get('mode', ''):>9}", file=out)
    if r.hardware is not None and r.timing != "wall":
        from ..analysis.hardware import format_hardware
        for line in format_hardware({**r.hardware, "missed": r.hardware["missed"][:3]}):
            print(line, file=out)
    start = r.extra.get("start_s")
    seeks = r.extra.get("seeks")
    print(f"bag {r.bag}: {r.duration_s:.2f} s replayed" + (f" from {start:.2f} s" if start else "")
          + (f" (after {len(seeks)} seek(s), the last to {seeks[-1]:.2f} s)" if seeks else "")
          + f" in {r.wall_s:.2f} s wall "
          f"({r.speedup:.2f}x real time); {r.inputs} sensor messages in, "
          + ", ".join(f"{n} {t}" for t, n in r.outputs.items()) + " out", file=out)
    if r.bad_messages:   # {topic: {kind: n}}: rejected kinds were skipped, stamp_* ones used
        print("bad messages: " + "; ".join(f"{t}: " + ", ".join(f"{n} {k}" for k, n in kinds.items())
                                           for t, kinds in r.bad_messages.items()), file=out)
    if r.quality:
        plan, det = r.quality.get("planning", {}), r.quality.get("detection", {})
        f = lambda v, unit="": "n/a" if v is None else f"{v:.2f}{unit}"  # noqa: E731
        print(f"quality: collision-free {f(plan.get('collision_free_rate'))} of {plan.get('trajectories', 0)} plans, "
              f"min clearance {f(plan.get('min_clearance_m'), ' m')}; detection precision "
              f"{f(det.get('precision'))}, recall {f(det.get('recall'))}", file=out)
    safety = r.extra.get("safety")
    if safety is not None:
        hist = safety["history"]
        print("safety: " + ("nominal throughout" if not hist else f"{safety['state']} at the end; " + ", ".join(
            f"{h['t_s']:.2f} s {h['from']} -> {h['to']} ({h['reason']})" for h in hist[:4])
            + (f", ... {len(hist) - 4} more" if len(hist) > 4 else "")), file=out)
    for name, s in r.stats.items():
        sp = s.get("speculation")
        if sp is not None:
            n = max(1, int(s.get("released", 0)) - 1)   # the first job has nothing to speculate from
            print(f"speculation ({name}): {sp['hits']} hits of {n} releases ({100 * sp['hits'] / n:.0f}%), "
                  f"{sp['misses']} misses, {sp['no_hypothesis']} without a finished hypothesis; "
                  f"{sp['latency_saved_ns'] / 1e6:.1f} ms of planning saved, {sp['ops_wasted']} of "
                  f"{sp['spec_ops']} speculative ops wasted", file=out)
    print(f"output digest {r.output_digest[:16]}…  {verdict(r)}", file=out)


def verdict(r: Any) -> str:
    """Two separate facts: deterministic (outputs depend only on bag + config) and clean (nothing went wrong)."""
    if r.deterministic:
        det = "deterministic (budget timing: outputs depend only on the bag and the config)" \
            if r.timing == "budget" else "deterministic (no timing fault touched an output)"
    else:
        t, why = r.nondeterminism[0] if r.nondeterminism else (0, "timing faults")
        det = f"NOT deterministic: from {t / 1e6:.1f} ms on, outputs depend on this machine's timing ({why})"
    faults = r.faults
    clean = "clean" if not faults else "not clean: " + ", ".join(f"{n} {k}" for k, n in faults.items())
    if r.inexact_commits:
        clean += f"; {r.inexact_commits} speculative commit(s) on inputs within tolerance"
    return f"{det}; {clean}"


def _timing(timing: str | None, speed: str | float) -> str:
    """``--timing`` checked against ``--speed``: it chooses the virtual clock's cost; the wall clock is real."""
    from ..cli import UsageError

    if timing is not None and speed != "max":
        raise UsageError(f"--timing {timing}: applies to the virtual clock (--speed max); at --speed {speed} "
                         "the wall clock's timing is real")
    return timing or "budget"


def _playback(bag: Any, cfg: Any, speed: float, args: argparse.Namespace) -> tuple[Any, Any, int]:
    """A wall-clock replay's playback core (logical time over the bag, or --until; one period: the shortest
    task period), with --foxglove its playback bar (stamped on the bag's time, as the live view is), and the
    bag's start instant (what the core's 0 is on the bag's time line)."""
    from ..bag import open_bag
    from ..replay import control as C
    from ..replay.paced import replay_controller

    with open_bag(bag) as r:
        start_ns, duration_ns = r.start_ns, r.duration_ns
    if args.until is not None:
        duration_ns = min(duration_ns, int(args.until * 1e9))
    periods = [t.period_ns for t in cfg.tasks if getattr(t, "period_ns", None)]
    control = replay_controller(max(1, duration_ns), speed, min(periods) if periods else 100_000_000,
                                paused=bool(getattr(args, "paused", False)))
    if getattr(args, "start", None):   # the core's time is the bag's: it starts where the replay does
        control.update(lambda pb, now: C.arrive(pb, now, min(int(args.start * 1e9), pb.end_ns)))
    fox = None
    if getattr(args, "foxglove", None) is not None:
        from ..cli import UsageError
        from ..live.foxglove import LiveError
        from ..live.playback import FoxglovePlayback

        try:
            fox = FoxglovePlayback(control, offset_ns=start_ns, who="rt-runtime replay")
        except LiveError as e:
            raise UsageError(str(e)) from None
    return control, fox, start_ns


def _services(control: Any, args: argparse.Namespace, start_ns: int) -> Any:
    """``--services`` and ``--clock``: the player's services and /clock on a node of the replay's own (a
    one-line error without rclpy)."""
    from ..cli import UsageError
    from ..ros import rclpy_missing

    flag = "--services" if args.services else "--clock"
    if control is None:
        raise UsageError(f"{flag}: applies to the wall clock (--speed X); --speed max runs as fast as it can")
    missing = rclpy_missing()
    if missing:
        raise UsageError(f"{flag}: {missing}")
    from ..ros.env import prepare_environment

    prepare_environment()   # before rclpy loads the RMW
    try:
        from ..ros.player_services import ControlNode
    except ImportError as e:
        raise UsageError(f"{flag}: rclpy or std_srvs is installed but cannot be loaded ({e}); install the ros "
                         "extra") from None
    node = ControlNode(control, services=args.services, clock_hz=args.clock_hz if args.clock else None,
                       offset_ns=start_ns)
    if args.clock:
        print(f"rt-runtime replay: /clock at {args.clock_hz:g} Hz on the bag's time", file=sys.stderr, flush=True)
    if not args.services:
        return node
    print("rt-runtime replay: pause, resume, step, rate and seek on /rt_runtime_replay (~/pause, ~/resume, "
          "~/toggle_paused, ~/is_paused, ~/play_next, ~/play_period; parameters rate, seek)", file=sys.stderr,
          flush=True)
    return node


def _on_terminal() -> bool:
    try:
        return os.isatty(sys.stdin.fileno())
    except (OSError, ValueError):
        return False


def _keys(control: Any) -> Any:
    """The keys on a terminal's stdin (their list on stderr), else None."""
    from ..replay.keyboard import HELP, keyboard

    def say(line: str) -> None:
        print(f"rt-runtime replay: {line}", file=sys.stderr, flush=True)

    keys = keyboard(control.command, lambda: control.state, say)
    if keys is not None:
        say(HELP + " (a seek starts the stack afresh there)")
    return keys


def stack_for_bag(config: Any, bag: Any, remap: dict[str, str] | None = None) -> Any:
    """The stack as `replay` runs it on ``bag`` (``batch``'s workers too: one digest): the config with its
    remaps, calibrated from the bag's CameraInfo and /tf_static; notes on stderr."""
    from ..config.calibration import calibrate_from_bag
    from ..config.stack import load_stack

    cfg, notes = calibrate_from_bag(load_stack(config, remap or {}), str(bag))
    for note in notes:
        print(f"rt-runtime replay: note: {note}", file=sys.stderr)
    return cfg


def run(args: argparse.Namespace) -> int:
    """Replay and report; 1 when an --expect bound does not hold; 130/143 when SIGINT/SIGTERM cut the
    replay short (outputs kept, marked partial)."""
    from ..bag import BagError
    from ..cli import UsageError
    from ..config import ConfigError
    from ..config.stack import parse_remap
    from ..fleet.gates import gate_lines, gate_verdict, load_expect
    from ..outpaths import EXIT_CODES, INTERRUPT, bag_extent, check_distinct, check_output
    from ..replay import ReplayError, replay
    from ..replay.defaults import default_bag, default_config
    from ..replay.quality import quality_from_outputs

    speed: str | float = args.speed
    if speed != "max":
        try:
            speed = float(speed)
        except ValueError:
            raise UsageError(f"--speed: expected 'max' or a positive number, found {args.speed!r}") from None
        if speed <= 0:
            raise UsageError(f"--speed: expected 'max' or a positive number, found {args.speed!r}")
    force = bool(getattr(args, "force", False))
    try:
        remap = parse_remap(args.remap)
        config = args.config or default_config()
        bag = args.bag or default_bag(progress=sys.stderr.isatty())
        inputs = {"bag": bag_extent(bag), "config": config}   # checked before anything is loaded or written
        if args.out:
            check_output(args.out, "--out", inputs, force=force, kind="bag")
        if args.trace:
            check_output(args.trace, "--trace", inputs, force=force)
        mcap = getattr(args, "foxglove_mcap", None)
        if mcap:
            check_output(mcap, "--foxglove-mcap", inputs, force=force)
        check_distinct({"--out": args.out, "--trace": args.trace, "--foxglove-mcap": mcap})
        bounds = load_expect(args.expect) if args.expect else None
        cfg = stack_for_bag(config, bag, remap)
        if args.device:
            cfg = dataclasses.replace(cfg, device=args.device)
        # On the wall clock: pause, step and rate from the keys (a terminal) and Foxglove's playback bar.
        control, fox, start_ns = _playback(bag, cfg, speed, args) if speed != "max" else (None, None, 0)
        if getattr(args, "paused", False) and (control is None or not (fox is not None or args.services or
                                                                         _on_terminal())):
            raise UsageError("--paused: nothing could resume this replay: it needs --speed X and a terminal, "
                             "--foxglove or --services")
        wants_node = getattr(args, "services", False) or getattr(args, "clock", False)
        services = _services(control, args, start_ns) if wants_node else None
        try:
            live = live_view(args, cfg, "rt-runtime replay", fox.server_options() if fox is not None else None)
        except BaseException:
            if services is not None:   # a busy port: the node goes before the one line
                services.close()
            raise
        if fox is not None and live is not None and live.server is not None:
            fox.bind(live.server)
        keys = _keys(control) if control is not None else None
        if keys is None and fox is None and services is None:
            control = None   # nothing can send a command: the feed is not gated at all
        result = None
        try:
            result = replay(bag, cfg, out=args.out, speed=speed, workers=args.workers, trace=args.trace,
                            out_format=args.out_format, progress=sys.stderr.isatty() and not args.json,
                            until_s=args.until, quality=quality_from_outputs, speculate=args.speculate,
                            timing=_timing(args.timing, speed), replace=force, stop=INTERRUPT,
                            parallel=args.parallel, reader=args.reader, listeners=[live] if live is not None else (),
                            control=control, start_s=getattr(args, "start", None))
        finally:
            if keys is not None:
                keys.close()   # the terminal as it was
            if services is not None:
                services.close()
            if fox is not None:
                fox.close(stop_server=False)   # the live view's server: live.close stops it
            if live is not None:   # an interrupted run keeps its MCAP, marked partial; a failed one removes it
                cut = result.extra.get("interrupted") if result is not None else None
                live.close(partial=f"interrupted by {cut} after {result.duration_s:.3f} s" if cut else None,
                           discard=result is None)
    except (ConfigError, ReplayError, BagError, ValueError, FileNotFoundError) as e:
        raise UsageError(str(e)) from None
    interrupted = result.extra.get("interrupted")
    # gates need the whole bag: an interrupted replay is not judged
    gates = gate_verdict(result_json(result), bounds) if bounds is not None and not interrupted else None
    if args.json:
        doc = result_json(result)
        if interrupted:
            doc.update(interrupted=interrupted, partial=True)
        if gates is not None:
            doc["expect"] = gates
        print(json.dumps(doc))
    else:
        print_summary(result)
        for line in gate_lines(gates, args.expect) if gates is not None else ():
            print(line)
    if not interrupted:
        return 0 if gates is None or gates["passed"] else 1
    kept = [f"{p} ({what}, marked partial)" for p, what in ((args.out, "bag"), (args.trace, "trace"),
                                                             (getattr(args, "foxglove_mcap", None), "MCAP")) if p]
    print(f"rt-runtime replay: interrupted by {interrupted}: replayed {result.duration_s:.2f} s of "
          f"{result.extra['bag_duration_s']:.2f} s of the bag; kept "
          + (", ".join(kept) if kept else "no files (no --out, no --trace)"), file=sys.stderr)
    return EXIT_CODES[interrupted]
