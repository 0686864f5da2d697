"""Foxglove's playback controls (foxglove-sdk's ``Capability.PlaybackControl``) driving a ``replay.controller``.

``play --foxglove [HOST:]PORT`` serves a websocket with the bag's time range (``start``; ``replay --speed X
--foxglove`` adds the same to the live view's server, ``server_options`` and ``bind``): the app shows its playback
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
    """Foxglove's playback controls on ``ctl``: ``server_options`` go to ``foxglove.start_server`` (with a listener
    that hands its playback requests here), then ``bind`` the server started with them. ``offset_ns``: the absolute time of the core's 0
    (a replay's logical time starts at the bag's start; play's core is on the bag's own time)."""

    def __init__(self, ctl: Controller, offset_ns: int = 0, who: str = "rt-runtime play") -> None:
        try:
            from foxglove.websocket import (Capability, PlaybackCommand, PlaybackState, PlaybackStatus,
                                            ServerListener)
        except ImportError:
            raise LiveError("--foxglove: needs the foxglove-sdk package (pip install 'rt_runtime[live]')") from None

        fp = self

        class Listener(ServerListener):
            """The SDK calls every callback of its listener (a subscription, a client's advertisement, ...): the
            protocol's own no-ops for all but the playback requests."""

            def on_playback_control_request(self, request: Any) -> Any:
                return fp.on_playback_control_request(request)

        self._listener = Listener()
        self.ctl, self.offset, self.who = ctl, int(offset_ns), who
        self._Play, self._State, self._Status = PlaybackCommand.Play, PlaybackState, PlaybackStatus
        self._capabilities = [Capability.PlaybackControl, Capability.Time]
        self.ended = self._answering = False
        self.server: Any = None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._tick, name="rt-foxglove-time", daemon=True)

    def server_options(self) -> dict[str, Any]:
        """``start_server``'s keywords for the playback bar: the capabilities, this listener, the time range."""
        pb = self.ctl.state
        return {"capabilities": self._capabilities, "server_listener": self._listener,
                "playback_time_range": (pb.start_ns + self.offset, pb.end_ns + self.offset)}

    def bind(self, server: Any) -> None:
        """Start answering on ``server`` (started with ``server_options``): state changes and the time broadcast."""
        self.server = server
        self.ctl.listen(self._changed)
        self.thread.start()

    def state(self, did_seek: bool = False, request_id: str | None = None) -> Any:
        """The SDK's ``PlaybackState`` of the core now."""
        pb = self.ctl.state
        status = self._Status.Ended if self.ended else self._Status.Paused if pb.paused else self._Status.Playing
        return self._State(status=status, current_time=C.position(pb, self.ctl.clock()) + self.offset,
                           playback_speed=pb.rate,
                           did_seek=did_seek, request_id=request_id)

    def on_playback_control_request(self, request: Any) -> Any:
        """The app's play / pause / seek / speed (on the SDK's thread): applied in order; a refused one (a seek
        outside the bag, a speed out of range) leaves the rest applied and the state answered says where it is."""
        before = self.ctl.state.seeks
        self._answering = True   # the answer is the state: no broadcast of each step on the way
        try:
            seek = None if request.seek_time is None else request.seek_time - self.offset
            for cmd in commands_for(request.playback_command == self._Play, request.playback_speed, seek,
                                    self.ctl.state):
                try:
                    self.ctl.command(cmd)
                except C.ControlError as e:
                    print(f"{self.who}: Foxglove: {e}", file=sys.stderr, flush=True)
        finally:
            self._answering = False
        return self.state(self.ctl.state.seeks != before, request.request_id)

    def _changed(self, pb: C.Playback, cmd: C.Command | None) -> None:
        """A change from elsewhere (the keyboard, the services, a loop) shows in the app too."""
        if self.server is not None and not self._answering and (cmd is not None or pb.steps == 0):
            self.server.broadcast_playback_state(self.state(cmd is not None and cmd.name.startswith("seek")))

    def _tick(self) -> None:
        while not self._stop.wait(1 / TIME_HZ):
            self.server.broadcast_time(C.position(self.ctl.state, self.ctl.clock()) + self.offset)

    def end(self) -> None:
        """The bag played out: the app shows it ended."""
        self.ended = True
        self.server.broadcast_playback_state(self.state())

    def close(self, stop_server: bool = True) -> None:
        """Stop the time broadcasts and (``stop_server``: one this module started) the server; idempotent."""
        if not self._stop.is_set():
            self._stop.set()
            if self.thread.is_alive():
                self.thread.join()
            if stop_server and self.server is not None:
                self.server.stop()


def start(endpoint: str | None, ctl: Controller, who: str = "rt-runtime play") -> FoxglovePlayback:
    """Serve ``ctl``'s playback controls at ``[HOST:]PORT`` (None: 127.0.0.1:8765) and say where on stderr."""
    host, port = parse_endpoint(endpoint)
    fp = FoxglovePlayback(ctl, who=who)   # first: without the package, its one line
    import foxglove

    try:
        server = foxglove.start_server(name="rt_runtime_player", host=host, port=port, context=foxglove.Context(),
                                       **fp.server_options())
    except RuntimeError as e:
        why = str(e).split(": ", 1)[-1]
        raise LiveError(f"--foxglove {host}:{port}: cannot serve there: {why}") from None
    fp.bind(server)
    print(f"{who}: Foxglove playback controls on ws://{host}:{server.port}", file=sys.stderr, flush=True)
    if host not in LOOPBACK:
        print(f"{who}: note: --foxglove {host}: anyone who can reach this port can pause, seek and change the "
              "rate of this playback (no authentication)", file=sys.stderr, flush=True)
    return fp
