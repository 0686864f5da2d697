"""`--foxglove [HOST:]PORT` and `--foxglove-mcap FILE`: the live view served over Foxglove's websocket (the
``foxglove-sdk`` package) and/or written into an MCAP file Foxglove opens.

The adapter is a ``Scheduler.listen`` sink: ``emit`` (on the scheduler's thread) only appends the event to a
bounded queue, or counts it dropped when the queue is full; ``output`` (the egress adapters' tap, after
``live.outputs.OutputTap`` decimated it) does the same with an output group. A server thread drains both
queues every ``PERIOD_S``, folds the events (``live.state``, ``live.chains``), and per interval of the
runtime's time (``LiveSpec.hz``) sends a task's ended jobs and a chain's outputs in one message each; it
builds the outputs' Foxglove messages and logs them on their channels (``live.channels``). A message nobody
receives (no client subscribed to its channel, no MCAP file) is not built."""
from __future__ import annotations

import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Sequence

from .channels import Channels, LiveSpec
from .chains import KINDS as CHAIN_KINDS
from .chains import ChainFold
from .outputs import DEFAULT_HZ, BUILD, OutputTap, ego
from .state import KINDS, LiveState

DEFAULT_PORT = 8765   # Foxglove's own default (foxglove_bridge, the SDK)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
CAPACITY = 1 << 16    # events queued before they are dropped (counted on /rt/live)
OUT_CAPACITY = 256    # decimated output groups queued before they are dropped (counted on /rt/live)
# How often the server thread drains the queues (and sends /rt/live): a wake costs ~0.2 ms of CPU on a busy
# 2-core machine, taken from the replay through the GIL, and a drain costs less an event the more it holds.
PERIOD_S = 0.1
CLOSE_GRACE_S = 0.25  # how long close() leaves the SDK to send the last frames to a connected client
RESTART, AFTER_ALL = -1, 1 << 62   # the queue's marker of a stack attached again (a seek), past every interval


class LiveError(Exception):
    """The live view cannot start (the flag's value, the port, the package, the file): one line for the user."""


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
    """The runtime's state and decimated outputs on Foxglove channels (``live.channels`` lists them), served at
    ``host:port`` (``serve=False``: no server) and written to ``mcap`` (None: no file); ``close`` sends what
    is left, stops the server and finishes the file."""

    enabled = True   # an EventSink that FanoutSink keeps

    def __init__(self, host: str = LOOPBACK[0], port: int = DEFAULT_PORT, capacity: int = CAPACITY,
                 tasks: Sequence[str] = (), spec: LiveSpec | None = None, *, serve: bool = True,
                 mcap: str | Path | None = None, replace: bool = False,
                 server_options: dict[str, Any] | None = None) -> None:
        try:
            import foxglove
        except ImportError:
            flag = "--foxglove" if serve else "--foxglove-mcap"
            raise LiveError(f"{flag}: needs the foxglove-sdk package (pip install 'rt_runtime[live]')") from None
        spec = spec or LiveSpec(tasks=tuple(tasks))
        self.spec = spec
        self.ctx = foxglove.Context()   # its own: these channels go to this server and file alone
        # Before the server starts: a channel created while a client is connecting can be advertised before
        # the SDK (0.30) knows it, and the client's subscription is refused ("Unknown channel ID", 1 run in 2
        # beside a CPU hog): channels known now are in the handshake.
        self.channels = Channels(foxglove, self.ctx, spec)
        for task in spec.tasks:
            self.channels.task(task)
        self.mcap = self._open_mcap(foxglove, mcap, replace) if mcap is not None else None
        self.server = None
        self.host, self.port = host, port
        if serve:
            try:
                # server_options: more start_server keywords (live.playback's playback bar on a replay)
                self.server = foxglove.start_server(name="rt_runtime", host=host, port=port, context=self.ctx,
                                                    **(server_options or {}))
            except RuntimeError as e:
                self._discard_mcap()
                why = str(e).split(": ", 1)[-1]
                raise LiveError(f"--foxglove {host}:{port}: cannot serve there: {why}") from None
            self.port = self.server.port
        self.capacity = capacity
        self.queue: deque[tuple[int, int, str, int, int, int]] = deque()
        self.outq: deque[tuple[str, str, int, Any]] = deque()
        self.events = self.dropped = self.outputs = self.dropped_outputs = 0
        self.state = LiveState()
        self.chains = ChainFold(spec.chains)
        self.kinds = KINDS | CHAIN_KINDS if self.chains.chains else KINDS
        self.tap = OutputTap(spec.routes, spec.hz, self.output) if spec.routes else None
        self.stamp: Callable[[int], int] = lambda t: t   # the log time of a logical instant (``attach``)
        self.last_t = 0
        # a batch of jobs and chain outputs per interval (hz 0: per instant, as the outputs are then not decimated)
        self.interval_ns = max(1, int(round(1e9 / spec.hz))) if spec.hz > 0 else 1
        self.next_ns = 0   # where the interval being folded ends
        self.runs = 0      # stacks attached (a replay's seek starts another)
        self.cpu_s = 0.0   # the server thread's CPU time, once it stopped (bench/bench_live.py)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="rt-foxglove", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """Where a Foxglove app connects."""
        return f"ws://{self.host}:{self.port}"

    def attach(self, tasks: Sequence[str], stamp: Callable[[int], int] | None = None) -> None:
        """Advertise every task's channels before the run (the spec's are already advertised: the rest now), so
        a client subscribed now receives the first jobs; ``stamp``: the wall (or ROS) time in ns of a logical
        instant, the messages' log time (the input bag's time in a replay: an MCAP lines up with it). Attached
        again (a replay's seek builds the stack afresh: its logical time and job numbers begin at 0 again), the
        view ends the last run's jobs as they stand and starts over, in order with the events queued."""
        for task in tasks:
            self.channels.task(task)
        self.runs += 1
        if self.runs > 1:
            self.queue.append((RESTART, AFTER_ALL, stamp or self.stamp, 0, 0, 0))   # type: ignore[arg-type]
        elif stamp is not None:
            self.stamp = stamp

    def emit(self, kind: int, t_ns: int, task: str, job_index: int, a: int = 0, b: int = 0) -> None:
        """Queue an event the view folds (on the scheduler's thread: an append, never a wait)."""
        if kind in self.kinds:
            if len(self.queue) < self.capacity:
                self.queue.append((kind, t_ns, task, job_index, a, b))
                self.events += 1
            else:
                self.dropped += 1

    def on_output(self, channel: str, t_ns: int, value: Any) -> None:
        """The egress adapters' tap: an egress channel's host copy, decimated here before anything else."""
        if self.tap is not None:
            self.tap(channel, t_ns, value)

    def output(self, topic: str, codec: str, t_ns: int, group: Any) -> None:
        """Queue a decimated output group (an append, or counted dropped when the queue is full)."""
        if len(self.outq) < OUT_CAPACITY:
            self.outq.append((topic, codec, t_ns, group))
            self.outputs += 1
        else:
            self.dropped_outputs += 1

    def _open_mcap(self, foxglove: Any, path: str | Path, replace: bool) -> Any:
        from ..outpaths import Staged

        try:
            self.staged = Staged(path, replace=replace)
            return foxglove.open_mcap(self.staged.tmp, context=self.ctx)
        except (OSError, RuntimeError) as e:
            raise LiveError(f"--foxglove-mcap {path}: cannot write it: {e}") from None

    def _discard_mcap(self) -> None:
        if self.mcap is not None:
            self.mcap.close()
            self.staged.discard()
            self.mcap = None

    def _send(self, messages: list[tuple[str, dict[str, Any]]], t: int) -> None:
        log_time = self.stamp(t)
        for what, msg in messages:
            ch = self.channels.of(what)
            if ch.has_sinks():
                ch.log(msg, log_time=log_time)

    def _flush(self, t: int) -> None:
        """Send the batches folded so far (jobs per task, outputs per chain) at ``t``, built only if received."""
        c = self.channels
        log_time = self.stamp(t)
        for task, text in self.state.batch(t, c.wants_task):
            c.task(task).log(text, log_time=log_time)
        for chain, text in self.chains.batch(t, c.wants_chain):
            c.chains[chain].log(text, log_time=log_time)

    def _drain(self) -> bool:
        """Fold what is queued, sending each interval's batches as the first event after it comes, and log the
        output groups queued; whether any event came."""
        q = self.queue
        n = len(q)   # what is there now: the scheduler's thread may append meanwhile
        if n:
            fold, chains, step, end = self.state.fold, self.chains.fold, self.interval_ns, self.next_ns
            t = self.last_t
            for _ in range(n):
                ev = q.popleft()
                if ev[1] >= end:
                    if ev[0] == RESTART:   # its t is past every interval: tested only here, off the common path
                        self._restart(ev[2], t)
                        fold, chains, end, t = self.state.fold, self.chains.fold, 0, 0
                        continue
                    self._flush(end)
                    end = (ev[1] // step + 1) * step
                t = ev[1]
                msgs = fold(*ev)
                if msgs:
                    self._send(msgs, t)
                chains(*ev)
            self.next_ns, self.last_t = end, t
        oq, tf, frame = self.outq, self.channels.tf, self.spec.frame
        while oq:
            topic, codec, t, group = oq.popleft()
            ch, stamp = self.channels.outputs[topic], self.stamp(t)
            if ch.has_sinks():
                ch.log(BUILD[codec](group, stamp, frame), log_time=stamp)
            if codec == "path" and tf is not None and tf.has_sinks():   # the 3D panel's camera follows the ego
                msg = ego(group, stamp, frame)
                if msg is not None:
                    tf.log(msg, log_time=stamp)
        return n > 0

    def _restart(self, stamp: Callable[[int], int], t: int) -> None:
        """The run that ended: its open jobs as they stand and what is left of it sent; then a fresh fold."""
        self.state.close()
        self._flush(t)
        self.state, self.chains = LiveState(), ChainFold(self.spec.chains)
        self.stamp = stamp

    def counts(self) -> dict[str, int]:
        """What /rt/live says: events and output groups queued and dropped."""
        return {"events": self.events, "dropped": self.dropped, "outputs": self.outputs,
                "dropped_outputs": self.dropped_outputs}

    def _serve(self) -> None:
        live = self.channels.live
        while not self._stop.wait(PERIOD_S):
            if not self._drain() and (self.state.pending() or self.chains.pending()):
                # No event for a drain: paused, or the stack is silent. What ended is sent now rather than when
                # the runtime's time moves on (the interval's rest, if any, follows in another message).
                self._flush(self.last_t)
            if self.runs and live.has_sinks():   # not before a stack is attached: its log time would be 0
                live.log(self.counts(), log_time=self.stamp(self.last_t))
        self.cpu_s = time.thread_time()

    def close(self, partial: str | None = None, discard: bool = False) -> None:
        """Send what is queued and the jobs still open, stop the server, finish the MCAP file (``partial``:
        why the run ended early, written into its ``rt_runtime`` metadata record; ``discard``: remove it, the
        run failed); idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self.thread.join()
        self._drain()
        self.state.close()
        self._flush(self.last_t)
        self.channels.live.log(self.counts(), log_time=self.stamp(self.last_t))
        if self.server is not None:
            if self.channels.live.has_sinks():
                # The SDK has no flush: its writers send logged frames asynchronously and stop() drops what is
                # still unsent (a client then missed the last window, 1 run in 5 on a loaded machine). A grace
                # paid once, at the end, and only with a client connected (or an MCAP file: a sink as well).
                time.sleep(CLOSE_GRACE_S)
            self.server.stop()
        if discard:
            self._discard_mcap()
        if self.mcap is not None:
            self.mcap.write_metadata("rt_runtime", {"partial": "true" if partial else "false",
                                                    "why": partial or "", **self.counts_text()})
            self.mcap.close()
            self.staged.commit()

    def counts_text(self) -> dict[str, str]:
        """``counts`` as MCAP metadata (strings)."""
        return {k: str(v) for k, v in self.counts().items()}


def start(endpoint: str | None, who: str = "rt-runtime", tasks: Sequence[str] = (), spec: LiveSpec | None = None,
          *, serve: bool = True, mcap: str | Path | None = None, replace: bool = False,
          server_options: dict[str, Any] | None = None) -> FoxgloveLive:
    """Start the live view at ``[HOST:]PORT`` (``serve``) and/or into ``mcap`` with the channels of ``spec``
    (or of ``tasks``) and say where on stderr (and what a non-loopback host exposes)."""
    host, port = parse_endpoint(endpoint) if serve else (LOOPBACK[0], 0)
    live = FoxgloveLive(host, port, tasks=tasks, spec=spec, serve=serve, mcap=mcap, replace=replace,
                        server_options=server_options)
    if serve:
        print(f"{who}: Foxglove live view on {live.url}", file=sys.stderr, flush=True)
        if host not in LOOPBACK:
            print(f"{who}: note: --foxglove {host}: the runtime's job timings, task names, safety level and outputs "
                  "(trajectory, objects) are served without authentication to anyone who can reach this port",
                  file=sys.stderr, flush=True)
    return live


__all__ = ["DEFAULT_HZ", "DEFAULT_PORT", "FoxgloveLive", "LiveError", "LiveSpec", "parse_endpoint", "start"]
