"""The live view's channels: what a run serves (``LiveSpec``, from its stack file) and their Foxglove channels.

========================================  =================================  =======================================
channel                                   schema (encoding)                  one message per
========================================  =================================  =======================================
``/rt/tasks/<task>/job``                  ``rt_runtime.Job`` (json)          job of the task, when it ends
``/rt/tasks/<task>/window``               ``rt_runtime.TaskWindow`` (json)   job: the task's last 100 jobs
``/rt/safety``                            ``rt_runtime.Safety`` (json)       change of the safety level
``/rt/degraded``                          ``rt_runtime.Degraded`` (json)     task switched to/from its fallback
``/rt/speculation``                       ``rt_runtime.Speculation`` (json)  speculation verdict (hit or miss)
``/rt/chains/<chain>``                    ``rt_runtime.ChainLatency`` (json) output of the chain's last task
``/rt/out/<egress topic>`` (path)         ``foxglove.PosesInFrame`` (pb)     1 / --foxglove-hz s of logical time
``/rt/out/<egress topic>`` (markers)      ``foxglove.SceneUpdate`` (pb)      1 / --foxglove-hz s of logical time
``/rt/live``                              ``rt_runtime.Live`` (json)         20 ms of wall time, and at the end
========================================  =================================  =======================================
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .chains import CHAIN_SCHEMA
from .outputs import DEFAULT_HZ, SCHEMAS, topic_of
from .state import JOB_SCHEMA, LIVE_SCHEMA, MODE_SCHEMA, SAFETY_SCHEMA, SPEC_SCHEMA, TASK_SCHEMA


@dataclass(frozen=True)
class LiveSpec:
    """What a run serves: its tasks, its chains (name, tasks, run-time deadline ns or None), its egress routes
    (``config.stack.EgressRoute``: the outputs drawn), at ``hz`` per route, in ``frame``."""

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
            from foxglove import channels as typed
            from foxglove import messages
        self.messages = messages
        self._foxglove, self._ctx = foxglove, ctx
        self.tasks: dict[tuple[str, str], Any] = {}
        self.safety = self._json("/rt/safety", SAFETY_SCHEMA)
        self.modes = self._json("/rt/degraded", MODE_SCHEMA)
        self.spec = self._json("/rt/speculation", SPEC_SCHEMA)
        self.live = self._json("/rt/live", LIVE_SCHEMA)
        self.chains = {name: self._json(f"/rt/chains/{name}", CHAIN_SCHEMA) for name, tasks, _ in spec.chains
                       if len(tasks) >= 2}
        kinds = {"path": typed.PosesInFrameChannel, "markers": typed.SceneUpdateChannel}
        self.outputs = {r.topic: kinds[r.codec](topic_of(r.topic), context=ctx) for r in spec.routes}
        self._fixed = {"safety": self.safety, "mode": self.modes, "spec": self.spec}

    def _json(self, topic: str, schema: dict[str, Any]) -> Any:
        return self._foxglove.Channel(topic, schema=schema, context=self._ctx)

    def task(self, what: str, task: str) -> Any:
        """A task's ``job`` or ``task`` (window) channel, made on first use."""
        ch = self.tasks.get((what, task))
        if ch is None:
            name = "window" if what == "task" else what
            ch = self.tasks[(what, task)] = self._json(f"/rt/tasks/{task}/{name}",
                                                       JOB_SCHEMA if what == "job" else TASK_SCHEMA)
        return ch

    def of(self, what: str, msg: dict[str, Any]) -> Any:
        """The channel of a folded message (``live.state``'s and ``live.chains``' kinds)."""
        ch = self._fixed.get(what)
        if ch is not None:
            return ch
        if what == "chain":
            return self.chains[msg["chain"]]
        return self.task(what, msg["task"])
