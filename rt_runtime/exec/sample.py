"""Real arguments for the compiler seam: each kernel's first calls in a replay, recorded as copies.

``auto`` chooses by times measured on a kernel's arguments; the warm-up's (zeros, symbolic dimensions
at up to 256 rows: ``exec/warmup.py``) make data-dependent bodies 10-200x slower than a real call
(docs/BENCHMARKS.md, "Kernel compile modes"). ``rt-runtime compile --bag`` replays the first seconds
of a bag inside ``sampling`` and measures each kernel on what it got there (``exec/compile.py``).

Set-up only: within ``sampling`` every ``Kernel`` call goes through one recorder (the class's
``__call__``, so kernels made while the replay builds its stack are recorded too), one thread, no
live job. The warm-up's calls are not recorded (``warming``), and the warm-up runs every kernel eager
so that what is recorded is what the Python body was given.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

from .kernel import SETUP_LOCK, Kernel

_STATE: dict[str, Any] = {"samples": None, "warming": 0}


@dataclass
class Samples:
    """Per kernel name: copies of its first ``keep`` argument lists after the warm-up, and its calls."""

    keep: int
    source: str = ""
    args: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)


def _copy(args: tuple[Any, ...]) -> tuple[Any, ...]:
    # the executor's arena views change under the next job: keep copies
    return tuple(a.clone() if hasattr(a, "clone") and hasattr(a, "shape") else a for a in args)


def active() -> bool:
    """True within ``sampling``: a warm-up then runs its kernels eager, whatever its task asks."""
    return _STATE["samples"] is not None


@contextlib.contextmanager
def warming() -> Iterator[None]:
    """Within: a graph's warm-up, whose synthetic calls ``sampling`` does not record."""
    _STATE["warming"] += 1
    try:
        yield
    finally:
        _STATE["warming"] -= 1


@contextlib.contextmanager
def sampling(keep: int = 8, source: str = "") -> Iterator[Samples]:
    """Within: each kernel's first ``keep`` calls outside a warm-up are recorded (copies), every one counted."""
    samples = Samples(keep, source)
    with SETUP_LOCK:
        if active():
            raise RuntimeError("sampling: already recording")
        plain = Kernel.__call__

        def call(self: Kernel, *args: Any) -> Any:
            if not _STATE["warming"]:
                n = samples.calls[self.name] = samples.calls.get(self.name, 0) + 1
                if n <= keep:
                    samples.args.setdefault(self.name, []).append(_copy(args))
            return self.impl(*args)

        Kernel.__call__ = call  # type: ignore[method-assign] - this process, set-up only, restored below
        _STATE["samples"] = samples
        try:
            yield samples
        finally:
            Kernel.__call__ = plain  # type: ignore[method-assign]
            _STATE["samples"] = None


def describe_shapes(argsets: list[tuple[Any, ...]]) -> list[list[Any]]:
    """Each recorded call's tensor shapes (a scalar by value): what ``--explain`` and the record show."""
    return [[list(a.shape) if hasattr(a, "shape") else a for a in args
             if hasattr(a, "shape") or isinstance(a, (int, float, bool))] for args in argsets]
