"""`open_bag` / `BagReader`: rosbag2 (.mcap, .db3) reading in a stable, total message order.

Order: log timestamp, then topic name, then the topic's own file order (`seq`). The same bag
therefore always yields the same sequence, whichever storage plugin or writer produced it.

An indexed MCAP is read chunk by chunk here (as ``rosbags`` does, lazily, merged by time), so that a
chunk whose CRC does not match its records, or that does not decompress, damages only its own
messages: they are skipped with one ``BagWarning`` per chunk, or yielded as ``BagMessage`` with
``damage`` set when asked (``messages(damaged=True)``, the replay's feed, which counts them bad).
"""
from __future__ import annotations

import heapq
import struct
import warnings
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

from rosbags.interfaces import MessageDefinitionFormat
from rosbags.rosbag2 import Reader, ReaderError
from rosbags.rosbag2 import storage_mcap as _mcap
from rosbags.typesys import get_types_from_idl, get_types_from_msg
from rosbags.typesys.store import Typestore

from .errors import BagError, BagWarning, CodecError
from .salvage import Salvaged, salvage_mcap, salvage_sqlite
from .types import new_typestore

STORAGE_SUFFIXES = {".mcap": "mcap", ".db3": "sqlite3"}
# Damaged chunks already reported in this process (by text: bag and byte): a replay that reports one
# is not followed by the same warning from each later reader of that bag (the quality measures).
_DAMAGE_REPORTED: set[str] = set()
# A message on its way to ``BagMessage``: log time, topic, CDR bytes (or a view of them), damage (kind, why).
_Item = tuple[int, str, bytes | memoryview, tuple[str, str] | None]
# A chunk's item for the merge by time: log time, the chunk's byte, topic (None: the chunk's start marker), ...
_ChunkItem = tuple[int, int, str | None, bytes | memoryview, tuple[str, str] | None]


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


def _by_time(item: tuple[Any, ...]) -> tuple[int, int]:
    """Merge key of chunk items: log time, then the chunk's position in the file (as rosbags orders)."""
    return item[0], item[1]


_RECORD = struct.Struct("<BQ")          # op, length
_MESSAGE = struct.Struct("<HIQQ")       # channel id, sequence, log time, publish time (then the data)


def _chunk_records(raw: bytes, at: int, cmap: dict[int, str], lo: int, hi: int) -> list[_ChunkItem]:
    """The wanted message records of a decompressed chunk (starting at byte ``at``), in file order;
    each message's data is a view into ``raw`` (no copy: a LiDAR sweep or an image is a megabyte)."""
    out: list[_ChunkItem] = []
    view = memoryview(raw)
    record, message = _RECORD.unpack_from, _MESSAGE.unpack_from
    pos, end = 0, len(raw)
    while pos < end:
        if pos + 9 > end:
            raise ReaderError(f"the chunk at byte {at} ends inside a record header ({end - pos} bytes left)")
        op, size = record(raw, pos)
        body, nxt = pos + 9, pos + 9 + size
        if nxt > end:
            raise ReaderError(f"the chunk at byte {at} has a record of {size} bytes at {pos}, past its {end} bytes")
        if op == 0x05:   # Message: channel id, sequence, log time, publish time, data
            if size < 22:
                raise ReaderError(f"the chunk at byte {at} has a message record of {size} bytes at {pos}")
            cid, _seq, t, _pub = message(raw, body)
            if lo <= t < hi and cid in cmap:
                out.append((t, at, cmap[cid], view[body + 22:nxt], None))
        pos = nxt
    return out


def open_bag(path: str | Path) -> "BagReader":
    """Open a rosbag2 directory, or a bare .mcap/.db3 file, for reading."""
    return BagReader(path)


def _storage_files(path: Path) -> tuple[Path, list[Path]]:
    """(what rosbags should open, the storage files inside it)."""
    if not path.exists():
        raise BagError(f"bag {path}: no such file or directory")
    if path.is_file():
        if path.suffix not in STORAGE_SUFFIXES:
            raise BagError(f"bag {path}: expected a rosbag2 directory, .mcap or .db3 file; "
                           f"found a {path.suffix or 'suffix-less'} file")
        return path, [path]
    files = sorted(p for p in path.iterdir() if p.suffix in STORAGE_SUFFIXES)
    if (path / "metadata.yaml").exists():
        return path, files
    if len(files) == 1:  # a directory whose metadata.yaml was lost still holds a readable file
        return files[0], files
    raise BagError(f"bag {path}: expected metadata.yaml or one .mcap/.db3 file in the directory; "
                   f"found {len(files)} storage files")


def _one_line(text: str, limit: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _about_metadata(error: ReaderError) -> bool:
    """Whether rosbags refused the bag for its metadata.yaml (not for its storage files)."""
    text = str(error).lower()
    return "metadata" in text or "yaml" in text


def _metadata_problem(path: Path) -> str | None:
    """What makes a bag's metadata.yaml unusable before rosbags reads it: too big, not text, aliases
    that expand it without bound. None: leave the rest to rosbags (it names a syntax error itself)."""
    meta = path / "metadata.yaml"
    if not path.is_dir() or not meta.is_file():
        return None
    from ..config.yamlfile import ConfigError, parse_yaml_text, read_text_limited

    try:
        text = read_text_limited(meta, "a rosbag2 metadata.yaml")
    except ConfigError as e:
        return str(e).split(": ", 1)[1]
    if "*" not in text and "<<" not in text:
        return None   # no aliases: nothing to expand
    try:
        parse_yaml_text(text, "metadata.yaml")
    except ConfigError as e:
        why = str(e).split(": ", 1)[1]
        return why if "alias" in why or "nested" in why else None
    return None


def _metadata_syntax(path: Path) -> str | None:
    """The line and what is wrong when metadata.yaml is not YAML (rosbags' own message spans lines)."""
    from ..config.yamlfile import ConfigError, parse_yaml_text, read_text_limited

    try:
        parse_yaml_text(read_text_limited(path / "metadata.yaml"), "metadata.yaml")
    except ConfigError as e:
        return str(e).split(": ", 1)[1]
    return None


class BagReader:
    """An open bag: topic table, time range, ordered raw messages and decoding."""

    def __init__(self, path: str | Path) -> None:
        """Open `path`; a damaged storage file is scanned for what is readable (see `truncated`)."""
        self.path = Path(path)
        target, self.files = _storage_files(self.path)
        self.storage = STORAGE_SUFFIXES.get(self.files[0].suffix, "") if self.files else ""
        self.store: Typestore = new_typestore()
        self.truncated: str | None = None
        self.metadata_problem: str | None = None   # a broken metadata.yaml (the storage files were read directly)
        self.skipped: Counter[str] = Counter()
        self.metadata: dict[str, str] = {}
        self._reader: Reader | None = None
        self._salvaged: list[Salvaged] = []
        msgdefs: dict[str, tuple[str, str]] = {}
        problem = _metadata_problem(self.path) if target == self.path else None
        if problem is None:
            try:
                self._reader = Reader(target)
                self._reader.open()
            except (ReaderError, OSError, KeyError, ValueError) as e:
                self._reader = None
                if isinstance(e, ReaderError) and _about_metadata(e):
                    problem = _metadata_syntax(self.path) or _one_line(str(e))
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
            except (ReaderError, OSError, KeyError, ValueError) as e:
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
        for f in files:
            try:
                s = salvage_mcap(f) if f.suffix == ".mcap" else salvage_sqlite(f)
            except (ValueError, OSError) as e:
                raise BagError(f"bag {self.path}: cannot read {f.name}: {e} (reader said: {error})") from None
            except Exception as e:  # apsw raises its own hierarchy for unreadable files
                raise BagError(f"bag {self.path}: cannot read {f.name}: {e} (reader said: {error})") from None
            self._salvaged.append(s)
        got = sum(len(s.entries) for s in self._salvaged)
        if not got and not any(s.topics for s in self._salvaged):
            raise BagError(f"bag {self.path}: no readable messages: {error}") from None
        if self.metadata_problem is not None and all(s.stopped_at >= s.size for s in self._salvaged):
            return   # every storage file read to its end: not truncated (the caller names the metadata)
        where = "; ".join(f"{s.path.name}: stopped at byte {s.stopped_at} of {s.size} ({s.reason})"
                          for s in self._salvaged)
        expected = self._expected_count()
        of = f" of {expected}" if expected else ""
        self.truncated = f"bag {self.path} is truncated or damaged: read {got}{of} messages; {where}"
        if self.metadata_problem is not None:
            self.truncated += f"; and its {self.metadata_problem.split(': ', 1)[1]}"
        warnings.warn(self.truncated, BagWarning, stacklevel=3)

    def _expected_count(self) -> int | None:
        meta = self.path / "metadata.yaml" if self.path.is_dir() else None
        if meta is None or not meta.exists():
            return None
        try:
            from ruamel.yaml import YAML
            return int(YAML(typ="safe").load(meta.read_text())["rosbag2_bagfile_information"]["message_count"])
        except Exception:
            return None

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
                    if not damaged and m.damage[1] not in _DAMAGE_REPORTED:
                        warnings.warn(f"{m.damage[1]}; its messages are skipped", BagWarning, stacklevel=2)
                    _DAMAGE_REPORTED.add(m.damage[1])
                    if not damaged:
                        continue
                yield m
        else:
            yield from self._from_salvage(wanted, start_ns, stop_ns)

    def _indexed(self, wanted: set[str], start_ns: int | None, stop_ns: int | None) -> Iterator[_Item]:
        assert self._reader is not None
        conns = [c for c in self._reader.connections if c.topic in wanted]
        if not conns:
            return
        storages = self._mcap_storages()
        last = None
        try:
            if storages is not None:
                for storage in storages:   # one file after the other, as rosbags reads a split bag
                    for item in self._mcap_messages(storage, wanted, start_ns, stop_ns):
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

    def _mcap_storages(self) -> list[Any] | None:
        """The MCAP files to read chunk by chunk here; None: rosbags reads (db3, unindexed MCAP,
        per-message compression)."""
        inner = getattr(self._reader, "storage", None)
        storages = getattr(inner, "storages", None)
        if storages is None:
            storages = [inner]
        elif getattr(getattr(inner, "metadata", None), "compression_mode", None) == "message":
            return None
        if not storages or not all(isinstance(s, _mcap.McapReader) and s.chunks and s.bio is not None
                                   for s in storages):
            return None
        return storages

    def _mcap_messages(self, storage: Any, wanted: set[str], start_ns: int | None,
                       stop_ns: int | None) -> Iterator[_Item]:
        """One indexed MCAP file's messages by time; a chunk is read when the merge reaches its start
        (as in rosbags), and a damaged chunk yields its messages (from its message index) as damaged."""
        cmap = {c.id: c.topic for c in storage.connections if c.topic in wanted}
        lo = 0 if start_ns is None else start_ns
        hi = _mcap.MAXSIZE if stop_ns is None else stop_ns
        sources = [self._chunk(storage, c, cmap, lo, hi) for c in storage.chunks
                   if lo <= c.message_end_time and c.message_start_time < hi
                   and any(c.channel_count.get(cid, 0) for cid in cmap)]
        for t, _at, topic, raw, damage in heapq.merge(*sources, key=_by_time):
            if topic is not None:   # None: a chunk's start marker
                yield t, topic, raw, damage

    def _chunk(self, storage: Any, chunk: Any, cmap: dict[int, str], lo: int, hi: int) -> Iterator[_ChunkItem]:
        """A chunk's wanted messages in time order, after a marker at its start time (nothing read yet)."""
        at = chunk.chunk_start_offset
        yield chunk.message_start_time, at, None, b"", None
        bio = storage.bio
        bio.seek(at + 9 + 24)   # op, length; start, end, uncompressed size; then the CRC
        (crc,) = struct.unpack("<I", _mcap.read_exact(bio, 4))
        bio.seek(at + 9 + 40 + len(chunk.compression))
        data = _mcap.read_exact(bio, chunk.compressed_size)
        if chunk.compression not in _mcap.DECOMPRESSORS:
            raise ReaderError(f"the chunk at byte {at} has unsupported compression {chunk.compression!r}")
        damage = None
        try:
            raw = _mcap.decompress(data, chunk.compression, chunk.uncompressed_size, 0)
        except Exception as e:  # each decompressor raises its own errors
            damage = ("chunk", f"bag {self.path}: the {chunk.compression} chunk at byte {at} does not decompress "
                               f"({_one_line(str(e), 120)})")
        else:
            # MCAP: a CRC32 of the uncompressed records, 0 when the writer computed none (rosbags writes 0)
            if crc and (got := zlib.crc32(raw)) != crc:
                damage = ("crc", f"bag {self.path}: the chunk at byte {at} fails its CRC check "
                                 f"(stored {crc:#010x}, computed {got:#010x})")
        if damage is not None:
            yield from self._damaged(storage, chunk, cmap, lo, hi, damage)
            return
        yield from sorted(_chunk_records(raw, at, cmap, lo, hi), key=_by_time)

    def _damaged(self, storage: Any, chunk: Any, cmap: dict[int, str], lo: int, hi: int,
                 damage: tuple[str, str]) -> list[_ChunkItem]:
        """Stand-ins for a damaged chunk's wanted messages, at their times in its message index (outside
        the chunk); if that is damaged too, one per message the summary counts, at the chunk's start."""
        at, bio = chunk.chunk_start_offset, storage.bio
        found: list[tuple[int, int, str]] = []
        try:
            for cid, offset in chunk.message_index_offsets.items():
                if cid not in cmap:
                    continue
                bio.seek(offset)
                op, _n, got, size = struct.unpack("<BQHI", _mcap.read_exact(bio, 15))
                if op != 0x07 or got != cid:
                    raise ReaderError(f"no message index for channel {cid} at byte {offset}")
                found += [(t, rel, cmap[cid]) for t, rel in struct.iter_unpack("<QQ", _mcap.read_exact(bio, size))
                          if lo <= t < hi]
        except (ReaderError, struct.error, OSError):
            t0 = chunk.message_start_time
            found = [(t0, 0, cmap[cid]) for cid, n in chunk.channel_count.items() if cid in cmap and lo <= t0 < hi
                     for _ in range(n)]
        found.sort(key=lambda f: (f[0], f[1]))
        return [(t, at, topic, b"", damage) for t, _rel, topic in found]

    def _ordered(self, stream: Iterator[_Item]) -> Iterator[BagMessage]:
        # rosbags yields in timestamp order with ties in file order; we sort each tie group by
        # topic (stable sort keeps file order within a topic) and number messages per topic.
        seq: Counter[str] = Counter()
        group: list[_Item] = []
        for item in stream:
            if group and item[0] != group[0][0]:
                yield from self._emit(group, seq)
                group = []
            group.append(item)
        yield from self._emit(group, seq)

    def _emit(self, group: list[_Item], seq: Counter[str]) -> Iterator[BagMessage]:
        if len(group) > 1:
            group.sort(key=lambda g: g[1])
        for t, topic, raw, damage in group:
            yield BagMessage(topic, t, self.topics[topic], raw, seq[topic], damage)
            seq[topic] += 1

    def _from_salvage(self, wanted: set[str], start_ns: int | None, stop_ns: int | None) -> Iterator[BagMessage]:
        items = [(e[0], e[1], i, k, e[2]) for k, s in enumerate(self._salvaged)
                 for i, e in enumerate(s.entries) if e[1] in wanted]
        items.sort(key=lambda x: x[:4])
        seq: Counter[str] = Counter()
        for t, topic, _i, k, loc in items:
            if (start_ns is not None and t < start_ns) or (stop_ns is not None and t >= stop_ns):
                seq[topic] += 1
                continue
            fetch = self._salvaged[k].fetch
            raw = fetch(loc) if fetch is not None else bytes(loc)
            yield BagMessage(topic, t, self.topics[topic], raw, seq[topic])
            seq[topic] += 1

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
