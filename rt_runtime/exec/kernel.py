"""Kernels: an op's body compiled by TorchScript, so that it runs in C++ and off the GIL.

An op written as many small torch calls between Python lines holds the GIL between every two of
them: two worker threads then trade the GIL and run *slower* together than one alone (about 0.5x
on 2 cores, ``bench/bench_kernels.py``). The same body as a TorchScript function is one Python call
that runs in C++ without the GIL, so workers compute side by side, and it skips the interpreter's
per-call overhead as well. Same kernels in the same order: the results are bit-identical to the
Python body's (a test of each pipeline's kernels checks it).

Write the body as a module-level function with type hints (tensors, ints, floats, bools, lists,
tuples; no closures, no numpy) and decorate it::

    @kernel
    def _ground(points: Tensor, plane: Tensor, band: float) -> None: ...

The op's ``fn`` then calls it with its tensors and its parameters. Compilation happens at the first
call (a graph's warm-up), once per process; ``RT_RUNTIME_EAGER_KERNELS=1`` runs the Python bodies
instead (to debug with ``pdb``, or to measure what compiling buys).
"""
from __future__ import annotations

import functools
import os
import threading
import warnings
from typing import Any, Callable

import torch

# TorchScript's compiler is not meant to be entered by two threads at once; reentrant, so that a
# kernel's check-and-compile holds it across both.
_LOCK = threading.RLock()


def eager() -> bool:
    """True under ``RT_RUNTIME_EAGER_KERNELS=1``: kernels and scripted modules run as plain Python."""
    return os.environ.get("RT_RUNTIME_EAGER_KERNELS", "") not in ("", "0")


def _script(obj: Any) -> Any:
    with _LOCK, warnings.catch_warnings():
        # torch marks TorchScript deprecated for torch.compile, which took 55 s to compile a toy kernel
        # here and needs a C++ toolchain at run time (docs/BENCHMARKS.md, "Kernels"): a deliberate
        # choice, not news per call.
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.script(obj)


def script_module(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` scripted by TorchScript (its whole forward one C++ call off the GIL, the same aten
    kernels in the same order: no freezing or fusion passes, which could change the bits); the module
    itself under ``RT_RUNTIME_EAGER_KERNELS=1``."""
    return module if eager() else _script(module)


class KernelError(RuntimeError):
    """A kernel's body is not valid TorchScript: one line naming the function and the first problem."""


class Kernel:
    """A function compiled by TorchScript at its first call; called exactly like the function."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.py = fn
        self.compiled: Callable[..., Any] | None = None
        self.eager = eager()
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def compile(self) -> Callable[..., Any]:
        """Compile now (idempotent); raises KernelError with one line if the body is not TorchScript."""
        with _LOCK:   # two threads at a first call: one compiles, the other finds it done
            if self.compiled is not None:
                return self.compiled
            if self.eager:
                self.compiled = self.py
            else:
                try:
                    compiled = _script(self.py)
                except Exception as e:   # TorchScript's errors span many lines, with source excerpts
                    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
                    raise KernelError(f"kernel {self.py.__module__}.{self.py.__qualname__}: not valid "
                                      f"TorchScript: {first}") from None
                self.compiled = compiled
            return self.compiled

    def __call__(self, *args: Any) -> Any:
        fn = self.compiled
        if fn is None:
            fn = self.compile()
        return fn(*args)

    def __repr__(self) -> str:
        state = "eager" if self.eager else ("compiled" if self.compiled is not None else "not compiled yet")
        return f"<kernel {self.py.__qualname__} ({state})>"


def kernel(fn: Callable[..., Any]) -> Kernel:
    """Decorator: ``fn``'s body as a TorchScript kernel (compiled at its first call)."""
    return Kernel(fn)
