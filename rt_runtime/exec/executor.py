"""GraphExecutor: runs one job of a graph on a device, op by op, inside its planned arenas.

Set-up (once): plan the graph's memory, allocate one arena per pool kind, cut every planned tensor
as a view at its offset, and build each op's argument list. A job then only binds its inputs
(checked against their contracts), walks the ops in the graph's fixed order handing each its
planned views, and records each op's start and end. It allocates nothing for planned tensors.

``steps(inputs)`` yields after every op: the op boundaries are the preemption points of the
scheduler (limited preemption), and closing the generator aborts the job at the next boundary.
Every op runs in inference mode (nothing is differentiated): aten calls skip autograd's dispatch keys.

On an asynchronous device (``cuda``, and its CPU twin ``cpu-async``) an op is *launched* on the
task's stream and runs later: after the last op the executor records a completion event and its
thread waits for it, so a job ends when its device work ends (execution times, overruns, misses
and the cost model see device time, not launch time), and per-op device times come from an event
recorded after each op (``op_start_ns``/``op_end_ns`` once the job completed). Hand-offs to other
tasks are ordered on the streams (``sched.handoff``): a job's outputs are copied into channel slots on
``out_stream`` (after its ops, before its next job's), and ``wait_events`` makes the stream wait on the
fills of the slots a job reads before its first op.

On CUDA, with ``capture=True`` and a graph whose ops are all capturable, the whole graph is
recorded into a CUDA graph at set-up (``prepare``, called by ``warm_up`` after its eager jobs, never
inside a live job) and replayed from then on. The graph reads fixed staging views of its inputs: an
input the graph pads (``Graph.pad``) is staged at its bound, a job's rows first and the pad after
them, so a LiDAR sweep or radar scan of any size replays the one graph; any other input is staged at
its captured shape, and a job whose shape differs runs eagerly instead. The graph's memory comes from
one pool per task (shared by its executors), counted in ``graph_pool_bytes``. Captures, replays and
eager fallbacks are counted. ``pad_inputs=True`` is the CPU twin of capture at the bound: every job
reads its padded inputs staged exactly as a captured graph would, eagerly, so CI checks a graph's pad
promise (its outputs do not depend on the padding) without a GPU.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, Iterator, Mapping

from ..core.graph import Graph
from ..core.tensor import ContractError
from ..device.base import Device, asynchronous
from ..device.cpu import CpuDevice
from ..memory.arena import Arena, PoolKind
from ..memory.graph_plan import PoolPlan, plan_graph, workspace_key

_now = time.monotonic_ns


class _NoGuard:
    """What stands for torch's inference-mode guard where torch is not loaded: nothing to switch off."""

    def __init__(self, enabled: bool) -> None:
        pass


def _inference_guard() -> Any:
    """torch's inference-mode guard (what ``torch.inference_mode`` enters), or ``_NoGuard`` without torch."""
    torch = sys.modules.get("torch")
    return torch._C._InferenceMode if torch is not None else _NoGuard


def _inferring(fn: Any, guard: Any) -> Any:
    """``fn`` called in inference mode, on whichever thread runs it (a launched op: ``cpu-async``'s stream)."""
    def call(*args: Any) -> Any:
        g = guard(True)
        try:
            return fn(*args)
        finally:
            del g
    return call
_CAPTURE_LOCK = threading.Lock()   # one capture at a time in the process: CUDA's capture is not re-entrant


class GraphExecutor:
    """Runs jobs of one graph on one device, on the task's own stream, inside its arenas."""

    def __init__(self, graph: Graph, device: Device | None = None, *, owner: str | None = None,
                 urgency: float = 0.0, alignment: int = 64, capture: bool = False, warmup: int = 2,
                 check_inputs: bool = True, pad_inputs: bool = False) -> None:
        self.graph = graph
        self.device: Device = device if device is not None else CpuDevice()
        self.owner = owner or graph.name
        self.check_inputs = check_inputs
        self.stream = self.device.stream(urgency)
        on_cuda = self.device.kind == "cuda"
        # Launch, then wait for completion: the device runs the ops later (cuda, and its twin cpu-async).
        self.asynchronous = asynchronous(self.device)
        self.capture_wanted = capture and on_cuda
        self.warmup = warmup
        # The inputs staged at their bound, and the value of the rows past a job's own: a captured graph's,
        # or every job's on the twin (``pad_inputs``).
        self.padding: dict[str, float] = dict(graph.pad) if self.capture_wanted or pad_inputs else {}
        self.pad_eager = pad_inputs and not self.capture_wanted and bool(self.padding)
        self.pools: dict[PoolKind, PoolPlan] = plan_graph(graph, alignment,
                                                          stage_inputs=self.capture_wanted or self.pad_eager)
        self.arenas: dict[PoolKind, Arena] = {}
        self.views: dict[str, Any] = {}
        for kind, pool in self.pools.items():
            storage = self.device.alloc_arena(pool.plan.total_bytes, pool.plan.alignment)
            self.arenas[kind] = Arena(f"{self.owner}/{kind.value}", kind, pool.plan, storage)
            for name, spec in pool.specs.items():
                self.views[name] = self.device.view(storage, pool.plan.offsets[name], spec)

        # Each op's argument list: inputs, outputs, workspace. Graph-input slots are filled per job.
        self._calls: list[tuple[Any, list[Any]]] = []
        self._input_slots: dict[str, list[tuple[list[Any], int]]] = {s.name: [] for s in graph.inputs}
        for o in graph.ops:
            args: list[Any] = []
            for s in o.inputs:
                if s.name in self._input_slots:
                    self._input_slots[s.name].append((args, len(args)))
                    args.append(None)
                else:
                    args.append(self.views[s.name])
            args += [self.views[s.name] for s in o.outputs]
            args += [self.views[workspace_key(o.name, s.name)] for s in o.workspace]
            self._calls.append((o.fn, args))
        self.outputs: dict[str, Any] = {s.name: self.views[s.name] for s in graph.outputs}
        # Ops run in inference mode: no op is differentiated, and outside it every aten call also passes
        # autograd's and the version counter's dispatch keys (10-30 % of a small-call kernel's time here;
        # the same aten kernels, the same bits).
        self._inference = _inference_guard()
        if self.asynchronous:   # launched ops (and a CUDA capture) run outside ``steps``' guard: each takes its own
            self._calls = [(_inferring(fn, self._inference), args) for fn, args in self._calls]

        n = len(graph.ops)
        self.op_start_ns: list[int] = [0] * n
        self.op_end_ns: list[int] = [0] * n
        self._stream_ctx = self.device.on_stream(self.stream) if on_cuda else None
        # One event after each op (and one before the first): the job's completion and its per-op device times.
        self._marks = [self._timing_event() for _ in range(n + 1)] if self.asynchronous else []
        self._last_mark: Any = None   # the mark after the last op launched (what an abort leaves running)
        # Where the job's output views are written: the channel fill of a job's outputs is launched here.
        self.out_stream: Any = self.stream if self.asynchronous else None
        self.jobs = 0
        self.captures = 0
        self.replays = 0
        self.fallbacks = 0
        self._cuda_graph: Any = None
        self._captured_shapes: dict[str, tuple[int, ...]] = {}
        self.prepared = False   # set-up done (prepare): capture tried once, before the first live job
        self.graph_pool_bytes = 0   # what the captured graph's memory pool took (CUDA)
        self._staging: dict[str, Any] = {}
        if self.pad_eager:
            for spec in graph.inputs:
                if spec.name in self.padding:
                    self._staging[spec.name] = self._stage_view(spec, spec.max_shape)

    # ---- one job ----------------------------------------------------------------------------
    def bind(self, inputs: Mapping[str, Any]) -> None:
        """Check each graph input against its contract and hand it to the ops that read it."""
        g = self.graph
        for spec in g.inputs:
            x = inputs.get(spec.name)
            if x is None:
                raise ContractError("presence", "a bound tensor", "nothing", tensor=spec.name, op="<bind>",
                                    graph=g.name)
            if self.check_inputs:
                spec.check(x, op="<bind>", graph=g.name)
            for args, pos in self._input_slots[spec.name]:
                args[pos] = x

    def _bind_views(self, views: Mapping[str, Any]) -> None:
        """Hand ``views`` (staged inputs, already checked as the job's own) to the ops that read them."""
        for name, x in views.items():
            for args, pos in self._input_slots[name]:
                args[pos] = x

    def steps(self, inputs: Mapping[str, Any]) -> Iterator[int]:
        """Run one job, yielding the op index after each op (a preemption point)."""
        self.bind(inputs)
        if self._cuda_graph is not None:
            if self._replayable(inputs):
                yield self._replay(inputs)
                self.jobs += 1
                return
            self.fallbacks += 1
        elif self.capture_wanted and self.prepared:   # capture wanted but refused or failed at set-up
            self.fallbacks += 1
        elif self.pad_eager:
            self._fill_staging(inputs)
            self._bind_views(self._staging)
        if self.asynchronous:
            yield from self._launch_steps(inputs)
            return
        starts, ends, ctx, inference = self.op_start_ns, self.op_end_ns, self._stream_ctx, self._inference
        i = 0
        for fn, args in self._calls:
            starts[i] = _now()
            guard = inference(True)   # per op, not across the yield: another job may run on this thread
            try:
                if ctx is None:
                    fn(*args)
                else:
                    with ctx:
                        fn(*args)
            finally:
                del guard
            ends[i] = _now()
            yield i
            i += 1
        self.jobs += 1

    def _launch_steps(self, inputs: Mapping[str, Any]) -> Iterator[int]:
        """Launch each op on the stream (a preemption point after each launch); the last waits for completion."""
        dev, stream, marks = self.device, self.stream, self._marks
        marks[0].record(stream)
        last = len(self._calls) - 1
        t_host = _now()
        for i, (fn, args) in enumerate(self._calls):
            dev.launch(stream, fn, *args)
            marks[i + 1].record(stream)
            self._last_mark = marks[i + 1]
            if i == last:
                marks[i + 1].synchronize()   # the job ends when its device work ends (a device error raises here)
                self._device_times(t_host)
            yield i
        self.jobs += 1

    def wait_events(self, events: list[Any]) -> None:
        """Make the stream wait on ``events`` before the ops launched next (the fills of a job's inputs)."""
        stream = self.stream
        for e in events:
            e.wait(stream)

    def in_flight(self) -> list[Any]:
        """An event after the ops launched so far, if any may still run (a job closed before its end)."""
        return [self._last_mark] if self._last_mark is not None else []

    def _timing_event(self) -> Any:
        if self.device.kind == "cuda":
            import torch

            return torch.cuda.Event(enable_timing=True)
        return self.device.event()

    def _device_times(self, t_host: int) -> None:
        """Per-op start/end from the events around each op, on the host's clock from the job's first launch."""
        marks, starts, ends = self._marks, self.op_start_ns, self.op_end_ns
        if self.device.kind == "cuda":
            t0 = t_host
            for i in range(len(starts)):
                starts[i] = t0 + int(marks[0].elapsed_time(marks[i]) * 1e6)
                ends[i] = t0 + int(marks[0].elapsed_time(marks[i + 1]) * 1e6)
        else:
            for i in range(len(starts)):
                starts[i], ends[i] = marks[i].time_ns, marks[i + 1].time_ns

    def run(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Run one job to completion; returns the output views (valid until the next job)."""
        for _ in self.steps(inputs):
            pass
        return self.outputs

    # ---- CUDA graphs ------------------------------------------------------------------------
    def prepare(self, inputs: Mapping[str, Any]) -> bool:
        """At set-up, after warm-up, never in a live job: capture the graph if wanted; True if captured.

        Captures are serialized across executors (one process-wide lock) and use thread-local capture
        mode, so another thread's allocation or sync does not break them; a graph that is not capturable,
        or whose capture fails, runs eagerly (counted as fallbacks, said once on stderr).
        """
        if not self.capture_wanted or self.prepared:
            return self._cuda_graph is not None
        self.prepared = True
        if not self.graph.capturable:
            return False
        try:
            with _CAPTURE_LOCK:
                self.device.synchronize()
                self._capture(inputs)
                self.device.synchronize()
        except Exception as e:  # noqa: BLE001 - a graph that cannot be captured still runs, eagerly
            self._cuda_graph = None   # the next job binds its own inputs again (steps)
            self._staging.clear()
            self._captured_shapes.clear()
            print(f"rt_runtime: capture of graph '{self.graph.name}' failed ({type(e).__name__}: {e}); it runs "
                  f"eagerly", file=sys.stderr)
            return False
        return True

    def _capture(self, inputs: Mapping[str, Any]) -> None:
        """Record the whole graph reading fixed staging views of the inputs (padded ones at their bound)."""
        for spec in self.graph.inputs:
            shape = spec.max_shape if spec.name in self.padding else tuple(inputs[spec.name].shape)
            self._captured_shapes[spec.name] = shape
            self._staging[spec.name] = self._stage_view(spec, shape)
        self._fill_staging(inputs)
        self._bind_views(self._staging)

        def body() -> None:
            for fn, args in self._calls:
                fn(*args)

        pool = self.device.graph_pool(self.owner.split("/")[0])  # type: ignore[attr-defined]
        before = self.device.reserved_bytes()  # type: ignore[attr-defined]
        self._cuda_graph = self.device.capture(body, self.stream, pool)  # type: ignore[attr-defined]
        self.graph_pool_bytes = max(0, self.device.reserved_bytes() - before)  # type: ignore[attr-defined]
        self.captures += 1

    def _stage_view(self, spec: Any, shape: tuple[int, ...]) -> Any:
        """A fixed view of ``shape`` over the input's staging buffer in the IO arena."""
        io = self.arenas[PoolKind.IO]
        return self.device.view(io.storage, io.plan.offsets[spec.name], spec, shape)

    def _fill_staging(self, inputs: Mapping[str, Any]) -> None:
        """Copy the job's inputs into their staging views, on the task's stream (padding past their rows)."""
        dev, stream, padding = self.device, self.stream, self.padding
        for name, stage in self._staging.items():
            dev.launch(stream, stage_rows, stage, inputs[name], padding.get(name))

    def _replayable(self, inputs: Mapping[str, Any]) -> bool:
        padding = self.padding
        for name, shape in self._captured_shapes.items():
            have = tuple(inputs[name].shape)
            if name in padding:
                if have[0] > shape[0] or have[1:] != shape[1:]:
                    return False
            elif have != shape:
                return False
        return True

    def _replay(self, inputs: Mapping[str, Any]) -> int:
        last = len(self._calls) - 1
        self.op_start_ns[0] = _now()
        self._fill_staging(inputs)
        with self._stream_ctx:  # type: ignore[union-attr]
            self._cuda_graph.replay()
        self._marks[-1].record(self.stream)
        self._marks[-1].synchronize()   # the job ends when the replayed graph's work ends
        self.op_end_ns[last] = _now()
        self.replays += 1
        return last

    # ---- facts ------------------------------------------------------------------------------
    @property
    def arena_bytes(self) -> int:
        """Bytes reserved in all of this executor's arenas, and by its captured graph's pool."""
        return sum(a.nbytes for a in self.arenas.values()) + self.graph_pool_bytes

    def stats(self) -> dict[str, int]:
        """Counters for diagnostics and the trace."""
        return {"jobs": self.jobs, "captures": self.captures, "replays": self.replays,
                "fallbacks": self.fallbacks, "arena_bytes": self.arena_bytes,
                "graph_pool_bytes": self.graph_pool_bytes}

    def __repr__(self) -> str:
        return f"GraphExecutor({self.graph.name!r} on {self.device.name}, {self.arena_bytes} B in arenas)"


def stage_rows(stage: Any, x: Any, pad: float | None) -> None:
    """``x`` into the first rows of ``stage``, the rest of ``stage`` filled with ``pad`` (None: same shape)."""
    n = x.shape[0]
    stage[:n].copy_(x)
    if pad is not None and n < stage.shape[0]:
        stage[n:].fill_(pad)
