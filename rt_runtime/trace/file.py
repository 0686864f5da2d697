"""The compact trace file: event columns plus the metadata needed to read them (.rttrace, npz).

Written by ``--trace FILE`` on ``replay`` and ``run``; read by ``rt-runtime analyze``. The
metadata names tasks (ids in the ``task`` column), each task's op names (op indices in ``a`` of
OP_START/OP_END), the clock and the configuration the run used.
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

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


# The metadata keys a reader uses and the JSON shape of each (``StackRuntime.trace_meta``, a cut run's keys):
# a type, a tuple of types, an integer _Range, [SHAPE] (a list), {str: SHAPE} (an object of any keys) or
# {"key": SHAPE} (those keys, each optional). null stands for "not known" only where a scalar is expected.
class _Range(NamedTuple):
    lo: int
    hi: int


_NS, _ANY_INT, _NAMES = _Range(0, 2 ** 62), _Range(-2 ** 62, 2 ** 62), {str: [str]}
META_SHAPES: dict[str, Any] = {
    "config": str, "policy": str, "clock": str, "timing": str, "device": str, "bag": str, "interrupted": str,
    "workers": _Range(1, 1024), "lost_events": _NS, "partial": bool, "live": bool, "bag_duration_s": (int, float),
    "ops": _NAMES, "fallback_ops": _NAMES, "graphs": {str: {str: _NS}},
    "tasks_config": {str: {"period_ns": _Range(1, 2 ** 62), "deadline_ns": _Range(1, 2 ** 62), "wcet_ns": _NS,
                           "priority": (_ANY_INT, type(None)), "rank": _ANY_INT, "trigger": (str, type(None))}},
}
_WORDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false", type(None): "null"}


def _misfit(value: Any, shape: Any, where: str) -> tuple[str, Any, Any] | None:
    """The first place where ``value`` does not have ``shape``: (where, the shape, the value found) or None."""
    if isinstance(shape, list):
        if not isinstance(value, list):
            return where, shape, value
        return next((m for i, v in enumerate(value) if (m := _misfit(v, shape[0], f"{where}[{i}]"))), None)
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return where, shape, value
        if str in shape:
            return next((m for k, v in value.items() if (m := _misfit(v, shape[str], f"{where}[{k}]"))), None)
        return next((m for k, v in value.items() if k in shape and (m := _misfit(v, shape[k], f"{where}.{k}"))),
                    None)
    if isinstance(shape, tuple) and not isinstance(shape, _Range):
        fits = any(_misfit(value, s, where) is None for s in shape)
        return None if fits else (where, shape, value)
    if isinstance(value, bool) and shape is not bool:   # JSON true is no number here
        return where, shape, value
    if isinstance(shape, _Range):
        return None if isinstance(value, int) and shape.lo <= value <= shape.hi else (where, shape, value)
    return None if isinstance(value, shape) else (where, shape, value)


def _describe(shape: Any) -> str:
    """A shape in words: "an object (name -> a list of strings)"."""
    if isinstance(shape, list):
        return f"a list of {_describe(shape[0]).split(' ', 1)[1]}s"
    if isinstance(shape, dict):
        return f"an object (name -> {_describe(shape[str])})" if str in shape else \
            f"an object with {', '.join(shape)}"
    if isinstance(shape, _Range):
        return f"an integer from {shape.lo} to {shape.hi}"
    if isinstance(shape, tuple):
        return " or ".join(_describe(s) for s in shape)
    return _WORDS[shape]


def _found(value: Any) -> str:
    """What a JSON value is, and a short piece of it."""
    kind = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)
    text = json.dumps(value)
    return f"{kind} {text[:60]}{'…' if len(text) > 60 else ''}" if value is not None else kind


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
    for key, shape in META_SHAPES.items():
        scalar = not isinstance(shape, (list, dict))
        if key in header and not (scalar and header[key] is None) and (wrong := _misfit(header[key], shape, key)):
            raise TraceFileError(f"{path}: metadata {wrong[0]}: expected {_describe(wrong[1])}, "
                                 f"found {_found(wrong[2])}")
    for name, c in zip(FIELDS, cols):
        if c.ndim != 1 or c.dtype.kind not in "iu":
            raise bad(f"column {name!r} is a {c.dtype} array of shape {c.shape}, not integers")
    if len({len(c) for c in cols}) != 1:
        raise TraceFileError(f"{path}: columns of different lengths (file corrupt)")
    cols = [np.asarray(c, np.int64) for c in cols]
    task, job = cols[FIELDS.index("task")], cols[FIELDS.index("job")]
    if len(task) and (int(task.min()) < 0 or int(task.max()) >= len(tasks)):
        raise TraceFileError(f"{path}: column 'task': expected ids of the {len(tasks)} task names, found "
                             f"{int(task.min())}..{int(task.max())} (file corrupt)")
    # A task's job j was released (or dropped) after j events of its own: no index reaches the events emitted.
    emitted = len(job) + int(header.get("lost_events") or 0)
    if len(job) and int(job.max()) > emitted:
        raise TraceFileError(f"{path}: column 'job': expected job indices up to the {emitted} events the run "
                             f"emitted, found {int(job.max())} (file corrupt)")
    return TraceColumns(*cols, tasks=list(tasks)), header
