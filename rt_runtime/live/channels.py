"""The live view's channels: what a run serves (``LiveSpec``, from its stack file) and their Foxglove channels.

===================================  ======================================  ===================================
channel                              schema (encoding)                       one message per
===================================  ======================================  ===================================
``/rt/tasks/<task>/jobs``            ``rt_runtime.TaskJobs`` (json)          interval with a job of the task
                                                                             ended: those jobs, its window then
``/rt/safety``                       ``rt_runtime.Safety`` (json)            change of the safety level
``/rt/degraded``                     ``rt_runtime.Degraded`` (json)          task switched to/from its fallback
``/rt/speculation``                  ``rt_runtime.Speculation`` (json)       speculation verdict (hit or miss)
``/rt/chains/<chain>``               ``rt_runtime.ChainLatencies`` (json)    interval with an output of the
                                                                             chain's last task: those outputs
``/rt/out/<egress topic>`` (path)    ``foxglove.PosesInFrame`` (pb)          trajectory, 1 / interval at most
``/rt/out/<egress topic>`` (markers) ``foxglove.SceneUpdate`` (pb)           objects, 1 / interval at most
``/rt/out/tf`` (with a path route)   ``foxglove.FrameTransforms`` (pb)       trajectory drawn: frame -> ``ego``
``/rt/live``                         ``rt_runtime.Live`` (json)              drain (PERIOD_S of wall time), end
===================================  ======================================  ===================================

An interval is 1 / ``LiveSpec.hz`` s (``--foxglove-hz``, default 10) of the runtime's time: one rate for
everything that comes per job or per output. A batch is sent when the first event after its interval is folded,
or sooner when no event came for a drain (paused, or a silent stack: the rest follows in another message).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .chains import CHAIN_SCHEMA
from .outputs import DEFAULT_HZ, SCHEMAS, TF_TOPIC, topic_of
from .state import JOBS_SCHEMA, LIVE_SCHEMA, MODE_SCHEMA, SAFETY_SCHEMA, SPEC_SCHEMA


@dataclass(frozen=True)
class LiveSpec:
    """What a run serves: its tasks, its chains (name, tasks, run-time deadline ns or None), its egress routes
    (``config.stack.EgressRoute``: the outputs drawn) in ``frame``, at ``hz``: a batch of jobs per task, of
    outputs per chain, and an output group per route per 1 / ``hz`` s of the runtime's time."""

    tasks: tuple[str, ...] = ()
    chains: tuple[tuple[str, tuple[str, ...], int | None], ...] = ()
    routes: tuple[Any, ...] = ()
    hz: float = DEFAULT_HZ
    frame: str = "map"

    @classmethod
    def of(cls, cfg: Any, hz: float = DEFAULT_HZ) -> "LiveSpec":
        """A stack file's (``config.stack.StackConfig``)."""
        return cls(tuple(t.name for t in cfg.tasks),
                   tuple((c.name, tuple(c.tasks), c.deadline_ns) for c in cfg.chains),
                   tuple(r for r in cfg.egress if r.codec in SCHEMAS), hz, cfg.frame)


class Channels:
    """The Foxglove channels of a ``LiveSpec`` on one context, all created now but a late task's."""

    def __init__(self, foxglove: Any, ctx: Any, spec: LiveSpec) -> None:
        import warnings

        with warnings.catch_warnings():   # 0.30 warns on the old name's import inside the package
            warnings.simplefilter("ignore", DeprecationWarning)
            from foxglove import messages
        self._foxglove, self._ctx = foxglove, ctx
        self.tasks: dict[str, Any] = {}
        self.safety = self._json("/rt/safety", SAFETY_SCHEMA)
        self.modes = self._json("/rt/degraded", MODE_SCHEMA)
        self.spec = self._json("/rt/speculation", SPEC_SCHEMA)
        self.live = self._json("/rt/live", LIVE_SCHEMA)
        self.chains = {name: self._json(f"/rt/chains/{name}", CHAIN_SCHEMA) for name, tasks, _ in spec.chains
                       if len(tasks) >= 2}
        # Foxglove's own schemas, the messages written as bytes (``live.wire``), not built from the SDK's objects
        schemas = {"path": messages.PosesInFrame.get_schema(), "markers": messages.SceneUpdate.get_schema()}
        self.outputs = {r.topic: foxglove.Channel(topic_of(r.topic), schema=schemas[r.codec],
                                                  message_encoding="protobuf", context=ctx) for r in spec.routes}
        self.tf = (foxglove.Channel(TF_TOPIC, schema=messages.FrameTransforms.get_schema(), message_encoding="protobuf",
                                    context=ctx) if any(r.codec == "path" for r in spec.routes) else None)
        self._fixed = {"safety": self.safety, "mode": self.modes, "spec": self.spec}

    def _json(self, topic: str, schema: dict[str, Any]) -> Any:
        return self._foxglove.Channel(topic, schema=schema, context=self._ctx)

    def task(self, task: str) -> Any:
        """A task's ``jobs`` channel, made on first use."""
        ch = self.tasks.get(task)
        if ch is None:
            ch = self.tasks[task] = self._json(f"/rt/tasks/{task}/jobs", JOBS_SCHEMA)
        return ch

    def wants_task(self, task: str) -> bool:
        """Someone receives the task's jobs (a client subscribed, or a file)."""
        return self.task(task).has_sinks()

    def wants_chain(self, chain: str) -> bool:
        """Someone receives the chain's latencies."""
        ch = self.chains.get(chain)
        return ch is not None and ch.has_sinks()

    def of(self, what: str) -> Any:
        """The channel of a message ``live.state`` sends at once (``safety``, ``mode``, ``spec``)."""
        return self._fixed[what]
