"""Which bags a batch replays, and the three hashes that key a result: bag, config, code.

``find_bags`` expands the command line (bag paths, folders holding bags, globs) into bag paths;
``content_hash`` reads a bag (a rosbag2 folder or a bare .mcap/.db3) in 1 MiB blocks, so a row
names the bytes that were replayed, not a path that may be recorded again; ``code_version`` hashes
the sources and models of ``rt_runtime`` and ``pipelines``, so a change to either replays again
(or is ``$RT_RUNTIME_CODE_VERSION``, e.g. the commit a CI job builds, where that is set).
"""
from __future__ import annotations

import glob
import hashlib
import os
from functools import lru_cache
from pathlib import Path

STORAGE_SUFFIXES = (".mcap", ".db3")
BLOCK = 1 << 20


class BagSelectionError(ValueError):
    """A BAGS argument that names no bag; the message is one line naming it."""


def _is_bag_dir(p: Path) -> bool:
    return p.is_dir() and (p / "metadata.yaml").is_file()


def _bags_under(folder: Path) -> list[Path]:
    """The bags inside a folder: rosbag2 folders (not entered) and loose storage files, any depth."""
    out: list[Path] = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        here = Path(root)
        if _is_bag_dir(here):
            out.append(here)
            dirs.clear()
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))   # .NAME.rt-tmp: an unfinished output
        out += [here / f for f in sorted(files) if f.endswith(STORAGE_SUFFIXES)]
    return out


def find_bags(args: list[str]) -> list[Path]:
    """Every bag the arguments name, each once, in the order given (a folder's or glob's sorted)."""
    seen: set[Path] = set()
    out: list[Path] = []
    for arg in args:
        matches = sorted(glob.glob(arg, recursive=True)) if glob.has_magic(arg) else [arg]
        if not matches:
            raise BagSelectionError(f"BAGS {arg}: the pattern matches no file")
        found: list[Path] = []
        for m in matches:
            p = Path(m)
            if not p.exists():
                raise BagSelectionError(f"BAGS {arg}: no such file or directory")
            if p.is_file() and p.suffix in STORAGE_SUFFIXES and _is_bag_dir(p.parent):
                p = p.parent   # a storage file inside a rosbag2 folder: the folder is the bag
            if _is_bag_dir(p) or p.is_file():
                found.append(p)   # a file of any kind: replay's reader says what is wrong with it
            elif p.is_dir():
                found += sorted(_bags_under(p))
        if not found:
            raise BagSelectionError(f"BAGS {arg}: expected bags (rosbag2 folders, .mcap or .db3 files); "
                                    "found none there")
        for p in found:
            key = p.resolve()
            if key not in seen:
                seen.add(key)
                out.append(p)
    return out


def _hash_file(h: "hashlib._Hash", path: Path) -> None:
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            h.update(block)


def content_hash(bag: str | Path) -> str:
    """SHA-256 over a bag's files (relative name and bytes, sorted): the same bytes, the same hash."""
    p = Path(bag)
    h = hashlib.sha256()
    if p.is_dir():
        for f in sorted(q for q in p.rglob("*") if q.is_file()):
            h.update(str(f.relative_to(p)).encode() + b"\0")
            _hash_file(h, f)
    else:
        _hash_file(h, p)
    return h.hexdigest()


def config_hash(path: str | Path) -> str:
    """SHA-256 of the stack file's bytes."""
    h = hashlib.sha256()
    _hash_file(h, Path(path))
    return h.hexdigest()


@lru_cache(maxsize=1)
def code_version() -> str:
    """``$RT_RUNTIME_CODE_VERSION`` if set (CI: the commit), else ``rt_runtime``'s version plus a hash of
    the sources and models that decide a replay's outputs."""
    import pipelines
    import rt_runtime

    if os.environ.get("RT_RUNTIME_CODE_VERSION"):
        return os.environ["RT_RUNTIME_CODE_VERSION"]

    h = hashlib.sha256()
    for pkg in (rt_runtime, pipelines):
        root = Path(pkg.__file__).resolve().parent
        for f in sorted(q for q in root.rglob("*") if q.suffix in (".py", ".pt") and q.is_file()):
            h.update(f"{pkg.__name__}/{f.relative_to(root)}".encode() + b"\0")
            _hash_file(h, f)
    return f"{rt_runtime.__version__}+{h.hexdigest()[:16]}"
