"""`--foxglove [HOST:]PORT`: the live view served over Foxglove's websocket (the ``foxglove-sdk`` package).

The adapter is a ``Scheduler.listen`` sink: ``emit`` (on the scheduler's thread) only appends the event to a
bounded queue, or counts it dropped when the queue is full; a server thread drains the queue, folds the
events (``live.state``) and logs the messages on JSON-schema channels, only those a client subscribed to."""
from __future__ import annotations

import sys
import threading
import time
from collections import deque
from typing import Any, Sequence

from .state import JOB_SCHEMA, KINDS, LIVE_SCHEMA, SAFETY_SCHEMA, TASK_SCHEMA, LiveState

DEFAULT_PORT = 8765   # Foxglove's own default (foxglove_bridge, the SDK)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
CAPACITY = 1 << 16    # events queued before they are dropped (counted on /rt/live)
PERIOD_S = 0.02       # how often the server thread drains the queue
CLOSE_GRACE_S = 0.25  # how long close() leaves the SDK to send the last frames to a connected client


class LiveError(Exception):
    """The live view cannot start (the flag's value, the port, the package): one line for the user."""


def parse_endpoint(text: str | None) -> tuple[str, int]:
    """``[HOST:]PORT`` (None: the default) as ``(host, port)``; 127.0.0.1 unless a host is given."""
    if text is None:
        return LOOPBACK[0], DEFAULT_PORT
    host, sep, port = text.rpartition(":")
    host = host.strip("[]") if sep else LOOPBACK[0]
    if not port.isdigit() or int(port) > 65535 or (sep and not host):
        raise LiveError(f"--foxglove: expected [HOST:]PORT (a port from 0 to 65535, e.g. {DEFAULT_PORT} or "
                        f"0.0.0.0:{DEFAULT_PORT}), found {text!r}")
    return host, int(port)


class FoxgloveLive:
    """A Foxglove websocket server serving the runtime's state: ``/rt/tasks/<task>/job``, ``.../window``,
    ``/rt/safety`` and ``/rt/live`` (the queue's counts); ``close`` sends what is left and stops it."""

    enabled = True   # an EventSink that FanoutSink keeps

    def __init__(self, host: str = LOOPBACK[0], port: int = DEFAULT_PORT, capacity: int = CAPACITY,
                 tasks: Sequence[str] = ()) -> None:
        try:
            import foxglove
        except ImportError:
            raise LiveError("--foxglove: needs the foxglove-sdk package (pip install 'rt_runtime[live]')") from None
        self.ctx = foxglove.Context()   # its own: these channels go to this server alone
        self._foxglove = foxglove
        self.channels: dict[tuple[str, str], Any] = {}
        self.safety = self._channel("/rt/safety", SAFETY_SCHEMA)
        self.live = self._channel("/rt/live", LIVE_SCHEMA)
        # Before the server starts: a channel created while a client is connecting can be advertised before
        # the SDK (0.30) knows it, and the client's subscription is refused ("Unknown channel ID", 1 run in 2
        # beside a CPU hog): channels known now are in the handshake.
        self.attach(tasks)
        try:
            self.server = foxglove.start_server(name="rt_runtime", host=host, port=port, context=self.ctx)
        except RuntimeError as e:
            why = str(e).split(": ", 1)[-1]
            raise LiveError(f"--foxglove {host}:{port}: cannot serve there: {why}") from None
        self.host, self.port = host, self.server.port
        self.capacity = capacity
        self.queue: deque[tuple[int, int, str, int, int, int]] = deque()
        self.events = self.dropped = 0
        self.state = LiveState()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="rt-foxglove", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """Where a Foxglove app connects."""
        return f"ws://{self.host}:{self.port}"

    def attach(self, tasks: Sequence[str]) -> None:
        """Advertise every task's channels before the run (``start``'s ``tasks`` are already advertised: the
        rest now), so a client subscribed now receives the first jobs."""
        for task in tasks:
            self._task_channel("job", task)
            self._task_channel("task", task)

    def emit(self, kind: int, t_ns: int, task: str, job_index: int, a: int = 0, b: int = 0) -> None:
        """Queue an event the view folds (on the scheduler's thread: an append, never a wait)."""
        if kind in KINDS:
            if len(self.queue) < self.capacity:
                self.queue.append((kind, t_ns, task, job_index, a, b))
                self.events += 1
            else:
                self.dropped += 1

    def _channel(self, topic: str, schema: dict[str, Any]) -> Any:
        return self._foxglove.Channel(topic, schema=schema, context=self.ctx)

    def _task_channel(self, what: str, task: str) -> Any:
        ch = self.channels.get((what, task))
        if ch is None:
            name = "window" if what == "task" else what
            ch = self.channels[(what, task)] = self._channel(f"/rt/tasks/{task}/{name}",
                                                             JOB_SCHEMA if what == "job" else TASK_SCHEMA)
        return ch

    def _send(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        for what, msg in messages:
            ch = self.safety if what == "safety" else self._task_channel(what, msg["task"])
            if ch.has_sinks():
                ch.log(msg)

    def _drain(self) -> None:
        q, fold = self.queue, self.state.fold
        while q:
            self._send(fold(*q.popleft()))

    def _serve(self) -> None:
        while not self._stop.wait(PERIOD_S):
            self._drain()
            if self.live.has_sinks():
                self.live.log({"events": self.events, "dropped": self.dropped})

    def close(self) -> None:
        """Send what is queued and the jobs still open, then stop the server (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self.thread.join()
        self._drain()
        self._send(self.state.close())
        self.live.log({"events": self.events, "dropped": self.dropped})
        if self.live.has_sinks():
            # The SDK has no flush: its writers send logged frames asynchronously and stop() drops what is
            # still unsent (a client then missed the last window, 1 run in 5 on a loaded machine). A grace
            # paid once, at the end, and only with a client connected.
            time.sleep(CLOSE_GRACE_S)
        self.server.stop()


def start(endpoint: str | None, who: str = "rt-runtime", tasks: Sequence[str] = ()) -> FoxgloveLive:
    """Start the live view at ``[HOST:]PORT`` with the channels of ``tasks`` and say where on stderr (and what
    a non-loopback host exposes)."""
    host, port = parse_endpoint(endpoint)
    live = FoxgloveLive(host, port, tasks=tasks)
    print(f"{who}: Foxglove live view on {live.url}", file=sys.stderr, flush=True)
    if host not in LOOPBACK:
        print(f"{who}: note: --foxglove {host}: the runtime's job timings, task names and safety level are served "
              "without authentication to anyone who can reach this port", file=sys.stderr, flush=True)
    return live
