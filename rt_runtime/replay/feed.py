"""The replay's input feed: bag messages decoded into arrays, read ahead on a thread or in a process.

On the wall clock, reading and decompressing a bag chunk can take longer than a deadline; doing it
on the thread that drives the runtime would delay releases. ``prefetched`` moves the reading and
decoding to a reader thread that stays a bounded number of messages ahead (bag decompression and
numpy decoding release the GIL), so the driver only pops ready arrays; ``feed_process.ProcessFeed``
runs ``decoded_feed`` in a child process instead, where its Python does not hold the driver's GIL.

Bad sensor data is classified per message (docs/SENSORS.md, "Bad sensor data"): rejected, with
``value`` None and ``kind`` saying why, are ``undecodable`` messages, ``nonfinite`` ones (NaN/Inf
the stack must not see, ``io.ingress.NonFiniteError``) and the messages of a damaged MCAP chunk
(``crc``, ``chunk``); only noted, in ``notes`` (the message is still used), are header stamps
that go backwards on a topic (``stamp_backwards``) or lie more than ``STAMP_FAR_NS`` from the
message's log time (``stamp_far``).
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from ..bag import BagError, BagReader
from ..bag.calibration import read_calibration
from ..bag.types import stamp_ns
from ..io import INGRESS_CODECS, IngressError
from ..io.ingress import EgoMotion, decode

if TYPE_CHECKING:   # not at run time: the reader process (feed_process) does not import torch
    from ..config.stack import IngressRoute, StackConfig

# A header stamp further than this from the log time is on another clock (or wrong); a simulated
# LiDAR sweep is logged 105 ms after its stamp, a real driver's messages within tens of ms.
STAMP_FAR_NS = 1_000_000_000


@dataclass
class FeedItem:
    """One input message: its logical time, route, and decoded arrays (or why it could not be)."""

    t_ns: int
    log_ns: int
    topic: str
    route: IngressRoute
    value: dict[str, Any] | None
    error: str | None = None
    kind: str | None = None   # why ``value`` is None: undecodable, nonfinite, crc, chunk
    notes: tuple[tuple[str, str], ...] = ()   # (kind, what) of a message used anyway: stamp_backwards, stamp_far
    stamp_ns: int = -1   # its header stamp minus the bag's start (-1: no header): what ``x.meta`` says


def decoded_feed(reader: BagReader, routes: Mapping[str, IngressRoute], duration_ns: int,
                 skip_ns: int = 0) -> Iterator[FeedItem]:
    """The bag's input messages in order, decoded; a bad message is an item with ``error`` and ``kind`` set.
    ``skip_ns``: from that far into the bag, whose instant is logical time 0 (a fresh start there)."""
    last: dict[str, int] = {}   # header stamp of the topic's last used message
    motion = _ego_motion(reader, routes)   # for codecs that compensate the ego's motion (deskew); else None
    origin = reader.start_ns + skip_ns
    for msg in reader.messages(topics=list(routes), start_ns=origin if skip_ns else None, damaged=True):
        t = msg.t_ns - origin
        if t > duration_ns:
            return
        route = routes[msg.topic]
        if msg.damage is not None:
            yield FeedItem(t, msg.t_ns, msg.topic, route, None, f"{msg.damage[1]}: its messages are rejected and "
                           f"counted per topic as {msg.damage[0]}", msg.damage[0])
            continue
        try:
            obj = reader.decode(msg)
            value = decode(INGRESS_CODECS[route.codec], obj, msg.topic, motion)
            if motion is not None and route.codec == "odometry":
                motion.update(value["value"])
        except IngressError as e:
            yield FeedItem(t, msg.t_ns, msg.topic, route, None, str(e), e.kind)
            continue
        except BagError as e:
            yield FeedItem(t, msg.t_ns, msg.topic, route, None, str(e), "undecodable")
            continue
        head = getattr(obj, "header", None)
        stamp = stamp_ns(head.stamp) if head is not None else None
        yield FeedItem(t, msg.t_ns, msg.topic, route, value, notes=_stamp_notes(stamp, msg.topic, msg.t_ns, last),
                       stamp_ns=max(0, stamp - origin) if stamp is not None else -1)


def _ego_motion(reader: BagReader, routes: Mapping[str, IngressRoute]) -> EgoMotion | None:
    """An ``EgoMotion`` with the bag's sensor mounts when a route's codec uses one, else None."""
    moving = [t for t, r in routes.items() if INGRESS_CODECS[r.codec].uses_motion]
    if not moving:
        return None
    cal = read_calibration(reader, moving)
    return EgoMotion(mounts={cal.frames[t]: tuple(p.mount4()) for t in moving if (p := cal.pose_of(t)) is not None})


def _stamp_notes(s: int | None, topic: str, log_ns: int, last: dict[str, int]) -> tuple[tuple[str, str], ...]:
    """What is odd about a used message's header stamp ``s`` (None: it has none): backwards on its
    topic, far from its log time."""
    if s is None:
        return ()
    notes = []
    prev = last.get(topic)
    if prev is not None and s < prev:
        notes.append(("stamp_backwards", f"topic {topic}: header stamp {s / 1e9:.6f} s goes back "
                                         f"{(prev - s) / 1e6:.1f} ms from the message before; the message is used"))
    if abs(s - log_ns) > STAMP_FAR_NS:
        notes.append(("stamp_far", f"topic {topic}: header stamp {s / 1e9:.6f} s is {(s - log_ns) / 1e9:+.3f} s "
                                   f"from the log time; the message is used"))
    last[topic] = s
    return tuple(notes)


def _msgtype(name: str) -> str:
    """``pkg/Type`` (ROS 1 style) as ``pkg/msg/Type``, so both spellings compare equal."""
    parts = name.split("/")
    return f"{parts[0]}/msg/{parts[1]}" if len(parts) == 2 else name


def codec_problems(cfg: StackConfig, topics: dict[str, str]) -> list[str]:
    """One line per ingress topic whose message type in the bag (``topics``: topic -> type) is not one
    its codec decodes (``IngressCodec.msgtypes``): its messages would all be skipped as bad."""
    renamed = {new: old for old, new in cfg.remap.items()}
    out = []
    for r in cfg.ingress:
        codec, found = INGRESS_CODECS[r.codec], topics.get(r.topic)
        if found is None or _msgtype(found) in {_msgtype(t) for t in codec.msgtypes}:
            continue
        decodes = " or ".join(codec.msgtypes)
        was = f" (remapped from {renamed[r.topic]})" if r.topic in renamed else ""
        fits = [n for n, c in INGRESS_CODECS.items() if _msgtype(found) in {_msgtype(t) for t in c.msgtypes}]
        fix = f"codecs that decode {found}: {', '.join(fits)}" if fits else f"no codec decodes {found}"
        out.append(f"{cfg.source}: ingress {r.topic}{was}: codec {r.codec} decodes {decodes}, but the bag's "
                   f"{r.topic} is {found} ({fix}; or remap another topic here)")
    return out


_END = object()


def prefetched(items: Iterator[FeedItem], depth: int = 64, stats: dict[str, Any] | None = None) -> Iterator[FeedItem]:
    """Iterate ``items`` on a reader thread, at most ``depth`` ahead; its exceptions re-raise here.
    ``stats["cpu_s"]``: the reader thread's CPU seconds, set when it ends."""
    q: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(x: Any) -> bool:
        """Queue ``x`` unless the consumer stopped (then False): a full queue is never waited on for ever."""
        while not stop.is_set():
            try:
                q.put(x, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for item in items:
                if not offer(item):
                    return
            offer(_END)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which re-raises
            offer(e)
        finally:
            if stats is not None:
                stats["cpu_s"] = time.thread_time()   # this thread's

    thread = threading.Thread(target=read, name="rt-replay-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join(timeout=2.0)
