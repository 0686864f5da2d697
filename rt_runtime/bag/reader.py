"""`open_bag` / `BagReader`: rosbag2 (.mcap, .db3) reading in a stable, total message order.

Order: log timestamp, then topic name, then the topic's own file order (`seq`). The same bag
therefore always yields the same sequence, whichever storage plugin or writer produced it.

An indexed MCAP is read chunk by chunk (``mcap_chunks``: as ``rosbags`` does, lazily, merged by time), so that a
chunk whose CRC does not match its records, or that does not decompress, damages only its own
messages: they are skipped with one ``BagWarning`` per chunk, or yielded as ``BagMessage`` with
``damage`` set when asked (``messages(damaged=True)``, the replay's feed, which counts them bad).
"""
from __future__ import annotations

import struct
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

from rosbags.interfaces import MessageDefinitionFormat
from rosbags.rosbag2 import Reader, ReaderError
from rosbags.typesys import get_types_from_idl, get_types_from_msg
from rosbags.typesys.store import Typestore

from .bagdir import (STORAGE_SUFFIXES, about_metadata, expected_count, metadata_problem, metadata_syntax,
                     storage_files)
from .errors import BagError, BagWarning, CodecError, one_line
from .mcap_chunks import Item, mcap_messages, mcap_storages
from .salvage import Salvaged, salvage_mcap, salvage_sqlite, salvaged_messages
from .types import new_typestore

# Damaged chunks already reported in this process (by text: bag and byte): a replay that reports one
# is not followed by the same warning from each later reader of that bag (the quality measures).
DAMAGE_REPORTED: set[str] = set()

# What the bag library's open raises on damaged bytes, besides its ReaderError: a file that ends right
# after its magic (TypeError from ord(b'')), a cut record (struct.error), a missing index (AssertionError).
# MemoryError, OverflowError: a record length read from garbage (rosbags then asks for gigabytes)
_UNREADABLE = (ReaderError, OSError, KeyError, ValueError, TypeError, IndexError, AssertionError, struct.error,
               MemoryError, OverflowError)


class BagMessage(NamedTuple):
    """One raw message: topic, log time (ns), type name, CDR bytes and per-topic sequence number.

    ``damage``: (kind, why) for a message of a damaged MCAP chunk (kind ``crc``: the chunk's CRC does
    not match its records; ``chunk``: it does not decompress); its ``raw_cdr`` is then empty.
    ``raw_cdr`` is bytes or a read-only view of them (an indexed MCAP's chunk, a salvaged file)."""

    topic: str
    t_ns: int
    msgtype: str
    raw_cdr: bytes | memoryview
    seq: int = 0
    damage: tuple[str, str] | None = None


def open_bag(path: str | Path) -> "BagReader":
    """Open a rosbag2 directory, or a bare .mcap/.db3 file, for reading."""
    return BagReader(path)


class BagReader:
    """An open bag: topic table, time range, ordered raw messages and decoding."""

    def __init__(self, path: str | Path) -> None:
        """Open `path`; a damaged storage file is scanned for what is readable (see `truncated`)."""
        self.path = Path(path)
        target, self.files = storage_files(self.path)
        self.storage = STORAGE_SUFFIXES.get(self.files[0].suffix, "") if self.files else ""
        self.store: Typestore = new_typestore()
        self.truncated: str | None = None
        self.metadata_problem: str | None = None   # a broken metadata.yaml (the storage files were read directly)
        self.skipped: Counter[str] = Counter()
        self.metadata: dict[str, str] = {}
        self._reader: Reader | None = None
        self._salvaged: list[Salvaged] = []
        msgdefs: dict[str, tuple[str, str]] = {}
        problem = metadata_problem(self.path) if target == self.path else None
        if problem is None:
            try:
                self._reader = Reader(target)
                self._reader.open()
            except _UNREADABLE as e:
                self._reader = None
                if isinstance(e, ReaderError) and about_metadata(e):
                    problem = metadata_syntax(self.path) or one_line(str(e))
                else:
                    self._salvage(e)
        if problem is not None:
            self._without_metadata(problem)
        if self._reader is not None:
            conns = self._reader.connections
            self.topics = {c.topic: c.msgtype for c in conns}
            self.counts = {t: 0 for t in self.topics}
            for c in conns:
                self.counts[c.topic] += c.msgcount
                if c.msgdef.format != MessageDefinitionFormat.NONE:
                    fmt = "ros2msg" if c.msgdef.format == MessageDefinitionFormat.MSG else "ros2idl"
                    msgdefs[c.msgtype] = (fmt, c.msgdef.data)
            count = self._reader.message_count
            self.start_ns = self._reader.start_time if count else 0
            self.end_ns = self._reader.end_time - 1 if count else 0
            meta = getattr(self._reader.storage, "metadata", None)
            self.metadata = dict(getattr(meta, "custom", None) or {})  # metadata.yaml custom_data
        else:
            self.topics, self.counts = {}, {}
            for s in self._salvaged:
                self.topics.update(s.topics)
                msgdefs.update(s.msgdefs)
            for s in self._salvaged:
                for e in s.entries:
                    self.counts[e[1]] = self.counts.get(e[1], 0) + 1
            ts = [e[0] for s in self._salvaged for e in s.entries]
            self.start_ns, self.end_ns = (min(ts), max(ts)) if ts else (0, 0)
        self.msgdefs = msgdefs
        self._register_types(msgdefs)

    def _without_metadata(self, problem: str) -> None:
        """metadata.yaml is broken: read the storage file(s) next to it directly, and say so (not "truncated")."""
        self.metadata_problem = f"bag {self.path}: metadata.yaml is broken ({problem})"
        files = [f for f in self.files if f.is_file()]
        if not files:
            raise BagError(f"{self.metadata_problem}, and no .mcap or .db3 file is next to it") from None
        if len(files) == 1:
            try:
                self._reader = Reader(files[0])
                self._reader.open()
            except _UNREADABLE as e:
                self._reader = None
                self._salvage(e)
        else:
            self._salvage(ReaderError(problem))
        if self.truncated is None:   # the storage itself read cleanly: only the metadata was wrong
            warnings.warn(f"{self.metadata_problem}; read {', '.join(f.name for f in files)} directly",
                          BagWarning, stacklevel=4)

    def _salvage(self, error: Exception) -> None:
        """Fall back to scanning storage files; raise BagError when nothing is readable."""
        files = [f for f in self.files if f.is_file()]
        if not files:
            raise BagError(f"bag {self.path}: cannot open: {error}") from None
        # The bag library's own words where it has them; not the text of a TypeError from inside it.
        said = f" (reader said: {error})" if isinstance(error, (ReaderError, OSError)) else ""
        for f in files:
            try:
                s = salvage_mcap(f) if f.suffix == ".mcap" else salvage_sqlite(f)
            except Exception as e:  # noqa: BLE001 - ValueError, OSError, and apsw's own hierarchy for unreadable files
                raise BagError(f"bag {self.path}: cannot read {f.name}: {e}{said}") from None
            self._salvaged.append(s)
        got = sum(len(s.entries) for s in self._salvaged)
        if not got and not any(s.topics for s in self._salvaged):
            raise BagError(f"bag {self.path}: no readable messages: {error}") from None
        if self.metadata_problem is not None and all(s.stopped_at >= s.size for s in self._salvaged):
            return   # every storage file read to its end: not truncated (the caller names the metadata)
        where = "; ".join(f"{s.path.name}: stopped at byte {s.stopped_at} of {s.size} ({s.reason})"
                          for s in self._salvaged)
        expected = expected_count(self.path)
        of = f" of {expected}" if expected else ""
        self.truncated = f"bag {self.path} is truncated or damaged: read {got}{of} messages; {where}"
        if self.metadata_problem is not None:
            self.truncated += f"; and its {self.metadata_problem.split(': ', 1)[1]}"
        warnings.warn(self.truncated, BagWarning, stacklevel=3)

    def _register_types(self, msgdefs: dict[str, tuple[str, str]]) -> None:
        """Teach the type store every type the bag carries a definition for and it lacks."""
        for msgtype, (fmt, text) in msgdefs.items():
            if msgtype in self.store.types or not text:
                continue
            try:
                types = get_types_from_msg(text, msgtype) if fmt == "ros2msg" else get_types_from_idl(text)
                self.store.register(types)
            except Exception as e:
                warnings.warn(f"bag {self.path}: cannot use the stored definition of {msgtype}: {e}",
                              BagWarning, stacklevel=3)

    @property
    def duration_ns(self) -> int:
        """Time from the first to the last message (ns)."""
        return self.end_ns - self.start_ns

    @property
    def message_count(self) -> int:
        """Number of messages the bag holds (readable ones, for a damaged bag)."""
        return sum(self.counts.values())

    def messages(self, topics: Iterable[str] | None = None, start_ns: int | None = None,
                 stop_ns: int | None = None, damaged: bool = False) -> Iterator[BagMessage]:
        """Raw messages in (t_ns, topic, seq) order, optionally only `topics` and [start_ns, stop_ns).

        The messages of a damaged MCAP chunk (CRC mismatch, does not decompress) are skipped with one
        `BagWarning` per chunk and process; `damaged=True` yields them instead, with `damage` set and
        no bytes, and leaves reporting them to the caller."""
        wanted = set(self.topics) if topics is None else set(topics)
        if unknown := wanted - set(self.topics):
            raise BagError(f"bag {self.path}: no topic {sorted(unknown)[0]}; it has {sorted(self.topics)}")
        if self._reader is not None:
            for m in self._ordered(self._indexed(wanted, start_ns, stop_ns)):
                if m.damage is not None:
                    if not damaged and m.damage[1] not in DAMAGE_REPORTED:
                        warnings.warn(f"{m.damage[1]}; its messages are skipped", BagWarning, stacklevel=2)
                    DAMAGE_REPORTED.add(m.damage[1])
                    if not damaged:
                        continue
                yield m
        else:
            yield from self._from_salvage(wanted, start_ns, stop_ns)

    def _indexed(self, wanted: set[str], start_ns: int | None, stop_ns: int | None) -> Iterator[Item]:
        assert self._reader is not None
        conns = [c for c in self._reader.connections if c.topic in wanted]
        if not conns:
            return
        storages = mcap_storages(self._reader)
        last = None
        try:
            if storages is not None:
                for storage in storages:   # one file after the other, as rosbags reads a split bag
                    for item in mcap_messages(storage, self.path, wanted, start_ns, stop_ns):
                        last = item[0]
                        yield item
                return
            for conn, t, raw in self._reader.messages(conns, start=start_ns, stop=stop_ns):
                last = t
                yield t, conn.topic, raw, None
        except (ReaderError, OSError, ValueError, KeyError, IndexError) as e:
            raise BagError(f"bag {self.path}: corrupt data after t={last} ns: {e}") from None
        except Exception as e:  # apsw errors (malformed database) surface only while iterating
            raise BagError(f"bag {self.path}: corrupt data after t={last} ns: {e.__class__.__name__}: {e}") from None

    def _ordered(self, stream: Iterator[Item]) -> Iterator[BagMessage]:
        # rosbags yields in timestamp order with ties in file order; we sort each tie group by
        # topic (stable sort keeps file order within a topic) and number messages per topic.
        seq: Counter[str] = Counter()
        group: list[Item] = []
        for item in stream:
            if group and item[0] != group[0][0]:
                yield from self._emit(group, seq)
                group = []
            group.append(item)
        yield from self._emit(group, seq)

    def _emit(self, group: list[Item], seq: Counter[str]) -> Iterator[BagMessage]:
        if len(group) > 1:
            group.sort(key=lambda g: g[1])
        for t, topic, raw, damage in group:
            yield BagMessage(topic, t, self.topics[topic], raw, seq[topic], damage)
            seq[topic] += 1

    def _from_salvage(self, wanted: set[str], start_ns: int | None, stop_ns: int | None) -> Iterator[BagMessage]:
        for t, topic, raw, seq in salvaged_messages(self._salvaged, wanted, start_ns, stop_ns):
            yield BagMessage(topic, t, self.topics[topic], raw, seq)

    def prepare(self, topics: Iterable[str]) -> None:
        """Generate the decoders of ``topics``' message types now (the type store makes each at its first
        message: 5-15 ms a type), e.g. while a stack builds; a type it cannot make fails at ``decode``."""
        for topic in topics:
            try:
                self.store.get_msgdef(self.topics[topic])
            except Exception:  # noqa: BLE001 - reported, with the message, where it is decoded
                pass

    def decode(self, msg: BagMessage) -> Any:
        """The message object of a raw message (number arrays are views into its bytes)."""
        if msg.damage is not None:
            raise CodecError(msg.damage[1])
        if msg.msgtype not in self.store.types:
            raise CodecError(f"bag {self.path}: topic {msg.topic}: unknown message type {msg.msgtype!r} "
                             f"(not in the {self.store_name} type store and the bag carries no definition)")
        try:
            return self.store.deserialize_cdr(memoryview(msg.raw_cdr), msg.msgtype)  # zero-copy arrays
        except Exception as e:
            raise CodecError(f"bag {self.path}: topic {msg.topic} message {msg.seq} at t={msg.t_ns} ns: "
                             f"cannot decode {msg.msgtype} from {len(msg.raw_cdr)} bytes: {e}") from None

    @property
    def store_name(self) -> str:
        """Name of the base type store (e.g. 'ros2_kilted')."""
        from .types import STORE_NAME
        return str(STORE_NAME.value)

    def decoded(self, topics: Iterable[str] | None = None) -> Iterator[tuple[BagMessage, Any]]:
        """(raw, decoded) pairs; undecodable messages are skipped, counted in `skipped` and warned once per topic
        (those of a damaged chunk are skipped as `messages` skips them)."""
        first: dict[str, str] = {}
        try:
            for m in self.messages(topics):
                try:
                    yield m, self.decode(m)
                except CodecError as e:
                    self.skipped[m.topic] += 1
                    first.setdefault(m.topic, str(e))
        finally:
            for topic, err in first.items():
                warnings.warn(f"skipped {self.skipped[topic]} undecodable message(s) on {topic}; first: {err}",
                              BagWarning, stacklevel=2)

    def close(self) -> None:
        """Release files."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        for s in self._salvaged:
            if s.closer is not None:
                try:
                    s.closer.close()
                except Exception:  # mmap.close refuses while views exist; the GC closes it later
                    pass
        self._salvaged = []

    def __enter__(self) -> "BagReader":
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"BagReader({str(self.path)!r}, {self.storage}, {self.message_count} messages, "
                f"{len(self.topics)} topics, {self.duration_ns / 1e9:.3f} s)")
