"""The compile cache on disk: a kernel's measured times and its AOTInductor package, keyed by what
they depend on.

Under ``$RT_RUNTIME_CACHE`` (default ``~/.cache/rt_runtime``): ``<key>.json`` (the measurements and
the choice's inputs) and ``<key>.pt2`` (the ``aot`` package); Inductor's own cache for ``jit`` under
``inductor/``. The key hashes the kernel's name and the source of the file that defines it (its
helpers live there too), every argument's kind, dtype, shape and strides (a scalar by value: the
compiled code bakes it in), the torch version and the device; a record may also hold the figures measured
on a bag's arguments (``real``, marked with the bag: ``exec/sample.py``). A record that cannot be read is
reported in one line and rebuilt, never a crash.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from .kernel import Kernel

VERSION = 1   # of the record's layout: a change makes every old record stale


def cache_dir() -> Path:
    """Where compiled artifacts live: ``$RT_RUNTIME_CACHE``, else ``~/.cache/rt_runtime``."""
    env = os.environ.get("RT_RUNTIME_CACHE", "")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rt_runtime"


def use_inductor_cache() -> None:
    """Point Inductor's and Triton's caches into ours (before the first ``torch.compile``), unless set."""
    base = cache_dir()
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(base / "inductor"))
    os.environ.setdefault("TRITON_CACHE_DIR", str(base / "triton"))


@functools.lru_cache(maxsize=None)
def _file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


def _source_file(k: Kernel) -> str:
    obj = type(k.py) if hasattr(k.py, "forward") and not inspect.isfunction(k.py) else k.py
    try:
        return inspect.getsourcefile(obj) or ""
    except TypeError:
        return ""


def describe(arg: Any) -> Any:
    """What of one argument a compiled kernel depends on (JSON-able)."""
    if isinstance(arg, torch.Tensor):
        return ["tensor", str(arg.dtype), list(arg.shape), list(arg.stride()), arg.device.type]
    if isinstance(arg, (bool, int, float, str)) or arg is None:
        return [type(arg).__name__, arg]
    if isinstance(arg, (list, tuple)):
        return [type(arg).__name__, [describe(a) for a in arg]]
    return [type(arg).__name__]


def key(k: Kernel, args: tuple[Any, ...], device: str) -> str:
    """The cache key of ``k`` called with ``args`` on ``device``."""
    src = _source_file(k)
    what = [VERSION, k.name, _file_digest(src) if src else "", [describe(a) for a in args], torch.__version__, device]
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:32]


def note(msg: str) -> None:
    """One line on stderr about the cache (a rebuild, a build's time)."""
    print(f"rt_runtime: compile: {msg}", file=sys.stderr)


def load_record(key_: str) -> dict[str, Any] | None:
    """The record stored under ``key_``, or None (absent; unreadable: noted, removed, to be rebuilt)."""
    path = cache_dir() / f"{key_}.json"
    if not path.exists():
        return None
    try:
        rec = json.loads(path.read_text())
        if not isinstance(rec, dict) or rec.get("version") != VERSION or not isinstance(rec.get("modes"), dict):
            raise ValueError("not a record of this version")
        real = rec.get("real")   # the figures measured on a bag's arguments (exec/sample.py), where any
        if real is not None and not (isinstance(real, dict) and isinstance(real.get("modes"), dict)):
            raise ValueError("its bag's figures are not a record's")
        return rec
    except (OSError, ValueError) as e:
        note(f"{path}: unreadable ({type(e).__name__}: {str(e)[:80]}): rebuilt")
        path.unlink(missing_ok=True)
        return None


def save_record(key_: str, rec: dict[str, Any]) -> None:
    """Store ``rec`` under ``key_`` (written whole, then renamed: a reader never sees half a record)."""
    base = cache_dir()
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / f".{key_}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({**rec, "version": VERSION}, indent=1, sort_keys=True))
    os.replace(tmp, base / f"{key_}.json")


def artifact(key_: str, mode: str) -> Path:
    """The path of ``mode``'s artifact under ``key_`` (``aot``: an AOTInductor package)."""
    return cache_dir() / f"{key_}.{mode}.pt2"
