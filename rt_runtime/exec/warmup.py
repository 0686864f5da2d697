"""Warm-up before going live: run each graph on synthetic inputs so lazy initialisation (kernel
selection, allocator pools, first-touch page faults) happens before the first deadline counts, and
give its kernels the mode the stack asks (``exec/compile.py``: built or loaded here, never in a job).
"""
from __future__ import annotations

import sys
import time
from typing import Any

from ..core.graph import Graph
from ..core.tensor import Dim, TensorSpec
from ..device.base import tensor_device
from .cache import note
from .compile import DEFAULT_JOBS, compile_graph, default_request
from .executor import GraphExecutor
from .sample import active as sampling_active, warming


def spec_zeros(spec: TensorSpec, device: str = "cpu", symbolic: int = 256) -> Any:
    """A zero tensor meeting ``spec``; symbolic dims at min(bound, ``symbolic``) (0: empty)."""
    import torch

    shape = tuple(min(d.max, symbolic) if isinstance(d, Dim) else d for d in spec.shape)
    t = torch.zeros(shape, dtype=getattr(torch, spec.dtype), device=device)
    if spec.layout == "channels_last":
        t = t.contiguous(memory_format=torch.channels_last)
    return t


def synthetic_inputs(graph: Graph, device: str = "cpu", symbolic: int = 256) -> dict[str, Any]:
    """Zero tensors meeting the graph's input contracts; symbolic dims at min(bound, ``symbolic``)."""
    return {spec.name: spec_zeros(spec, device, symbolic) for spec in graph.inputs}


def warm_up(executor: GraphExecutor, runs: int | None = None, compile: str | None = None,
            expected_jobs: float = DEFAULT_JOBS) -> bool:
    """Run ``runs`` (default: the executor's ``warmup``) jobs on synthetic inputs, give the kernels they
    called the mode ``compile`` asks (one of ``REQUESTS``; default ``default_request()``) for
    ``expected_jobs`` jobs, then let it capture its CUDA graph (``prepare``, on the chosen kernels); a
    failure is reported on stderr, not raised. Within ``exec.sample.sampling`` every kernel stays eager
    (what is recorded is what the Python body gets) and the warm-up's calls are not recorded."""
    inputs = synthetic_inputs(executor.graph, tensor_device(executor.device.name))
    n = runs if runs is not None else getattr(executor, "warmup", 2)
    with warming():
        return _warm_up(executor, inputs, n, compile, expected_jobs)


def _warm_up(executor: GraphExecutor, inputs: dict[str, Any], n: int, compile: str | None,
             expected_jobs: float) -> bool:
    try:
        request = "eager" if sampling_active() else compile or default_request()
        if request == "eager":
            for _ in range(n):
                executor.run(inputs)
        else:
            t0 = time.monotonic()
            chosen = compile_graph(executor, inputs, request, expected_jobs, max(n, 1))
            executor.run(inputs)   # once more on the kernels as chosen
            modes = [c.mode for c in chosen]
            if any(m != "eager" for m in modes) or request != "auto":
                note(f"graph '{executor.graph.name}' ({request}): " + ", ".join(
                    f"{modes.count(m)} {m}" for m in ("eager", "jit", "aot") if m in modes)
                    + f" of {len(modes)} kernels, set-up {time.monotonic() - t0:.1f} s")
    except Exception as e:  # noqa: BLE001 - warm-up must never stop a start-up; the live run will report
        print(f"rt_runtime: warm-up of graph '{executor.graph.name}' failed on synthetic inputs: {e!r}",
              file=sys.stderr)
        return False
    executor.device.synchronize()
    prepare = getattr(executor, "prepare", None)   # CUDA graph capture, at set-up rather than in a live job
    if prepare is not None:
        prepare(inputs)
    return True
