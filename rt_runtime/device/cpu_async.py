"""cpu-async: the asynchronous CPU twin of the CUDA device, so CI catches a missing stream wait.

On CUDA a launch returns before the kernel ran: the host and every other stream see the old bytes
until they wait on an event recorded after it. The plain CPU device hides every such bug, because
an op is done when its call returns. Here each stream is a FIFO worker thread: ``launch`` enqueues
the op and returns at once, events are markers in that queue (``record``), a stream can be told to
stall until another stream's marker passed (``wait``), and the host can poll (``query``) or block
(``synchronize``). Work launched on a stream completes later, so a host read of data nobody waited
for sees stale bytes — the same failure a GPU shows, on a machine without one.

Like CUDA, an error inside launched work is sticky: it is raised at the next synchronize of that
stream (or of an event recorded on it after the error), not at the launch.
"""
from __future__ import annotations

from collections import deque
from contextlib import nullcontext
import threading
import time
from typing import Any, Callable

from .cpu import CpuDevice

_now = time.monotonic_ns


class DeviceError(RuntimeError):
    """Work launched on an asynchronous stream raised; reported where the host synchronizes."""


class AsyncStream:
    """A FIFO of launched work, run in order by one worker thread owned by this stream."""

    def __init__(self, urgency: float = 0.0, name: str = "stream") -> None:
        self.urgency = urgency   # FIFO threads have no priority of their own; kept for reports
        self.name = name
        self._queue: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._cv = threading.Condition()
        self._launched = 0      # items ever enqueued
        self._completed = 0     # items ever finished (run or failed)
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=f"cpu-async:{name}", daemon=True)
        self._thread.start()

    # ---- host side ----------------------------------------------------------------------------
    def launch(self, fn: Callable[..., Any], *args: Any) -> int:
        """Enqueue ``fn(*args)``; returns its sequence number on this stream (1-based)."""
        with self._cv:
            if self._closed:
                raise DeviceError(f"cpu-async stream {self.name!r}: launch after close")
            self._queue.append((fn, args))
            self._launched += 1
            self._cv.notify_all()
            return self._launched

    def done(self, seq: int) -> bool:
        """Whether the ``seq``-th launched item has finished."""
        return self._completed >= seq

    def wait_for(self, seq: int, timeout: float | None = None) -> bool:
        """Block the caller until the ``seq``-th item finished; False on timeout."""
        with self._cv:
            return self._cv.wait_for(lambda: self._completed >= seq, timeout)

    def synchronize(self) -> None:
        """Block until everything launched so far finished; raise the stream's sticky error."""
        with self._cv:
            seq = self._launched
        self.wait_for(seq)
        self.raise_error()

    def raise_error(self) -> None:
        """Raise the first error any launched item raised (sticky, as on CUDA)."""
        if self._error is not None:
            raise DeviceError(f"cpu-async stream {self.name!r}: launched work failed: "
                              f"{type(self._error).__name__}: {self._error}") from self._error

    def close(self) -> None:
        """Finish the queued work and stop the worker thread."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join()

    # ---- worker side --------------------------------------------------------------------------
    def _serve(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return
                fn, args = self._queue.popleft()
            try:
                # After an error the stream is poisoned: later work is skipped, as a faulted
                # CUDA context refuses further kernels; markers still complete so waits end.
                if self._error is None or getattr(fn, "_marker", False):
                    fn(*args)
            except BaseException as e:   # noqa: BLE001 - kept and re-raised on the host
                if self._error is None:
                    self._error = e
            with self._cv:
                self._completed += 1
                self._cv.notify_all()

    def __repr__(self) -> str:
        return f"AsyncStream({self.name!r}, urgency={self.urgency})"


class AsyncEvent:
    """A marker in a stream's queue: recorded, waited on by other streams, queried or synced by the host."""

    def __init__(self) -> None:
        self._stream: AsyncStream | None = None
        self._seq = 0            # the marker's sequence number on its stream
        self.time_ns = 0         # when the marker was reached (for elapsed times, like cudaEventElapsedTime)

    def record(self, stream: AsyncStream) -> None:
        """Place the marker after everything launched on ``stream`` so far."""
        def reached() -> None:
            self.time_ns = _now()

        reached._marker = True   # type: ignore[attr-defined]
        self.time_ns = 0
        self._seq = stream.launch(reached)
        self._stream = stream

    def wait(self, stream: AsyncStream) -> None:
        """Make ``stream``'s later work wait until this marker (as recorded now) was reached.

        Like ``cudaStreamWaitEvent``: the wait binds to the most recent ``record`` at call time; an
        event never recorded completes at once.
        """
        src, seq = self._stream, self._seq
        if src is None or src is stream:
            return   # FIFO order already covers a wait on one's own stream

        def stall() -> None:
            src.wait_for(seq)

        stall._marker = True   # type: ignore[attr-defined]
        stream.launch(stall)

    def query(self) -> bool:
        """Whether the marker was reached (never-recorded events count as reached)."""
        return self._stream is None or self._stream.done(self._seq)

    def synchronize(self) -> None:
        """Block the host until the marker was reached; raise the stream's sticky error."""
        if self._stream is not None:
            self._stream.wait_for(self._seq)
            self._stream.raise_error()

    def elapsed_ns(self, end: "AsyncEvent") -> int:
        """Time from this event to ``end``, both reached."""
        return end.time_ns - self.time_ns


class CpuAsyncDevice(CpuDevice):
    """Host memory like ``cpu``; streams are FIFO worker threads and events are real markers."""

    kind = "cpu-async"

    def __init__(self) -> None:
        super().__init__(array="torch")
        self.name = "cpu-async"
        self._streams: list[AsyncStream] = []
        self._copy: AsyncStream | None = None

    def stream(self, urgency: float = 0.0) -> AsyncStream:  # type: ignore[override]
        """A new stream, with its own worker thread, owned by the caller."""
        s = AsyncStream(urgency, name=f"s{len(self._streams)}")
        self._streams.append(s)
        return s

    def copy_stream(self) -> AsyncStream:
        """The device's copy stream (ingress staging, egress), made on first use."""
        if self._copy is None:
            self._copy = AsyncStream(1.0, name="copy")
            self._streams.append(self._copy)
        return self._copy

    def host_buffer(self, numel: int, dtype: Any) -> Any:
        """An ordinary host tensor: the twin's "device" memory is host memory too, so nothing to pin."""
        import torch

        return torch.empty(numel, dtype=dtype)

    def on_stream(self, stream: Any) -> nullcontext:
        """Ops do not go to a stream implicitly here: ``launch`` names the stream."""
        return nullcontext()

    def launch(self, stream: AsyncStream | None, fn: Callable[..., Any], *args: Any) -> None:
        """Enqueue ``fn(*args)`` on ``stream`` (run now when there is none)."""
        if stream is None:
            fn(*args)
        else:
            stream.launch(fn, *args)

    def event(self) -> AsyncEvent:  # type: ignore[override]
        """A marker event."""
        return AsyncEvent()

    def synchronize(self, stream: Any = None) -> None:
        """Wait for one stream, or every stream this device made."""
        for s in ([stream] if stream is not None else list(self._streams)):
            s.synchronize()

    def copy_(self, dst: Any, src: Any, stream: AsyncStream | None = None) -> None:  # type: ignore[override]
        """In-place copy, enqueued on ``stream`` when one is given (asynchronous, like on CUDA)."""
        self.launch(stream, CpuDevice.copy_, self, dst, src)

    def close(self) -> None:
        """Stop every stream's worker thread (queued work finishes first)."""
        for s in self._streams:
            s.close()

    def __repr__(self) -> str:
        return f"CpuAsyncDevice({len(self._streams)} streams)"
