"""Foxglove's playback controls (foxglove-sdk's ``Capability.PlaybackControl``) driving a ``replay.controller``.

``play --foxglove [HOST:]PORT`` serves a websocket with the bag's time range: the app shows its playback
bar, and its play, pause, seek and speed come here as ``PlaybackControlRequest``s, each translated into
``control.Command``s (``commands_for``, pure) on the same core the keyboard and the ROS services use. The
playback state is answered to each request and broadcast on every other change; the bag time is broadcast
``TIME_HZ`` times a second. Endpoint, default port and one-line errors are ``live.foxglove``'s."""
from __future__ import annotations

import sys
import threading
from typing import Any

from ..replay import control as C
from ..replay.controller import Controller
from .foxglove import LOOPBACK, LiveError, parse_endpoint

TIME_HZ = 20   # bag-time broadcasts a second (the app's clock between messages)


def commands_for(play: bool, speed: float, seek_ns: int | None, pb: C.Playback) -> list[C.Command]:
    """What one request from the app means: a speed that changed, then a seek, then play or pause."""
    out = []
    if speed and float(speed) != pb.rate:
        out.append(C.Command("rate", float(speed)))
    if seek_ns is not None:
        out.append(C.Command("seek", int(seek_ns)))
    if play == pb.paused:
        out.append(C.Command("resume" if play else "pause"))
    return out


class FoxglovePlayback:
    """A websocket server whose playback controls drive ``ctl``; ``close`` stops it."""

    def __init__(self, ctl: Controller, host: str, port: int) -> None:
        try:
            import foxglove
            from foxglove.websocket import Capability, PlaybackCommand, PlaybackState, PlaybackStatus
        except ImportError:
            raise LiveError("--foxglove: needs the foxglove-sdk package (pip install 'rt_runtime[live]')") from None
        self.ctl = ctl
        self._Play, self._State, self._Status = PlaybackCommand.Play, PlaybackState, PlaybackStatus
        self.ended = self._answering = False
        pb = ctl.state
        try:
            self.server = foxglove.start_server(
                name="rt_runtime_player", host=host, port=port, context=foxglove.Context(),
                capabilities=[Capability.PlaybackControl, Capability.Time], server_listener=self,
                playback_time_range=(pb.start_ns, pb.end_ns))
        except RuntimeError as e:
            why = str(e).split(": ", 1)[-1]
            raise LiveError(f"--foxglove {host}:{port}: cannot serve there: {why}") from None
        self.host, self.port = host, self.server.port
        ctl.listen(self._changed)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._tick, name="rt-foxglove-time", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """Where a Foxglove app connects."""
        return f"ws://{self.host}:{self.port}"

    def state(self, did_seek: bool = False, request_id: str | None = None) -> Any:
        """The SDK's ``PlaybackState`` of the core now."""
        pb = self.ctl.state
        status = self._Status.Ended if self.ended else self._Status.Paused if pb.paused else self._Status.Playing
        return self._State(status=status, current_time=C.position(pb, self.ctl.clock()), playback_speed=pb.rate,
                           did_seek=did_seek, request_id=request_id)

    def on_playback_control_request(self, request: Any) -> Any:
        """The app's play / pause / seek / speed (on the SDK's thread): applied in order; a refused one (a seek
        outside the bag, a speed out of range) leaves the rest applied and the state answered says where it is."""
        before = self.ctl.state.seeks
        self._answering = True   # the answer is the state: no broadcast of each step on the way
        try:
            for cmd in commands_for(request.playback_command == self._Play, request.playback_speed,
                                    request.seek_time, self.ctl.state):
                try:
                    self.ctl.command(cmd)
                except C.ControlError as e:
                    print(f"rt-runtime play: Foxglove: {e}", file=sys.stderr, flush=True)
        finally:
            self._answering = False
        return self.state(self.ctl.state.seeks != before, request.request_id)

    def _changed(self, pb: C.Playback, cmd: C.Command | None) -> None:
        """A change from elsewhere (the keyboard, the services, a loop) shows in the app too."""
        if not self._answering and (cmd is not None or pb.steps == 0):
            self.server.broadcast_playback_state(self.state(cmd is not None and cmd.name.startswith("seek")))

    def _tick(self) -> None:
        while not self._stop.wait(1 / TIME_HZ):
            self.server.broadcast_time(C.position(self.ctl.state, self.ctl.clock()))

    def end(self) -> None:
        """The bag played out: the app shows it ended."""
        self.ended = True
        self.server.broadcast_playback_state(self.state())

    def close(self) -> None:
        """Stop the time broadcasts and the server (idempotent)."""
        if not self._stop.is_set():
            self._stop.set()
            self.thread.join()
            self.server.stop()


def start(endpoint: str | None, ctl: Controller, who: str = "rt-runtime play") -> FoxglovePlayback:
    """Serve ``ctl``'s playback controls at ``[HOST:]PORT`` (None: 127.0.0.1:8765) and say where on stderr."""
    host, port = parse_endpoint(endpoint)
    fp = FoxglovePlayback(ctl, host, port)
    print(f"{who}: Foxglove playback controls on {fp.url}", file=sys.stderr, flush=True)
    if host not in LOOPBACK:
        print(f"{who}: note: --foxglove {host}: anyone who can reach this port can pause, seek and change the "
              "rate of this playback (no authentication)", file=sys.stderr, flush=True)
    return fp
