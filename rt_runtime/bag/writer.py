"""`BagWriter`: rosbag2 (.mcap or .db3) writing with `rosbags`, in canonical message order."""
from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

from rosbags.rosbag2 import StoragePlugin, Writer, WriterError
from rosbags.typesys.store import Typestore

from ..outpaths import PartialStop, Staged
from .errors import BagError
from .types import default_typestore, to_cdr

FORMATS = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}


class BagWriter:
    """Writes a rosbag2 directory; messages with equal timestamps go out sorted by topic name.

    The bag is written into a temporary sibling (``.NAME.XXXX.rt-tmp/NAME``) and renamed onto
    ``path`` by ``close``: ``path`` holds a complete, readable bag or nothing. ``abort`` (and an
    exception inside ``with``) removes what was written; ``close(partial=...)`` (and ``PartialStop``
    inside ``with``) keeps it, readable, with ``partial: "true"`` and ``partial_reason`` in its
    metadata.yaml ``custom_data``.
    """

    def __init__(self, path: str | Path, format: str = "mcap", store: Typestore | None = None,
                 replace: bool = False) -> None:
        """Create the bag directory `path` in storage `format` (mcap|sqlite3); it must not exist unless
        `replace` (the old one is then replaced when this one closes, not before)."""
        self.path = Path(path)
        if format not in FORMATS:
            raise BagError(f"bag {self.path}: unknown storage format {format!r}; expected one of {sorted(FORMATS)}")
        if self.path.exists() and not replace:
            raise BagError(f"bag {self.path}: exists already; writing needs a new path")
        self.format = format
        self.store = store or default_typestore()
        self.partial: str | None = None
        try:
            self._staged = Staged(self.path, replace=replace)
        except OSError as e:
            raise BagError(f"bag {self.path}: cannot create: {e.strerror or e}") from None
        self._writer = Writer(self._staged.tmp, version=Writer.VERSION_LATEST, storage_plugin=FORMATS[format])
        try:
            self._writer.open()
        except (WriterError, OSError) as e:
            self._staged.discard()
            raise BagError(f"bag {self.path}: cannot create: {e}") from None
        self._conns: dict[str, Any] = {}
        self.topics: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        # Messages that share the newest timestamp wait here so that they can be sorted by topic:
        # the file order then does not depend on the order callers happened to write in.
        self._pending: list[tuple[str, bytes]] = []
        self._pending_t: int | None = None
        self.bytes_written = 0
        self._closed = False

    def add_topic(self, name: str, msgtype: str, msgdef: str | None = None, rihs01: str | None = None) -> None:
        """Declare a topic; the type's definition is stored in the bag (from the type store or `msgdef`)."""
        if name in self._conns:
            if self.topics[name] != msgtype:
                raise BagError(f"bag {self.path}: topic {name} already has type {self.topics[name]}, not {msgtype}")
            return
        if msgdef is None and msgtype not in self.store.types:
            raise BagError(f"bag {self.path}: topic {name}: unknown message type {msgtype!r} and no msgdef given")
        try:
            self._conns[name] = self._writer.add_connection(
                name, msgtype, typestore=self.store if msgdef is None else None,
                msgdef=msgdef, rihs01=rihs01 if msgdef is None else (rihs01 or "RIHS01_" + "0" * 64))
        except WriterError as e:
            raise BagError(f"bag {self.path}: topic {name}: {e}") from None
        self.topics[name] = msgtype
        self.counts[name] = 0

    def set_metadata(self, key: str, value: str) -> None:
        """Store a string in the bag's metadata.yaml `custom_data`."""
        self._writer.set_custom_data(key, value)

    def write(self, topic: str, t_ns: int, msg_or_cdr: Any) -> None:
        """Write a message object or raw CDR bytes on a declared topic at log time `t_ns`."""
        if topic not in self._conns:
            raise BagError(f"bag {self.path}: topic {topic} was not added (call add_topic first)")
        if isinstance(msg_or_cdr, (bytes, bytearray, memoryview)):
            raw = bytes(msg_or_cdr)
        else:
            raw = to_cdr(msg_or_cdr, self.topics[topic], self.store)
        t_ns = int(t_ns)
        if self._pending_t is not None and t_ns != self._pending_t:
            self._flush()
        self._pending_t = t_ns
        self._pending.append((topic, raw))

    def _flush(self) -> None:
        t = self._pending_t
        # sort() is stable: same-topic messages keep the order they were written in.
        for topic, raw in sorted(self._pending, key=lambda p: p[0]):
            self._writer.write(self._conns[topic], t, raw)
            self.counts[topic] += 1
            self.bytes_written += len(raw)
        self._pending.clear()
        self._pending_t = None

    def close(self, partial: str | None = None) -> None:
        """Flush and finish the bag (index, metadata.yaml) and rename it onto its path.

        ``partial``: why the bag stops early (an interrupt); it is recorded in the metadata's
        ``custom_data`` as ``partial: "true"`` and ``partial_reason``, and the bag stays readable.
        """
        if self._closed:
            return
        try:
            self._flush()
            if partial is not None:
                self.partial = partial
                self._writer.set_custom_data("partial", "true")
                self._writer.set_custom_data("partial_reason", partial)
            self._writer.close()
            self._closed = True
            self._staged.commit()
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Stop writing and remove what was written (nothing appears at the bag's path)."""
        if not self._closed:
            self._closed = True
            try:
                self._writer.abort()
            finally:
                self._staged.discard()
        else:
            self._staged.discard()   # closed but not renamed: a failed commit

    def __enter__(self) -> "BagWriter":
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if et is None:
            self.close()
        elif isinstance(e, PartialStop):
            self.close(partial=str(e))
        else:
            self.abort()
