"""The compact trace file: event columns plus the metadata needed to read them (.rttrace, npz).

Written by ``--trace FILE`` on ``replay`` and ``run``; read by ``rt-runtime analyze``. The
metadata names tasks (ids in the ``task`` column), each task's op names (op indices in ``a`` of
OP_START/OP_END), the clock and the configuration the run used.
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..outpaths import Staged
from .ring import FIELDS, TraceColumns, TraceRing

FORMAT = "rt_runtime.trace/1"


class TraceFileError(ValueError):
    """A trace file that cannot be read; names the file and what is wrong."""


class TraceWriter:
    """Collects drained batches from a ring and writes them as one file at close."""

    def __init__(self, path: str | Path, ring: TraceRing, meta: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.ring = ring
        self.meta: dict[str, Any] = dict(meta or {})
        self._parts: list[TraceColumns] = []

    def drain(self) -> None:
        """Move what the ring holds into memory; call off the hot path (between cycles)."""
        cols = self.ring.drain()
        if len(cols):
            self._parts.append(cols)

    def close(self) -> Path:
        """Drain what is left and write the file; returns its path."""
        self.drain()
        cols = TraceColumns.concat(self._parts, self.ring.tasks)
        save_trace(self.path, cols, {**self.meta, "lost_events": self.ring.lost})
        return self.path


def save_trace(path: str | Path, cols: TraceColumns, meta: dict[str, Any]) -> None:
    """Write columns and metadata to ``path`` (compressed npz), atomically.

    The file is written beside ``path`` and renamed over it once complete: ``path`` holds the old
    trace or the new one, never a torn file; on an error nothing is left behind. A run cut short
    says so in its metadata (``"partial": true``, ``"interrupted"``).
    """
    header = {"format": FORMAT, "tasks": cols.tasks, **meta}
    with Staged(path, replace=True) as tmp, open(tmp, "wb") as f:
        np.savez_compressed(f, meta=np.frombuffer(json.dumps(header).encode(), np.uint8),
                            **{name: getattr(cols, name) for name in FIELDS})


ZIP_MAGIC = b"PK\x03\x04"              # a trace is an npz: a zip archive of .npy arrays
MAX_TRACE_BYTES = 4 * 1024 ** 3          # what the arrays may unpack to (about 90 million events)


def _kind_of(head: bytes) -> str:
    """What a file that is not a trace seems to be, from its first bytes (for the error message)."""
    if not head:
        return "the file is empty"
    if head.startswith(b"\x93NUMPY"):
        return "a NumPy .npy array, not an .npz archive"
    if head.startswith((b"\x89MCAP", b"SQLite format 3")):
        return "a bag's storage file; `rt-runtime replay --trace FILE` writes a trace"
    return "it does not start like the zip archive a trace is"


def load_trace(path: str | Path) -> tuple[TraceColumns, dict[str, Any]]:
    """Read a trace file written by ``save_trace``: (columns, metadata).

    Anything else is a ``TraceFileError`` with one line, "PATH: not an rt_runtime trace file (why)":
    arrays are read without pickle (a trace never holds Python objects), sizes are checked before
    anything is unpacked.
    """
    path = Path(path)
    if not path.is_file():
        raise TraceFileError(f"{path}: no such trace file")

    def bad(why: str) -> TraceFileError:
        return TraceFileError(f"{path}: not an rt_runtime trace file ({why})")

    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise TraceFileError(f"{path}: cannot read ({e.strerror or e})") from None
    if not head.startswith(ZIP_MAGIC):
        raise bad(_kind_of(head))
    try:
        with zipfile.ZipFile(path) as zf:
            names = {i.filename.removesuffix(".npy"): i for i in zf.infolist()}
        missing = [n for n in ("meta", *FIELDS) if n not in names]
        if missing:
            raise bad(f"a zip archive without the {missing[0]!r} array")
        size = sum(i.file_size for i in names.values())
        if size > MAX_TRACE_BYTES:
            raise bad(f"its arrays unpack to {size / 1024 ** 3:.1f} GiB, more than {MAX_TRACE_BYTES // 1024 ** 3} GiB")
        with np.load(path, allow_pickle=False) as z:
            meta = z["meta"]
            cols = [z[name] for name in FIELDS]
        if meta.dtype != np.uint8 or meta.ndim != 1:
            raise bad(f"its metadata is a {meta.dtype} array of shape {meta.shape}, not JSON bytes")
        header = json.loads(meta.tobytes().decode("utf-8"))
    except TraceFileError:
        raise
    except ValueError as e:
        if "allow_pickle" in str(e) or "Object arrays" in str(e):
            raise bad("it holds pickled Python objects, which a trace never does; they were not loaded") from None
        raise bad(f"damaged: {type(e).__name__}: {str(e)[:160]}") from None
    except Exception as e:  # noqa: BLE001 - zipfile, zlib and numpy raise many kinds on a damaged file
        raise bad(f"damaged: {type(e).__name__}: {str(e)[:160]}") from None
    if not isinstance(header, dict):
        raise bad(f"its metadata is a JSON {type(header).__name__}, not an object")
    if header.get("format") != FORMAT:
        raise TraceFileError(f"{path}: format expected {FORMAT!r}, found {str(header.get('format'))[:80]!r}")
    tasks = header.get("tasks")
    if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
        raise bad("its metadata has no list of task names")
    if header.get("config") is not None and not isinstance(header["config"], str):
        raise bad("its metadata's 'config' is not a file name")
    for name, c in zip(FIELDS, cols):
        if c.ndim != 1 or c.dtype.kind not in "iu":
            raise bad(f"column {name!r} is a {c.dtype} array of shape {c.shape}, not integers")
    if len({len(c) for c in cols}) != 1:
        raise TraceFileError(f"{path}: columns of different lengths (file corrupt)")
    cols = [np.asarray(c, np.int64) for c in cols]
    return TraceColumns(*cols, tasks=list(tasks)), header
