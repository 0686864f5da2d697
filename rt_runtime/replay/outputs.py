"""The replay's outputs: LET publications grouped per instant, encoded, hashed and written.

The runtime calls ``OutputCollector.on_publish`` when a job's outputs become visible (at its
deadline under LET). Everything published at the same logical instant is held, then encoded per
egress route, in topic order, once time has moved past that instant. The order of messages, and
so the digest, depends only on logical times and topic names, never on which worker published
first.

Encoding (CDR), hashing and writing run on one writer thread (``background``), in the order the
driver hands batches over, so they overlap the jobs' kernels instead of delaying the next release;
``drain`` waits for it and re-raises what it raised. That thread owns the output bag: it creates,
writes and closes it (an SQLite bag's connection works only in the thread that opened it).
"""
from __future__ import annotations

import hashlib
import threading
from collections import defaultdict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable

import numpy as np

from ..bag import BagWriter, to_cdr
from ..config.stack import EgressRoute
from ..drive import host_copy
from ..io import EGRESS_CODECS


class OutputDigest:
    """SHA-256 over every output message, in order: topic, logical time (ns), CDR bytes."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self.messages = 0

    def update(self, topic: str, t_ns: int, cdr: bytes) -> None:
        """Add one message."""
        self._h.update(topic.encode() + b"\0" + int(t_ns).to_bytes(8, "little", signed=True) + cdr)
        self.messages += 1

    def hexdigest(self) -> str:
        """The digest so far."""
        return self._h.hexdigest()


class OutputCollector:
    """Receives LET publications, encodes them per egress route, hashes and writes them."""

    def __init__(self, routes: list[EgressRoute], frame: str, start_ns: int,
                 sink: Callable[[str, int, bytes], None] | None = None, retain: bool = False,
                 retain_channels: Iterable[str] = (), background: bool = False) -> None:
        self.routes = sorted(routes, key=lambda r: r.topic)
        self.frame = frame
        self.start_ns = start_ns
        self.writer: BagWriter | None = None   # the output bag, once ``attach`` made it
        self.sink = sink
        self.digest = OutputDigest()
        self.by_channel: dict[str, list[tuple[EgressRoute, str]]] = defaultdict(list)
        for r in self.routes:
            for role, channel in r.channels.items():
                self.by_channel[channel].append((r, role))
        self._pending: dict[int, dict[str, np.ndarray]] = defaultdict(dict)
        self._after: dict[int, list[tuple[str, Any]]] = defaultdict(list)   # t -> messages after its outputs
        self._lock = threading.Lock()
        self.counts: dict[str, int] = dict.fromkeys((r.topic for r in self.routes), 0)
        # codec -> [(t, {role: array})]: what quality measures read after the run
        self.retained: dict[str, list[tuple[int, dict[str, np.ndarray]]]] | None = defaultdict(list) if retain else None
        # channel -> [(t, array)]: copies of other channels' publications (not written, not hashed)
        self.channels: dict[str, list[tuple[int, np.ndarray]]] = {c: [] for c in retain_channels}
        # One writer thread keeps the order; None: encode in the caller's thread.
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="rt-replay-egress") if background else None
        self._queued: deque[Future] = deque()
        # observers' egress taps (the live view): each egress channel's copy below, as published
        self.taps: list[Callable[[str, int, np.ndarray], None]] = []

    def attach(self, make: Callable[[], BagWriter], topics: Iterable[tuple[str, str]] = ()) -> BagWriter:
        """Create the output bag (``make``) on the writer thread and write into it from now on: ``topics``
        (name, type) and the egress topics are declared first, in that order; a failure removes it.

        A replay attaches its output bag only once the stack is built and warm: a failure before
        that leaves nothing at the output path."""
        def open_bag() -> BagWriter:
            writer = make()
            try:
                for name, msgtype in [*topics, *((r.topic, EGRESS_CODECS[r.codec].msgtype) for r in self.routes)]:
                    writer.add_topic(name, msgtype)
            except BaseException:
                writer.abort()
                raise
            self.writer = writer
            return writer

        return self._on_writer(open_bag)

    def finish(self, partial: str | None = None) -> None:
        """Close the output bag on the writer thread, after what it was given (``partial``: why it stops
        early, recorded in its metadata), then stop the thread."""
        writer = self.writer
        try:
            if writer is not None:
                self._on_writer(lambda: writer.close(partial=partial))
        finally:
            self.close()

    def abort(self) -> None:
        """Remove the output bag (on the writer thread, after what it was given), then stop the thread."""
        writer = self.writer
        try:
            if writer is not None:
                self._on_writer(writer.abort)
        finally:
            self.close()

    def _on_writer(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the writer thread, after what is queued; waits and returns its result."""
        if self._pool is None:
            return fn()
        return self._pool.submit(fn).result()

    def on_publish(self, channel: str, t_ns: int, seq: int, data: Any) -> None:
        """The runtime's egress hook: keep a copy of what became visible at ``t_ns``."""
        kept = self.channels.get(channel)
        if channel in self.by_channel or kept is not None:
            value = host_copy(data)
            for tap in self.taps:
                tap(channel, t_ns, value)
            with self._lock:
                if channel in self.by_channel:
                    self._pending[t_ns][channel] = value
                if kept is not None:
                    kept.append((t_ns, value))

    def emit(self, topic: str, t_ns: int, msg: Any) -> None:
        """Write one message that is not a LET output (diagnostics) after the outputs of ``t_ns``, when
        that instant is flushed."""
        with self._lock:
            self._after[t_ns].append((topic, msg))

    def _later(self, fn: Callable[[], None]) -> None:
        if self._pool is None:
            fn()
            return
        q = self._queued
        while q and q[0].done():   # surface a writer error early, and keep the queue short
            q.popleft().result()
        q.append(self._pool.submit(fn))

    def drain(self) -> None:
        """Wait until everything handed over is written; re-raises the writer thread's error."""
        q = self._queued
        while q:
            q.popleft().result()

    def close(self) -> None:
        """Stop the writer thread (after what it was given: call ``drain`` first to see its errors); the
        output bag is left as it is (``finish`` closes it, ``abort`` removes it)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
            self._queued.clear()

    def _write(self, topic: str, t_ns: int, cdr: bytes) -> None:
        self.digest.update(topic, t_ns, cdr)
        self.counts[topic] = self.counts.get(topic, 0) + 1
        if self.writer is not None:
            self.writer.write(topic, self.start_ns + t_ns, cdr)
        if self.sink is not None:
            self.sink(topic, t_ns, cdr)

    def flush(self, upto_ns: int) -> None:
        """Encode and write every instant <= ``upto_ns``, oldest first, routes in topic order."""
        with self._lock:
            ready = sorted({t for t in self._pending if t <= upto_ns} | {t for t in self._after if t <= upto_ns})
            batches = [(t, self._pending.pop(t, {}), self._after.pop(t, ())) for t in ready]
        if batches:
            self._later(lambda: self._encode(batches))

    def _encode(self, batches: list[tuple[int, dict[str, np.ndarray], Any]]) -> None:
        for t, values, after in batches:
            for r in self.routes:
                if all(c in values for c in r.channels.values()):
                    codec = EGRESS_CODECS[r.codec]
                    group = {role: values[c] for role, c in r.channels.items()}
                    self._write(r.topic, t, codec.to_cdr(group, self.start_ns + t, self.frame))
                    if self.retained is not None:
                        self.retained[r.codec].append((t, group))
            for topic, msg in after:
                self._write(topic, t, to_cdr(msg))
