"""The live runtime node: ROS topics in, the configured stack under the scheduler, ROS topics out.

Threads: rclpy's ``SingleThreadedExecutor`` spins on the main thread and runs only subscription
callbacks (decode + ``push``) and two timers (diagnostics, staleness and the safety monitor's
silence check). The runtime runs on its own
threads (``drivers``): on the wall clock a timekeeper plus one thread per worker and a watchdog;
under ``use_sim_time`` one driver thread that follows ``/clock``. Encoding and publishing outputs
happens on the egress pump's thread (``outputs``). Parameters: ``params.PARAMS``,
config/ros_params.yaml; topics come from the stack file and are remappable (``--ros-args -r``).
"""
from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any, Sequence

from .env import prepare_environment

prepare_environment()   # DDS reads these when rclpy loads the RMW and creates the participant

import rclpy  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.signals import SignalHandlerOptions  # noqa: E402

from ..bag import to_cdr  # noqa: E402 - (all below: after the environment is set)
from ..config import ConfigError
from ..config.stack import build_bindings, parse_remap
from ..core.units import DurationError, parse_duration
from ..drive import host_copy, open_stack
from ..io import EGRESS_CODECS, INGRESS_CODECS
from ..replay.defaults import default_config
from ..sched import VirtualClock, WallClock
from . import diagnostics
from .drivers import SimDriver, WallDriver, degrade_fallback_tasks
from .inputs import Ingress
from .msgtypes import output_qos, ros_class, sensor_qos
from .outputs import EgressPump
from .overrides import load_config
from .params import PARAMS

NODE_NAME = "rt_runtime"
DIAGNOSTICS_TOPIC = "/diagnostics"
STALE_CHECK_S = 0.1


class StartError(Exception):
    """The node cannot start (bad configuration or parameter): one line, exit status 2."""


class LiveRuntime:
    """The stack on a live node: builds the runtime, wires subscriptions, publishers and timers."""

    def __init__(self, node: Node) -> None:
        self.node = node
        p = {name: node.declare_parameter(name, Parameter.Type.STRING_ARRAY if default == [] else default).value
             for name, default in PARAMS.items()}
        self.sim = bool(node.get_parameter("use_sim_time").value)
        try:
            self.cfg = load_config(p["config"] or default_config(), p["overrides"] or [], parse_remap(p["remap"]))
            stale_ns = parse_duration(p["stale_after"], what="stale_after")
            qos = sensor_qos(int(p["qos_depth"]), str(p["qos_reliability"]))
            names = [(r.topic, INGRESS_CODECS[r.codec].msgtypes[0]) for r in self.cfg.ingress] + \
                [(r.topic, EGRESS_CODECS[r.codec].msgtype) for r in self.cfg.egress] + \
                [("/clock", "rosgraph_msgs/msg/Clock"), (DIAGNOSTICS_TOPIC, "diagnostic_msgs/msg/DiagnosticArray")]
            types = {topic: ros_class(msgtype) for topic, msgtype in names}   # a missing package fails here
            bindings, initial = build_bindings(self.cfg, speculate=True if p["speculate"] else None)
        except (ConfigError, DurationError, ValueError, FileNotFoundError, LookupError) as e:
            raise StartError(str(e)) from None
        cfg = self.cfg
        self.trace_path = p["trace"] or None
        self.degrade_on = {self.cfg.remap.get(t, t) for t in p["degrade_on_stale"] or []}
        workers = int(p["workers"]) or cfg.workers
        import torch

        torch.set_num_threads(cfg.threads)   # per worker; more threads only fight over the cores
        from ..trace import TraceRing

        self.ring = TraceRing(1 << 20) if self.trace_path else None
        self.parts: list[Any] = []
        self.publishers = {r.topic: node.create_publisher(types[r.topic], r.topic, output_qos()) for r in cfg.egress}
        self.diag_pub = node.create_publisher(types[DIAGNOSTICS_TOPIC], DIAGNOSTICS_TOPIC, output_qos())
        self.pump = EgressPump(cfg.egress, cfg.frame, self._stamp, self._publish, p["watch_channels"] or [])
        clock = VirtualClock() if self.sim else WallClock(epoch_ns=time.monotonic_ns())
        try:
            self.stack = open_stack(cfg, bindings, initial, clock=clock, workers=workers, sink=self.ring,
                                    egress=self.pump.on_publish, threaded=not self.sim,
                                    realtime=bool(p["realtime"]))   # the config's realtime: wins
        except ValueError as e:
            raise StartError(f"{cfg.source}: {e}") from None
        self.rt = self.stack.rt
        self.bindings = bindings
        self.stack.warm_up()
        self._warm_egress()
        self.driver: WallDriver | SimDriver = SimDriver(self.rt) if self.sim else WallDriver(self.rt)
        self.stack.push_initial()
        # The degrade supervisor; its calls run under the scheduler's lock.
        self.monitor = self.stack.safety_monitor()
        self.live = self._live_view(p)
        if self.live is not None:   # after the monitor (its SAFETY events too); stamped as the outputs are
            self.pump.taps = self.stack.observe([self.live], self._stamp)
        self.ingress = Ingress(cfg.ingress, self.driver, self.stack.to_tensor, stale_after_ns=stale_ns,
                               monitor=self.monitor)
        self.max_deadline_ns = max(b.task.deadline for b in bindings)
        self._before: dict[str, Any] = {}
        self._started = time.monotonic()
        self.driver.start(lambda: node.get_clock().now().nanoseconds)
        self.subs = []
        if isinstance(self.driver, SimDriver):
            tick = self.driver.on_clock
            self.subs.append(node.create_subscription(
                types["/clock"], "/clock", lambda m: tick(m.clock.sec * 1_000_000_000 + m.clock.nanosec),
                sensor_qos(1)))
        for r in cfg.ingress:
            self.subs.append(node.create_subscription(types[r.topic], r.topic, self.ingress.callback(r), qos, raw=True))
        self.timers = [node.create_timer(cfg.diagnostics_period_ns / 1e9, self.publish_diagnostics),
                       node.create_timer(STALE_CHECK_S, self.check_stale)]

    def _warm_egress(self) -> None:
        """Encode each output once from the warmed-up graphs: rosbags builds a type's serializer on first
        use (20-90 ms), which the first live trajectory should not wait for."""
        views = {}
        for ts in self.rt.tasks.values():
            outs = getattr(ts.executors[0], "outputs", None) or {}
            views.update({ch.name: outs[g] for g, ch in ts.writers if g in outs})
        for r in self.cfg.egress:
            try:
                group = {role: host_copy(views[c]) for role, c in r.channels.items()}
                to_cdr(EGRESS_CODECS[r.codec].encode(group, 0, self.cfg.frame))
            except Exception:  # noqa: BLE001 - a warm-up only; the live path reports its own failures
                pass
        to_cdr(diagnostics.build(0, {"tasks": {}}, {}, {}, {}, {}))

    def _live_view(self, p: dict[str, Any]) -> Any:
        """``foxglove`` / ``foxglove_mcap``'s live view (None without either); a busy port, a bad value: StartError."""
        if not p["foxglove"] and not p["foxglove_mcap"]:
            return None
        from ..live.channels import LiveSpec
        from ..live.foxglove import LiveError, start

        try:
            hz = float(p["foxglove_hz"])
            if not 0 < hz <= 1000:
                raise LiveError(f"foxglove_hz: expected a rate in Hz above 0, at most 1000, found {hz}")
            return start(p["foxglove"] or None, "rt-runtime run", spec=LiveSpec.of(self.cfg, hz),
                         serve=bool(p["foxglove"]), mcap=p["foxglove_mcap"] or None)
        except LiveError as e:
            self.pump.close()
            self.stack.close()   # built already: no thread of it is left behind
            raise StartError(str(e)) from None

    # ---- callbacks (executor thread) --------------------------------------------------------
    def _stamp(self, t_ns: int) -> int:
        return self.driver.stamp(t_ns)

    def _publish(self, topic: str, cdr: bytes) -> None:
        self.publishers[topic].publish(cdr)

    def check_stale(self) -> None:
        """Mark silent inputs stale; while one the config names is stale, keep the stack degraded."""
        self.ingress.check_stale(self.driver.now())
        if self.degrade_on & set(self.ingress.stale_topics()):
            self.driver.call(lambda t: degrade_fallback_tasks(self.rt, t))
        if self.monitor is not None:
            self.driver.call(self.monitor.check_silence)

    def publish_diagnostics(self) -> None:
        """One DiagnosticArray with everything the node counts."""
        stats = self.driver.stats()
        if self.monitor is not None:
            stats["safety"] = self.monitor.status()
        now = self.driver.now()
        inputs = {t: h.values(now) for t, h in self.ingress.health.items()}
        clock = {"mode": self.driver.kind, "logical_ms": round(now / 1e6, 3),
                 "jumps_back": getattr(self.driver, "jumps_back", 0)}
        pump = self.pump
        outputs: dict[str, Any] = {f"published {t}": n for t, n in sorted(pump.counts.items())}
        outputs.update({f"failed {t}": n for t, n in sorted(pump.errors.items())})
        n = max(1, sum(pump.counts.values()))
        outputs["encode_ms_mean"] = round(pump.encode_ns / n / 1e6, 3)
        outputs["encode_ms_max"] = round(pump.encode_max_ns / 1e6, 3)
        outputs.update({ch: v for ch, (_, v) in sorted(pump.latest.items())})
        msg = diagnostics.build(self.node.get_clock().now().nanoseconds, stats, self._before, inputs, clock, outputs)
        self.diag_pub.publish(to_cdr(msg))
        self._before = {"tasks": stats["tasks"], "inputs": inputs}
        if self.ring is not None:
            self.parts.append(self.ring.drain())

    # ---- life -------------------------------------------------------------------------------
    @property
    def failure(self) -> BaseException | None:
        """The runtime's driver died (an exception in the scheduler itself)."""
        return self.driver.error

    def shutdown(self) -> None:
        """Stop ingress, let released jobs publish, flush outputs, diagnostics and the trace."""
        for s in self.subs:
            self.node.destroy_subscription(s)
        for tm in self.timers:
            self.node.destroy_timer(tm)
        if isinstance(self.driver, WallDriver) and self.driver.alive:
            # Jobs already released publish at their deadlines: let the longest one reach it.
            time.sleep(self.max_deadline_ns / 1e9)
        stuck = self.driver.stop()
        if stuck:
            print(f"rt-runtime run: worker(s) {stuck} still stuck in an op at exit", file=sys.stderr)
        else:   # the runtime is stopped: its device's threads too (a stuck op would hold one forever)
            self.stack.close()
        self.pump.close()
        if self.live is not None:   # stopping is how a live node ends: its MCAP is whole unless the runtime died
            self.live.close(partial=None if self.failure is None else f"the runtime stopped: {self.failure!r}")
        self.publish_diagnostics()
        if self.trace_path is not None and self.ring is not None:
            from ..trace import TraceColumns, save_trace

            self.parts.append(self.ring.drain())
            cols = TraceColumns.concat(self.parts, self.ring.tasks)
            save_trace(self.trace_path, cols,
                       self.stack.trace_meta(clock=self.driver.kind, live=True, lost_events=self.ring.lost))

    def summary(self) -> str:
        """One line: how long, what came in, what went out, misses."""
        stats = self.driver.stats()["tasks"]
        misses = sum(int(s.get("missed", 0)) for s in stats.values())
        ins = sum(h.received for h in self.ingress.health.values())
        bad = sum(h.bad for h in self.ingress.health.values())
        outs = ", ".join(f"{n} {t}" for t, n in sorted(self.pump.counts.items()))
        trace = f"; trace {self.trace_path}" if self.trace_path else ""
        return (f"rt-runtime run: stopped after {time.monotonic() - self._started:.1f} s: {ins} messages in "
                f"({bad} bad), {outs} out; {misses} deadline miss(es){trace}")


def run_node(ros_args: Sequence[str] = (), overrides: Sequence[Parameter] = ()) -> int:
    """Start the node, spin until SIGINT/SIGTERM, stop cleanly; the exit status."""
    stop = threading.Event()
    context = rclpy.Context()
    rclpy.init(args=["rt_runtime", *ros_args], context=context, signal_handler_options=SignalHandlerOptions.NO)
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    node = None
    try:
        node = rclpy.create_node(NODE_NAME, context=context, parameter_overrides=list(overrides))
        try:
            live = LiveRuntime(node)
        except StartError as e:
            print(f"rt-runtime run: error: {e}", file=sys.stderr)
            return 2
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        print(f"rt-runtime run: {live.rt.describe_realtime()}", file=sys.stderr, flush=True)
        print(f"rt-runtime run: running {live.cfg.source} on the {'/clock (sim time)' if live.sim else 'wall clock'}: "
              f"{len(live.bindings)} tasks, {len(live.cfg.ingress)} inputs, {len(live.cfg.egress)} outputs; "
              "SIGINT or SIGTERM stops", file=sys.stderr, flush=True)
        while not stop.is_set() and live.failure is None and context.ok():
            executor.spin_once(timeout_sec=0.1)
        live.shutdown()
        executor.shutdown()
        print(live.summary(), file=sys.stderr, flush=True)
        if live.failure is not None:
            print(f"rt-runtime run: error: the runtime stopped: {live.failure!r}", file=sys.stderr)
            return 1
        return 0
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown(context=context)

