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
    """Write columns and metadata to ``path`` (compressed npz)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"format": FORMAT, "tasks": cols.tasks, **meta}
    with open(path, "wb") as f:
        np.savez_compressed(f, meta=np.frombuffer(json.dumps(header).encode(), np.uint8),
                            **{name: getattr(cols, name) for name in FIELDS})


def load_trace(path: str | Path) -> tuple[TraceColumns, dict[str, Any]]:
    """Read a trace file written by ``save_trace``: (columns, metadata)."""
    path = Path(path)
    if not path.is_file():
        raise TraceFileError(f"{path}: no such trace file")
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(bytes(z["meta"]).decode())
            cols = [np.asarray(z[name], np.int64) for name in FIELDS]
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError) as e:
        raise TraceFileError(f"{path}: not a readable rt_runtime trace ({e})") from None
    if header.get("format") != FORMAT:
        raise TraceFileError(f"{path}: format expected {FORMAT!r}, found {header.get('format')!r}")
    if len({len(c) for c in cols}) != 1:
        raise TraceFileError(f"{path}: columns of different lengths (file corrupt)")
    return TraceColumns(*cols, tasks=list(header["tasks"])), header
