"""The player's controls over ROS 2, named as rosbag2's player names them (docs/ROS.md, "Controlling playback").

rosbag2_interfaces has no wheel here, so the argument-less calls are ``std_srvs/srv/Trigger`` services under
rosbag2's names (``~/pause``, ``~/resume``, ``~/toggle_paused``, ``~/is_paused``, ``~/play_next``, and ours,
``~/play_period``), and the two that carry a value are node parameters set through the standard parameter
services: ``rate`` (rosbag2's ``~/set_rate``, ``~/get_rate``) and ``seek`` (seconds from the bag's start:
rosbag2's ``~/seek``). Every call becomes a ``replay.control.Command`` on the player's ``Controller``."""
from __future__ import annotations

from typing import Any

from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from std_srvs.srv import Trigger

from ..replay import control as C
from ..replay.controller import Controller

STEP_WAIT_S = 2.0   # how long ~/play_next waits for the loop to publish (it answers once it has)


def _bag_s(ctl: Controller) -> str:
    pb = ctl.state
    return f"{(C.position(pb, ctl.clock()) - pb.start_ns) / 1e9:.3f} s"


class PlayerServices:
    """The services and parameters on ``node`` (rt_runtime_player: /rt_runtime_player/pause ...)."""

    def __init__(self, node: Node, ctl: Controller) -> None:
        self.node, self.ctl = node, ctl
        self._in_callback = False
        self.services = [node.create_service(Trigger, f"~/{name}", self._trigger(fn)) for name, fn in (
            ("pause", self._pause), ("resume", self._resume), ("toggle_paused", self._toggle),
            ("is_paused", self._is_paused), ("play_next", self._play_next), ("play_period", self._play_period))]
        # dynamic typing: `ros2 param set ... rate 2` (an integer) is a rate too; the callback checks the value
        node.declare_parameter("rate", ctl.state.rate, ParameterDescriptor(dynamic_typing=True, description=(
            f"playback rate, {C.RATE_MIN:g} to {C.RATE_MAX:g} (rosbag2's ~/set_rate, ~/get_rate)")))
        node.declare_parameter("seek", 0.0, ParameterDescriptor(dynamic_typing=True, description=(
            "set to seek to that many seconds from the bag's start (rosbag2's ~/seek)")))
        node.add_on_set_parameters_callback(self._on_set)
        ctl.listen(self._follow)

    def _trigger(self, fn: Any) -> Any:
        def call(_req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
            try:
                res.success, res.message = fn()
            except C.ControlError as e:
                res.success, res.message = False, str(e)
            return res
        return call

    def _pause(self) -> tuple[bool, str]:
        self.ctl.command(C.Command("pause"))
        return True, f"paused at {_bag_s(self.ctl)}"

    def _resume(self) -> tuple[bool, str]:
        self.ctl.command(C.Command("resume"))
        return True, f"playing from {_bag_s(self.ctl)}"

    def _toggle(self) -> tuple[bool, str]:
        pb = self.ctl.command(C.Command("toggle"))
        return True, f"{'paused' if pb.paused else 'playing'} at {_bag_s(self.ctl)}"

    def _is_paused(self) -> tuple[bool, str]:
        paused = self.ctl.state.paused   # rosbag2's IsPaused.paused, in Trigger's success
        return paused, "paused" if paused else "playing"

    def _play_next(self) -> tuple[bool, str]:
        if not self.ctl.step_and_wait(STEP_WAIT_S):
            return False, f"nothing published (the end of the bag, or resumed); at {_bag_s(self.ctl)}"
        return True, f"published the next message; at {_bag_s(self.ctl)}"

    def _play_period(self) -> tuple[bool, str]:
        self.ctl.command(C.Command("period"))
        return True, f"at {_bag_s(self.ctl)}"

    def _on_set(self, params: list[Parameter]) -> SetParametersResult:
        self._in_callback = True
        try:
            for p in params:
                if p.name == "rate":
                    self.ctl.command(C.Command("rate", p.value))
                elif p.name == "seek":
                    if not isinstance(p.value, (int, float)) or isinstance(p.value, bool):
                        raise C.ControlError(f"seek: expected seconds from the bag's start (a double), "
                                             f"found {p.value!r}")
                    pb = self.ctl.state
                    self.ctl.command(C.Command("seek", pb.start_ns + round(p.value * 1e9)))
        except C.ControlError as e:
            return SetParametersResult(successful=False, reason=str(e))
        finally:
            self._in_callback = False
        return SetParametersResult(successful=True)

    def _follow(self, pb: C.Playback, _cmd: C.Command | None) -> None:
        """A rate set from the keyboard or Foxglove shows in the parameter (``ros2 param get``)."""
        if not self._in_callback and self.node.get_parameter("rate").value != pb.rate:
            self.node.set_parameters([Parameter("rate", Parameter.Type.DOUBLE, pb.rate)])


class ControlNode:
    """A node of its own for a wall-clock replay (``replay --speed X --services`` / ``--clock``): the player's
    services, ``/clock`` at ``clock_hz`` on the bag's time line (held while paused, jumping at a seek), its
    context and its executor spinning on a thread; ``close`` takes it all down, the spinner first."""

    def __init__(self, ctl: Controller, name: str = "rt_runtime_replay", *, services: bool = True,
                 clock_hz: float | None = None, offset_ns: int = 0) -> None:
        import threading

        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions

        from .msgtypes import output_qos, ros_class

        self.context = rclpy.Context()
        rclpy.init(args=[name], context=self.context, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(name, context=self.context)
        self.services = PlayerServices(self.node, ctl) if services else None
        self.ctl, self.offset_ns, self.ticks = ctl, offset_ns, 0
        if clock_hz is not None:
            self._Clock, self._Time = ros_class("rosgraph_msgs/msg/Clock"), ros_class("builtin_interfaces/msg/Time")
            self.clock_pub = self.node.create_publisher(self._Clock, "/clock", output_qos(1))
            self.node.create_timer(1.0 / clock_hz, self._tick)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.spinner = threading.Thread(target=self.executor.spin, name="rt-replay-services", daemon=True)
        self.spinner.start()

    def _tick(self) -> None:
        """The bag time the replay stands at, as ``play --clock`` publishes it."""
        sec, nanosec = divmod(self.offset_ns + C.position(self.ctl.state, self.ctl.clock()), 1_000_000_000)
        self.clock_pub.publish(self._Clock(clock=self._Time(sec=sec, nanosec=nanosec)))
        self.ticks += 1

    def close(self) -> None:
        """Stop spinning, then destroy the node and shut its context down."""
        import rclpy

        self.executor.shutdown(2.0)
        self.spinner.join(2.0)   # its wait ends before the node and the context go (else: abort at exit)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
