"""Outputs never harm inputs, and an interrupt never loses data.

Three small tools every subcommand that writes files shares (stdlib only, so the lowest layers,
``rt_runtime.bag`` included, can use them):

- ``check_output``: one-line refusal (``OutputPathError``) of an output path that is, is inside, or
  contains one of the command's inputs (or an output named before it), that exists already
  (unless ``force``), that lies under a regular file or in a directory this process cannot write.
- ``Staged``: everything is written to a temporary sibling (``.NAME.XXXX.rt-tmp/NAME``) and renamed
  onto the path only on success; on failure it is removed, with any parent folder it created, so a
  rerun to the same path starts clean. Readers see the old file or the new one, never half of one.
- ``Interrupt``: SIGINT/SIGTERM handlers that only set a flag; a long loop (the replay's feed, the
  simulator's writer) polls it between messages, stops cleanly and keeps what it wrote, marked
  partial. A second signal stops at once (``Interrupted``: whatever was being written is removed).
"""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Callable, Mapping

SIGNALS = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}   # 128 + signal number, as a shell reports them
TMP_SUFFIX = ".rt-tmp"


class OutputPathError(ValueError):
    """An output path that must not be written; the message is one line naming the flag and the path."""


class Interrupted(KeyboardInterrupt):
    """Stop now (a second signal, or a signal where nothing polls the flag): partial outputs are removed."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal = signal_name

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.signal, 130)


class PartialStop(Exception):
    """Raised between two messages to stop writing and keep what was written, closed and marked partial.

    ``BagWriter`` closes (not aborts) on it and ``Staged`` commits (not discards) on it; the message
    says why (it goes into the bag's metadata).
    """

    def __init__(self, reason: str, signal_name: str | None = None) -> None:
        super().__init__(reason)
        self.signal = signal_name


def _absolute(p: Path) -> Path:
    """``p`` made absolute with symlinks of its existing part followed (``resolve`` without strictness)."""
    return Path(os.path.abspath(p)).resolve()


def bag_extent(bag: str | Path) -> Path:
    """What an input bag covers: its folder (for a folder, or a storage file inside a rosbag2 folder), else the file."""
    p = Path(bag)
    if p.is_file() and (p.parent / "metadata.yaml").is_file():
        return p.parent
    return p


def check_output(path: str | Path, flag: str, inputs: Mapping[str, str | Path | None] | None = None, *,
                 force: bool = False, kind: str = "file") -> Path:
    """Refuse ``path`` (``OutputPathError``, one line) unless writing it cannot touch an input.

    ``inputs``: what -> path (None entries are skipped); an input is refused as the output, as a
    folder the output would be inside, and as something inside the output (``--force`` replacing a
    folder would delete it). ``kind``: "file", "bag" (a rosbag2 folder, replaced whole) or "dir"
    (a folder files are written into: it may exist while empty). Returns the absolute path.
    """
    shown = f"{flag} {path}"
    if str(path) == "":
        raise OutputPathError(f"{flag}: an empty path")
    o = _absolute(Path(path))
    for what, q in (inputs or {}).items():
        if q is None:
            continue
        r = _absolute(Path(q))
        same = o == r or (o.exists() and r.exists() and os.path.samefile(o, r))
        if same:
            raise OutputPathError(f"{shown}: that is the {what} ({q}); outputs never replace inputs")
        if r in o.parents:
            raise OutputPathError(f"{shown}: inside the {what} ({q}); outputs never go into inputs")
        if o in r.parents and kind != "dir":   # files go into a "dir" output one by one: nothing else is replaced
            raise OutputPathError(f"{shown}: contains the {what} ({q}); outputs never replace inputs")
    anc = o.parent
    while not anc.exists():
        if anc.is_symlink():   # a dangling link on the way: it cannot be created through
            raise OutputPathError(f"{shown}: {anc} is a broken symbolic link")
        anc = anc.parent
    if not anc.is_dir():
        raise OutputPathError(f"{shown}: {anc} is a file, not a directory")
    if not _writable(anc):
        raise OutputPathError(f"{shown}: cannot write in {anc} (the directory is not writable)")
    if o.exists() or o.is_symlink():
        if kind == "file" and o.is_dir():
            raise OutputPathError(f"{shown}: is a directory; give a file name")
        if kind == "dir" and not o.is_dir():
            raise OutputPathError(f"{shown}: is a file, not a directory")
        if kind == "dir" and not any(o.iterdir()):
            return o   # an empty folder made for the outputs
        if not force:
            raise OutputPathError(f"{shown}: exists already; pass --force to replace it")
    return o


def check_distinct(outputs: Mapping[str, str | Path | None]) -> None:
    """Refuse two outputs of one command that are the same path or one inside the other."""
    seen: list[tuple[str, str | Path, Path]] = []
    for flag, p in outputs.items():
        if p is None:
            continue
        o = _absolute(Path(p))
        for f2, p2, o2 in seen:
            if o == o2 or o2 in o.parents or o in o2.parents:
                raise OutputPathError(f"{flag} {p}: " + ("the same path as" if o == o2 else "overlaps")
                                      + f" {f2} {p2}; give each output its own path")
        seen.append((flag, p, o))


def _writable(d: Path) -> bool:
    """Whether a file can be created in ``d``: access(2), then a probe (root ignores modes; /proc, /sys,
    read-only mounts refuse anyway)."""
    if not os.access(d, os.W_OK | os.X_OK):
        return False
    try:
        os.rmdir(tempfile.mkdtemp(dir=d, prefix=".rt-probe-"))
    except OSError:
        return False
    return True


class Staged:
    """A temporary sibling of ``path`` to write into; ``commit`` renames it onto ``path``, ``discard`` removes it.

    The temporary path keeps the final name (``PARENT/.NAME.XXXX.rt-tmp/NAME``): a rosbag2 folder
    names its storage file after its folder, so the renamed bag is what a direct write would have
    made. ``replace``: an existing ``path`` is replaced (a file or a whole folder); else commit fails
    with ``FileExistsError``. ``merge``: for a folder of files, an existing folder keeps its other
    entries and gets the new ones (each replaced on its own). Parent folders are created; the ones
    created here are removed again on discard while empty. As a context manager it commits on a
    normal exit and on ``PartialStop``, and discards on any other exception.
    """

    def __init__(self, path: str | Path, *, replace: bool = False, merge: bool = False) -> None:
        self.path = Path(path)
        self.replace = replace
        self.merge = merge
        parent = Path(os.path.abspath(self.path)).parent
        self._made: list[Path] = []
        d = parent
        while not d.exists():
            self._made.append(d)
            d = d.parent
        parent.mkdir(parents=True, exist_ok=True)
        try:
            self._holder = Path(tempfile.mkdtemp(dir=parent, prefix=f".{self.path.name}.", suffix=TMP_SUFFIX))
        except OSError:
            self._rmdirs()
            raise
        self.tmp = self._holder / self.path.name
        self.done = False

    def commit(self) -> Path:
        """Rename the temporary path onto ``path`` (the old one, if replaced, is removed after)."""
        if self.done:
            return self.path
        final = self.path
        exists = final.exists() or final.is_symlink()
        if exists and not self.replace:
            self.discard()
            raise FileExistsError(f"{final}: exists already")
        try:
            if not self.tmp.exists():
                raise FileNotFoundError(f"{self.tmp}: nothing was written")
            if exists and self.merge and final.is_dir() and self.tmp.is_dir():
                for entry in sorted(self.tmp.iterdir()):
                    target = final / entry.name
                    if target.is_dir() and not target.is_symlink():
                        os.rename(target, self._holder / f".old.{entry.name}")
                    os.replace(entry, target)
            elif exists and (final.is_dir() or self.tmp.is_dir()):
                # os.replace cannot put a folder over a non-empty folder, a file or a link (nor a file
                # over a folder): the old one (a link itself, not its target) moves aside into the
                # holder first and goes with it.
                os.rename(final, self._holder / ".old")
                os.rename(self.tmp, final)
            else:
                os.replace(self.tmp, final)
        except BaseException:
            self.discard()
            raise
        self.done = True
        shutil.rmtree(self._holder, ignore_errors=True)
        return final

    def discard(self) -> None:
        """Remove everything written (and the parent folders this created, while they are empty)."""
        if self.done:
            return
        self.done = True
        shutil.rmtree(self._holder, ignore_errors=True)
        self._rmdirs()

    def _rmdirs(self) -> None:
        for d in self._made:   # innermost first
            try:
                d.rmdir()
            except OSError:
                break

    def __enter__(self) -> Path:
        return self.tmp

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if et is None or isinstance(e, PartialStop):
            self.commit()
        else:
            self.discard()


def write_atomic(path: str | Path, data: bytes | str, *, like: Path | None = None) -> Path:
    """Write ``data`` to ``path`` through a temporary sibling, fsync'ed, renamed over (replacing) it.

    ``like``: copy that file's permission bits (mkstemp's are 0600); else the usual 0666 & ~umask.
    """
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with Staged(path, replace=True) as tmp:
        with open(tmp, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        if like is not None:
            os.chmod(tmp, like.stat().st_mode & 0o777)
    return path


class Interrupt:
    """SIGINT/SIGTERM as a flag: the handlers only record the first signal's name; loops poll ``signal``.

    Calling the object returns the signal's name or None (it is the ``stop`` a replay polls). A
    second signal raises ``Interrupted`` in the main thread: the user asked twice, stop at once.
    """

    def __init__(self) -> None:
        self.signal: str | None = None
        self._old: dict[int, Any] = {}
        self._pid = os.getpid()

    def __call__(self) -> str | None:
        return self.signal

    @property
    def exit_code(self) -> int:
        """130 for SIGINT, 143 for SIGTERM, 0 without a signal."""
        return EXIT_CODES[self.signal] if self.signal else 0

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._pid:
            # A forked worker (the simulator's renderers) inherited this handler: its parent decides
            # when to stop; a SIGTERM (the pool's terminate) ends it quietly, as by default.
            if signum == signal.SIGTERM:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            return
        if self.signal is not None:
            raise Interrupted(SIGNALS.get(signum, "SIGINT"))
        self.signal = SIGNALS.get(signum, "SIGINT")

    def install(self) -> "Interrupt":
        """Set the handlers (main thread only; elsewhere a no-op) and clear the flag."""
        self.signal = None
        self._pid = os.getpid()
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
        return self

    def restore(self) -> None:
        """Put back the handlers ``install`` replaced, and clear the flag."""
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old.clear()
        self.signal = None


def raise_on_sigterm() -> Callable[[], None]:
    """SIGTERM raises ``Interrupted("SIGTERM")`` like SIGINT raises KeyboardInterrupt (for commands with
    no loop to poll a flag: their staged outputs are discarded). Returns the function that restores."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handle(signum: int, frame: FrameType | None) -> None:
        raise Interrupted("SIGTERM")

    old = signal.signal(signal.SIGTERM, handle)
    return lambda: signal.signal(signal.SIGTERM, old)


INTERRUPT = Interrupt()   # the process's flag, installed by rt_runtime.cli for replay, sim and demo
