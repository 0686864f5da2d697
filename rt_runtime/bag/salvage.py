"""Reading what is left of a damaged storage file (truncated .mcap or .db3) without its index.

`rosbags` needs an intact MCAP footer/summary or a well-formed SQLite file. A recording cut short
(power loss, full disk) has neither, so these scanners walk the file from the front, keep every
complete message and report the byte offset where the readable part ends.
"""
from __future__ import annotations

import mmap
import os
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MCAP_MAGIC = b"\x89MCAP0\r\n"


@dataclass
class Salvaged:
    """The readable part of one storage file: topics, msgdefs and messages in file order."""

    path: Path
    size: int
    stopped_at: int  # byte offset where reading stopped (== size when the file ended cleanly)
    reason: str
    topics: dict[str, str] = field(default_factory=dict)
    msgdefs: dict[str, tuple[str, str]] = field(default_factory=dict)  # msgtype -> (encoding, text)
    # (t_ns, topic, data-or-locator); data is fetched lazily through `fetch` where it is a locator.
    entries: list[tuple[int, str, Any]] = field(default_factory=list)
    fetch: Any = None
    closer: Any = None


def _str(buf: memoryview, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<I", buf, pos)
    if pos + 4 + n > len(buf):
        raise ValueError("string overruns record")
    return bytes(buf[pos + 4:pos + 4 + n]).decode(), pos + 4 + n


class _McapScan:
    def __init__(self, out: Salvaged) -> None:
        self.out = out
        self.schemas: dict[int, str] = {}
        self.channels: dict[int, str] = {}

    def records(self, buf: memoryview, start: int, end: int, base: int, top: bool) -> int:
        """Parse records in buf[start:end]; return the offset after the last complete record."""
        pos = start
        while pos < end:
            if top and end - pos >= 8 and bytes(buf[pos:pos + 8]) == MCAP_MAGIC:
                return end  # end magic: the file ended cleanly
            if end - pos < 9:
                self.out.reason = f"record header cut at byte {base + pos}"
                return pos
            op = buf[pos]
            (n,) = struct.unpack_from("<Q", buf, pos + 1)
            body = pos + 9
            if op == 0 or op > 0x11:
                self.out.reason = f"invalid record opcode 0x{op:02x} at byte {base + pos}"
                return pos
            if body + n > end:
                reason = f"record 0x{op:02x} at byte {base + pos} needs {n} bytes, {end - body} left"
                if op == 0x06 and top:  # a chunk cut short: its complete inner records are still good
                    inner_end = self._chunk(buf, body, end, base, partial=True)
                    pos = max(pos, inner_end or 0)
                self.out.reason = reason
                return pos
            try:
                if op == 0x03:
                    sid = struct.unpack_from("<H", buf, body)[0]
                    name, p = _str(buf, body + 2)
                    enc, p = _str(buf, p)
                    text, _ = _str(buf, p)
                    self.schemas[sid] = name
                    self.out.msgdefs[name] = (enc, text)
                elif op == 0x04:
                    cid, sid = struct.unpack_from("<HH", buf, body)
                    topic, _ = _str(buf, body + 4)
                    self.channels[cid] = topic
                    self.out.topics[topic] = self.schemas.get(sid, "")
                elif op == 0x05:
                    cid, _seq, log_t = struct.unpack_from("<HIQ", buf, body)
                    if cid in self.channels:
                        self.out.entries.append((log_t, self.channels[cid], buf[body + 22:body + n]))
                elif op == 0x06 and top:
                    if self._chunk(buf, body, body + n, base, partial=False) is None:
                        return pos
            except (struct.error, ValueError, UnicodeDecodeError) as e:
                self.out.reason = f"corrupt record 0x{op:02x} at byte {base + pos}: {e}"
                return pos
            pos = body + n
        return pos

    def _chunk(self, buf: memoryview, body: int, end: int, base: int, partial: bool) -> int | None:
        """Parse a chunk's records; return the file offset after its last complete one (None: unreadable)."""
        if end - body < 36:
            return None
        usize, _crc = struct.unpack_from("<QI", buf, body + 16)
        comp, p = _str(buf, body + 28)
        (csize,) = struct.unpack_from("<Q", buf, p)
        data_start = p + 8
        avail = min(csize, end - data_start)
        if comp == "":
            inner = buf[data_start:data_start + avail]
        elif comp == "zstd":
            try:
                from compression import zstd  # type: ignore[import-not-found]
            except ImportError:
                from backports import zstd  # type: ignore[import-not-found,no-redef]
            d = zstd.ZstdDecompressor()
            try:
                inner = memoryview(d.decompress(bytes(buf[data_start:data_start + avail])))
            except Exception:
                return None
        elif comp == "lz4" and not partial:
            from lz4.frame import decompress  # type: ignore[import-untyped]
            inner = memoryview(decompress(bytes(buf[data_start:data_start + avail])))
        else:
            self.out.reason = f"chunk compression {comp!r} cannot be read partially"
            return None
        done = self.records(inner, 0, min(len(inner), usize), base + data_start, top=False)
        # Offsets inside a compressed chunk have no file position: report the chunk's start.
        return base + data_start + done if comp == "" else base + body - 9


def salvage_mcap(path: Path) -> Salvaged:
    """Scan an MCAP file front to back; uncompressed data stays in a memory map (no copy)."""
    size = path.stat().st_size
    out = Salvaged(path, size, 0, "")
    with path.open("rb") as fh:
        if size == 0:
            raise ValueError("file is empty")
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    buf = memoryview(mm)
    if bytes(buf[:8]) != MCAP_MAGIC:
        found = bytes(buf[:8]).hex(" ")
        buf.release()
        mm.close()
        raise ValueError(f"not an MCAP file: expected magic {MCAP_MAGIC.hex(' ')}, found {found}")
    if size == len(MCAP_MAGIC):
        buf.release()
        mm.close()
        raise ValueError("the file ends after its magic: no records")
    out.stopped_at = _McapScan(out).records(buf, 8, size, 0, top=True)
    if out.stopped_at >= size:
        out.reason = "end of file"
    out.closer = mm  # memoryviews in entries keep the map alive; closed with the reader
    return out


_VFS: Any = None


def _padding_vfs() -> str:
    """An apsw VFS that reads a truncated SQLite file as if its missing pages were zeros."""
    global _VFS
    if _VFS is not None:
        return "rt_runtime_pad"
    import apsw

    class PadFile:
        def __init__(self, name: Any, flags: Any) -> None:
            fname = name.filename() if hasattr(name, "filename") else str(name)
            self.fh = open(fname, "rb")
            self.size = os.fstat(self.fh.fileno()).st_size
            hdr = self.fh.read(100)
            page = struct.unpack(">H", hdr[16:18])[0] if len(hdr) >= 32 else 4096
            page = 65536 if page == 1 else page
            pages = struct.unpack(">I", hdr[28:32])[0] if len(hdr) >= 32 else 0
            self.full = max(self.size, page * pages)

        def xRead(self, amount: int, offset: int) -> bytes:
            self.fh.seek(offset)
            data = self.fh.read(amount)
            return data + bytes(amount - len(data))

        def xFileSize(self) -> int:
            return self.full

        def xClose(self) -> None:
            self.fh.close()

        def xLock(self, level: int) -> None:
            pass

        def xUnlock(self, level: int) -> None:
            pass

        def xCheckReservedLock(self) -> bool:
            return False

        def xFileControl(self, op: int, ptr: int) -> bool:
            return False

        def xSectorSize(self) -> int:
            return 4096

        def xDeviceCharacteristics(self) -> int:
            return 0

        def xSync(self, flags: int) -> None:
            pass

        def xWrite(self, data: bytes, offset: int) -> None:
            raise OSError("read-only")

        def xTruncate(self, n: int) -> None:
            raise OSError("read-only")

    class PadVFS(apsw.VFS):
        def __init__(self) -> None:
            super().__init__("rt_runtime_pad", "")

        def xOpen(self, name: Any, flags: Any) -> Any:
            return PadFile(name, flags)

    _VFS = PadVFS()
    return "rt_runtime_pad"


def salvage_sqlite(path: Path) -> Salvaged:
    """Read rows of a damaged .db3 in insertion order until the first unreadable page."""
    import apsw

    size = path.stat().st_size
    with path.open("rb") as fh:
        hdr = fh.read(100)
    magic = hdr[:16]
    if magic != b"SQLite format 3\x00":
        raise ValueError(f"not an SQLite file: expected magic 'SQLite format 3', found {magic!r}")
    con = apsw.Connection(f"file:{path}?immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
                          vfs=_padding_vfs())
    out = Salvaged(path, size, size, "end of file")
    try:
        ids = {tid: (name, typ) for tid, name, typ in con.execute("SELECT id, name, type FROM topics")}
        try:
            for typ, enc, text in con.execute(
                    "SELECT topic_type, encoding, encoded_message_definition FROM message_definitions"):
                out.msgdefs[typ] = (enc, text)
        except apsw.Error:
            pass  # older schemas have no definitions table
    except apsw.Error as e:
        con.close()
        raise ValueError(f"cannot read the topics table: {e}") from None
    out.topics = {name: typ for name, typ in ids.values()}
    last = 0
    try:
        # Reading `data` too proves every row's overflow pages are present before we promise it.
        for rowid, tid, t, _data in con.execute("SELECT id, topic_id, timestamp, data FROM messages ORDER BY id"):
            if tid in ids:
                out.entries.append((t, ids[tid][0], rowid))
            last = rowid
    except apsw.Error as e:
        page = struct.unpack(">H", hdr[16:18])[0] if len(hdr) >= 32 else 0
        expected = (65536 if page == 1 else page) * (struct.unpack(">I", hdr[28:32])[0] if len(hdr) >= 32 else 0)
        out.reason = (f"file has {size} of {expected} bytes; rows unreadable after message row {last} "
                      f"({e.__class__.__name__}: {e})")
    out.fetch = lambda rowid: bytes(next(con.execute("SELECT data FROM messages WHERE id = ?", (rowid,)))[0])
    out.closer = con
    return out



def salvaged_messages(salvaged: list[Salvaged], wanted: set[str], start_ns: int | None,
                      stop_ns: int | None) -> Iterator[tuple[int, str, bytes | memoryview, int]]:
    """(t_ns, topic, data, per-topic seq) of the salvaged files' `wanted` messages in [start_ns, stop_ns),
    ordered by time, topic, then file and position (seq counts the messages outside the range too)."""
    items = [(e[0], e[1], i, k, e[2]) for k, s in enumerate(salvaged)
             for i, e in enumerate(s.entries) if e[1] in wanted]
    items.sort(key=lambda x: x[:4])
    seq: Counter[str] = Counter()
    for t, topic, _i, k, loc in items:
        if (start_ns is not None and t < start_ns) or (stop_ns is not None and t >= stop_ns):
            seq[topic] += 1
            continue
        fetch = salvaged[k].fetch
        raw = fetch(loc) if fetch is not None else bytes(loc)
        yield t, topic, raw, seq[topic]
        seq[topic] += 1
