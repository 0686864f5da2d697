"""Kernels: an op's body as one callable whose implementation the compiler seam chooses.

Write the body as a module-level function with type hints (tensors, ints, floats, bools, lists,
tuples) and decorate it::

    @kernel
    def _ground(points: Tensor, plane: Tensor, band: float) -> None: ...

The op's ``fn`` then calls it with its tensors and its parameters. A kernel runs its Python body
(``eager``) until set-up gives it another implementation (``Kernel.use``): ``torch.compile``
(``jit``) or an AOTInductor package (``aot``), built and chosen by ``rt_runtime.exec.compile`` from
the calls a graph's warm-up made (``recording``), never inside a live job. A module (the camera's
net) is a kernel too: ``kernel(module)``. ``RT_RUNTIME_EAGER_KERNELS=1`` keeps every kernel eager
whatever the stack asks (to debug with ``pdb``).

The trade-off (docs/BENCHMARKS.md, "Kernel compile modes"): an eager body holds the GIL between its aten
calls (each call releases it), so two workers running many-small-call kernels trade the GIL where
TorchScript, now gone (deprecated by torch), ran a whole body off it; ``jit`` and ``aot`` run a fused
body in one call but build for 4-90 s a kernel here, refuse data-dependent bodies or lose to eager on
them, and change the bits wherever they fuse a reduction.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading
import weakref
from typing import Any, Callable, Iterator

MODES = ("eager", "jit", "aot")
"""What a kernel may run: its Python body, ``torch.compile`` (Inductor), an AOTInductor package."""
REQUESTS = ("auto", *MODES)
"""What a stack may ask per task (``compile:``): here, not in ``compile``, so the CLI and the stack file's
checks read it without importing torch."""

# Set-up swaps implementations; two set-ups at once would interleave their swaps.
SETUP_LOCK = threading.RLock()
"""Held while kernels change implementation (``Kernel.use``, ``recording``, the seam's ``prepare``): set-up only."""
_ALL: "weakref.WeakSet[Kernel]" = weakref.WeakSet()


def eager() -> bool:
    """True under ``RT_RUNTIME_EAGER_KERNELS=1``: every kernel runs its Python body."""
    return os.environ.get("RT_RUNTIME_EAGER_KERNELS", "") not in ("", "0")


class KernelError(RuntimeError):
    """A kernel that cannot be built in the mode asked: one line naming the kernel and the first problem."""


class Kernel:
    """An op body, called exactly like the function; ``impl`` is what a call runs (the body by default)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.py = fn
        self.impl: Callable[..., Any] = fn
        self.mode = "eager"
        if hasattr(fn, "forward") and not inspect.isfunction(fn):   # a module: named by its class
            self.name = f"{type(fn).__module__}.{type(fn).__qualname__}"
        else:
            self.name = f"{fn.__module__}.{fn.__qualname__}"
            functools.update_wrapper(self, fn)  # type: ignore[arg-type]
        _ALL.add(self)

    def use(self, mode: str, impl: Callable[..., Any]) -> None:
        """Run ``impl`` (built in ``mode``) from the next call on; the Python body under RT_RUNTIME_EAGER_KERNELS."""
        if mode not in MODES:
            raise KernelError(f"kernel {self.name}: mode {mode!r}: expected one of {', '.join(MODES)}")
        with SETUP_LOCK:
            if eager():
                mode, impl = "eager", self.py
            self.mode, self.impl = mode, impl

    def __call__(self, *args: Any) -> Any:
        return self.impl(*args)

    def __repr__(self) -> str:
        return f"<kernel {self.name} ({self.mode})>"


def kernel(fn: Callable[..., Any]) -> Kernel:
    """Decorator: ``fn`` (a function or a module) as a kernel, eager until set-up chooses otherwise."""
    return Kernel(fn)


@contextlib.contextmanager
def recording() -> Iterator[dict[Kernel, list[Any]]]:
    """Within: every kernel's calls are recorded (kernel -> [its first call's arguments, calls]), and run as before.

    Set-up only (a graph's warm-up, one thread, before the workers start): what the seam compiles for
    and measures on; the recorded tensors are the warm-up's own (the executor's views), not copies."""
    seen: dict[Kernel, list[Any]] = {}
    with SETUP_LOCK:
        saved = {k: k.impl for k in list(_ALL)}

        def recorder(k: Kernel, impl: Callable[..., Any]) -> Callable[..., Any]:
            def call(*args: Any) -> Any:
                seen.setdefault(k, [args, 0])[1] += 1
                return impl(*args)
            return call
        recorders = {k: recorder(k, impl) for k, impl in saved.items()}
        for k, rec in recorders.items():
            k.impl = rec
        try:
            yield seen
        finally:
            for k, rec in recorders.items():
                if k.impl is rec:   # not given another implementation (``use``) inside the block
                    k.impl = saved[k]
