"""Reading an indexed MCAP file chunk by chunk, merged by time, so that a damaged chunk loses only its own messages.

``rosbags`` reads an indexed MCAP lazily: a chunk is decompressed when the merge by log time reaches
its start. This module does the same with its own chunk reader, so that a chunk whose CRC does not
match its records, or that does not decompress, yields its messages (found in its message index,
outside the chunk) as damaged stand-ins instead of ending the whole read.
"""
from __future__ import annotations

import heapq
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rosbags.rosbag2 import Reader, ReaderError
from rosbags.rosbag2 import storage_mcap as _mcap

from .errors import one_line

# A message on its way to ``BagMessage``: log time, topic, CDR bytes (or a view of them), damage (kind, why).
Item = tuple[int, str, bytes | memoryview, tuple[str, str] | None]
# A chunk's item for the merge by time: log time, the chunk's byte, topic (None: the chunk's start marker), ...
_ChunkItem = tuple[int, int, str | None, bytes | memoryview, tuple[str, str] | None]

_RECORD = struct.Struct("<BQ")          # op, length
_MESSAGE = struct.Struct("<HIQQ")       # channel id, sequence, log time, publish time (then the data)


def _by_time(item: tuple[Any, ...]) -> tuple[int, int]:
    """Merge key of chunk items: log time, then the chunk's position in the file (as rosbags orders)."""
    return item[0], item[1]


def mcap_storages(reader: Reader | None) -> list[Any] | None:
    """The MCAP files of an open rosbags reader to read chunk by chunk here; None: rosbags reads (db3,
    unindexed MCAP, per-message compression)."""
    inner = getattr(reader, "storage", None)
    storages = getattr(inner, "storages", None)
    if storages is None:
        storages = [inner]
    elif getattr(getattr(inner, "metadata", None), "compression_mode", None) == "message":
        return None
    if not storages or not all(isinstance(s, _mcap.McapReader) and s.chunks and s.bio is not None
                               for s in storages):
        return None
    return storages


def mcap_messages(storage: Any, bag: Path, wanted: set[str], start_ns: int | None,
                  stop_ns: int | None) -> Iterator[Item]:
    """One indexed MCAP file's messages by time; a chunk is read when the merge reaches its start
    (as in rosbags), and a damaged chunk yields its messages (from its message index) as damaged."""
    cmap = {c.id: c.topic for c in storage.connections if c.topic in wanted}
    lo = 0 if start_ns is None else start_ns
    hi = _mcap.MAXSIZE if stop_ns is None else stop_ns
    sources = [_chunk(storage, bag, c, cmap, lo, hi) for c in storage.chunks
               if lo <= c.message_end_time and c.message_start_time < hi
               and any(c.channel_count.get(cid, 0) for cid in cmap)]
    for t, _at, topic, raw, damage in heapq.merge(*sources, key=_by_time):
        if topic is not None:   # None: a chunk's start marker
            yield t, topic, raw, damage


def _chunk(storage: Any, bag: Path, chunk: Any, cmap: dict[int, str], lo: int, hi: int) -> Iterator[_ChunkItem]:
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
        damage = ("chunk", f"bag {bag}: the {chunk.compression} chunk at byte {at} does not decompress "
                           f"({one_line(str(e), 120)})")
    else:
        # MCAP: a CRC32 of the uncompressed records, 0 when the writer computed none (rosbags writes 0)
        if crc and (got := zlib.crc32(raw)) != crc:
            damage = ("crc", f"bag {bag}: the chunk at byte {at} fails its CRC check "
                             f"(stored {crc:#010x}, computed {got:#010x})")
    if damage is not None:
        yield from _damaged(storage, chunk, cmap, lo, hi, damage)
        return
    yield from sorted(_chunk_records(raw, at, cmap, lo, hi), key=_by_time)


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


def _damaged(storage: Any, chunk: Any, cmap: dict[int, str], lo: int, hi: int,
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
