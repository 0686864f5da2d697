"""The replay's input feed: bag messages decoded into arrays, optionally read ahead on a thread.

On the wall clock, reading and decompressing a bag chunk can take longer than a deadline; doing it
on the thread that drives the runtime would delay releases. ``prefetched`` moves the reading and
decoding to a reader thread that stays a bounded number of messages ahead (bag decompression and
numpy decoding release the GIL), so the driver only pops ready arrays.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from ..bag import BagError, BagReader
from ..config.stack import IngressRoute
from ..io import INGRESS_CODECS, IngressError
from ..io.ingress import decode


@dataclass
class FeedItem:
    """One input message: its logical time, route, and decoded arrays (or why it could not be)."""

    t_ns: int
    log_ns: int
    topic: str
    route: IngressRoute
    value: dict[str, Any] | None
    error: str | None = None


def decoded_feed(reader: BagReader, routes: Mapping[str, IngressRoute], duration_ns: int) -> Iterator[FeedItem]:
    """The bag's input messages in order, decoded; a bad message is an item with ``error`` set."""
    for msg in reader.messages(topics=list(routes)):
        t = msg.t_ns - reader.start_ns
        if t > duration_ns:
            return
        route = routes[msg.topic]
        try:
            value = decode(INGRESS_CODECS[route.codec], reader.decode(msg), msg.topic)
        except (IngressError, BagError) as e:
            yield FeedItem(t, msg.t_ns, msg.topic, route, None, str(e))
            continue
        yield FeedItem(t, msg.t_ns, msg.topic, route, value)


_END = object()


def prefetched(items: Iterator[FeedItem], depth: int = 64) -> Iterator[FeedItem]:
    """Iterate ``items`` on a reader thread, at most ``depth`` ahead; its exceptions re-raise here."""
    q: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def read() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(_END)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which re-raises
            q.put(e)

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
