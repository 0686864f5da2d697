"""The replay's input feed read and decoded in a child process, so that its Python never holds the
driver's GIL.

``ProcessFeed`` starts ``python -m rt_runtime.replay.feed_process`` (a fresh interpreter: no fork of
a parent that holds torch and threads; the child imports the bag and codec modules, never torch),
which iterates ``feed.decoded_feed`` and writes each ``FeedItem`` to a pipe, in order, a bounded
number ahead. An item is one frame: a header (pickle length, buffer sizes), the item pickled with
protocol 5, and its large arrays out of band; the parent reads each array's bytes straight into a
fresh array (one kernel copy, the GIL released) that the runtime then adopts.

An exception raised in the child (a corrupt bag) is re-raised in the parent with the same type and
message, as the thread feed (``feed.prefetched``) does. The child runs in its own session, so a
Ctrl-C at the terminal reaches only the parent (whose ``stop`` flag ends the replay), and it ends
when the parent closes the feed (``close``: on every exit path) or dies (its next write fails).

``reader_kind`` chooses: the thread for small reads, where starting the child (0.4-0.5 s of CPU:
interpreter, numpy, rosbags, opening the bag) costs more than the decoding it moves away (about
1 ms of CPU per MB of the built-in scenario's bag), and where no core is left beside the threads
computing jobs: the child's CPU (its reading, the pipe's copies) then slows the ops more than
freeing the GIL speeds the driver.
"""
from __future__ import annotations

import fcntl
import json
import os
import pickle
import queue
import resource
import struct
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, NamedTuple

import numpy as np

from ..bag import BagError, BagReader, open_bag
from ..bag.reader import DAMAGE_REPORTED
from .feed import FeedItem, decoded_feed, prefetched

if TYPE_CHECKING:
    from ..config.stack import IngressRoute

READERS = ("auto", "thread", "process")
# "auto" reads in a process from this many bytes on (the built-in 10 s scenario is 287 MB; a 3 s one 86 MB).
PROCESS_MIN_BYTES = 128 << 20
DEPTH = 16   # items the child decodes ahead of the parent
# Buffers smaller than this travel inside the pickle: a syscall each would cost more than the copy.
_INLINE_MAX = 1 << 16
_HEAD = struct.Struct("<QI")   # pickle length, number of out-of-band buffers (each then a "<Q" size)
_PIPE_BYTES = 1 << 20   # a bigger pipe: a LiDAR sweep or an image in one or two reads, not sixteen


def reader_kind(reader: str, bag_bytes: int, threads: int) -> str:
    """"thread" or "process" for the ``reader`` asked for. "auto": the process where the feed reads
    ``PROCESS_MIN_BYTES`` or more (``bag_bytes``) and the ``threads`` computing jobs leave a core for it;
    else the thread (on 2 cores with 2 computing threads the child's CPU costs more than the GIL it frees)."""
    if reader not in READERS:
        raise ValueError(f"reader: expected one of {', '.join(READERS)}, found {reader!r}")
    if reader == "auto":
        return "process" if bag_bytes >= PROCESS_MIN_BYTES and (os.cpu_count() or 1) > threads else "thread"
    return reader


def bag_bytes(bag: BagReader, duration_ns: int) -> int:
    """About how many bytes of ``bag`` a feed up to ``duration_ns`` reads: its files' size, pro rata."""
    size = sum(f.stat().st_size for f in bag.files if f.is_file())
    return size if duration_ns >= bag.duration_ns else int(size * duration_ns / bag.duration_ns)


class _Route(NamedTuple):
    """What ``decoded_feed`` reads of an ``IngressRoute`` (the child does not import the config module)."""

    codec: str


class ProcessFeed:
    """``decoded_feed`` over ``bag`` in a child process: iterate for the items in order; ``close`` ends the child."""

    def __init__(self, bag: str | Path, routes: Mapping[str, IngressRoute], duration_ns: int,
                 depth: int = DEPTH, skip_ns: int = 0) -> None:
        """Start the child now: it opens the bag and decodes ahead while the caller builds the stack."""
        self.routes = dict(routes)
        self.bag = str(bag)
        self.finished = False
        read_fd, write_fd = os.pipe()
        try:
            if hasattr(fcntl, "F_SETPIPE_SZ"):   # Linux
                fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        except OSError:   # a system limit below 1 MiB: the default size works, in more reads
            pass
        codecs = json.dumps({topic: r.codec for topic, r in self.routes.items()})
        # The child imports the same rt_runtime as this process, whatever its sys.path was.
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        try:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-m", "rt_runtime.replay.feed_process", self.bag, codecs, str(duration_ns),
                 str(write_fd), str(depth), str(skip_ns)],
                pass_fds=(write_fd,), stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)   # the child's copy is the only writer: its exit is this end's EOF
        self.fd: int | None = read_fd
        self.depth = depth
        self.child: dict[str, float] = {}   # the child's CPU seconds: cpu_s (all), start_cpu_s (said at its end)
        self.receiving: dict[str, Any] = {}   # the receiving thread's CPU seconds (cpu_s), when it ends
        self._items: Iterator[FeedItem] | None = None

    def __iter__(self) -> Iterator[FeedItem]:
        """The items in order, received on a thread (the pipe's reads stay off the caller's time); the
        child's exception re-raised here."""
        self._items = prefetched(self._received(), self.depth, self.receiving)
        return self._items

    def _received(self) -> Iterator[FeedItem]:
        while True:
            got = self._receive()
            if isinstance(got, dict):   # the end: the child's CPU seconds
                self.finished, self.child = True, got
                return
            if isinstance(got, BaseException):
                self.finished = True
                raise got
            t, log_ns, topic, value, error, kind, notes, stamp, damage = got
            # Damaged chunks the child's feed saw count as told in this process too (later readers of
            # the bag do not repeat the warning), as when the feed runs here.
            DAMAGE_REPORTED.update(damage)
            yield FeedItem(t, log_ns, topic, self.routes[topic], value, error, kind, notes, stamp)

    def _receive(self) -> Any:
        """The next frame's object: an item tuple, the child's CPU seconds (a dict) at the end, or its exception."""
        if self.fd is None:
            raise BagError(f"bag {self.bag}: the reader process was closed")
        head = self._read(_HEAD.size)
        size, count = _HEAD.unpack(head)
        sizes = struct.unpack(f"<{count}Q", self._read(8 * count)) if count else ()
        data = self._read(size)
        buffers = [self._read_into(np.empty(n, np.uint8)) for n in sizes]
        return pickle.loads(data, buffers=buffers)

    def _read(self, n: int) -> bytearray:
        return self._read_into(bytearray(n))

    def _read_into(self, buf: Any) -> Any:
        """Fill ``buf`` from the pipe (``os.readv`` writes into it and releases the GIL while it waits)."""
        view, got = memoryview(buf).cast("B"), 0
        while got < len(view):
            n = os.readv(self.fd, [view[got:]])
            if n == 0:
                code = self.proc.wait() if self.proc is not None else None
                raise BagError(f"bag {self.bag}: the reader process ended (exit status {code}) "
                               "before the end of its feed")
            got += n
        return buf

    def stats(self) -> dict[str, Any]:
        """What reading cost, CPU seconds: the child's (``cpu_s``, of which ``start_cpu_s`` before its first
        message: interpreter, imports, opening the bag; absent before its end) and this process's receiving."""
        return {**self.child, "receive_cpu_s": self.receiving.get("cpu_s", 0.0)}

    def close(self) -> None:
        """End the child (at once unless it finished) and wait for it, then the receiving thread (every
        read now ends), then close the pipe. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is not None:
            if not self.finished:
                proc.terminate()
            try:
                proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._items is not None:
            self._items.close()   # joins the receiving thread
            self._items = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "ProcessFeed":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- the child -----------------------------------------------------------------------------------

_STOP = object()


def _frame(obj: Any) -> list[Any]:
    """``obj`` as the buffers of one frame (header, sizes, pickle, then its large arrays' bytes)."""
    big: list[pickle.PickleBuffer] = []

    def out_of_band(buf: pickle.PickleBuffer) -> bool:
        if buf.raw().nbytes < _INLINE_MAX:
            return True   # in band
        big.append(buf)
        return False

    data = pickle.dumps(obj, protocol=5, buffer_callback=out_of_band)
    raws = [b.raw() for b in big]
    return [_HEAD.pack(len(data), len(raws)) + struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws)), data, *raws]


def _send(fd: int, frames: "queue.Queue[Any]") -> None:
    """Write frames to the pipe until ``_STOP``; the parent gone (closed pipe): exit the child at once."""
    while (parts := frames.get()) is not _STOP:
        try:
            for part in parts:
                view = memoryview(part).cast("B")
                while view:
                    view = view[os.write(fd, view):]
        except OSError:   # EPIPE: the parent closed the feed (or died); nothing is waiting for more
            os._exit(0)
    os.close(fd)


def _picklable(e: BaseException) -> BaseException:
    """``e`` if it survives pickling, else a RuntimeError that says the same."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")


def _cpu_s() -> float:
    """This process's CPU seconds so far, user and system."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def child_main(argv: list[str]) -> int:
    """The child: decode the bag's feed and write it to the pipe (fd in ``argv``), the end or the error last."""
    bag, codecs = argv[0], json.loads(argv[1])
    duration_ns, fd, depth, skip_ns = (int(a) for a in argv[2:6])
    warnings.simplefilter("ignore")   # the parent opened the same bag and said what is wrong with it
    frames: queue.Queue[Any] = queue.Queue(maxsize=depth)
    sender = threading.Thread(target=_send, args=(fd, frames), name="rt-replay-reader-send")
    sender.start()
    sent: set[str] = set()
    try:
        reader = open_bag(bag)
        start = _cpu_s()
        try:
            routes = {topic: _Route(codec) for topic, codec in codecs.items()}
            for item in decoded_feed(reader, routes, duration_ns, skip_ns):  # type: ignore[arg-type]
                damage = tuple(DAMAGE_REPORTED - sent) if len(DAMAGE_REPORTED) != len(sent) else ()
                sent.update(damage)
                frames.put(_frame((item.t_ns, item.log_ns, item.topic, item.value, item.error, item.kind,
                                   item.notes, item.stamp_ns, damage)))
        finally:
            reader.close()
        frames.put(_frame({"cpu_s": _cpu_s(), "start_cpu_s": start}))
    except BaseException as e:  # noqa: BLE001 - handed to the parent, which re-raises
        frames.put(_frame(_picklable(e)))
    frames.put(_STOP)
    sender.join()
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
