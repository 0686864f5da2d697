"""A parsed stack file as records: what ``stack.parse_stack`` returns and ``build.build_bindings`` reads."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..analysis.chains import Chain
from ..core.task import Task
from ..sched import ChannelConfig


@dataclass(frozen=True)
class IngressRoute:
    """Messages on ``topic`` are decoded by ``codec``; each decoded role is pushed into its channel."""

    topic: str
    codec: str
    channels: Mapping[str, str]


@dataclass(frozen=True)
class EgressRoute:
    """The channels' values published at one instant become one ``codec`` message on ``topic``."""

    topic: str
    codec: str
    channels: Mapping[str, str]


@dataclass
class StackConfig:
    """A validated stack file: everything needed to build and run the runtime."""

    source: str
    policy: str
    tasks: list[Task]
    entries: dict[str, Mapping[str, Any]]
    chains: list[Chain]
    channels: list[ChannelConfig]
    ingress: list[IngressRoute]
    egress: list[EgressRoute]
    device: str = "cpu"
    workers: int = 1
    steal: bool = False   # work-conserving dispatch across workers (sched/dispatch.py)
    threads: int = 1
    frame: str = "map"
    diagnostics_period_ns: int = 1_000_000_000
    remap: dict[str, str] = field(default_factory=dict)
    safety: Any = None   # a ``safety.spec.SafetySpec``: the degrade supervisor; None: not installed
    realtime: Any = None   # a ``realtime.RealtimeSpec``: SCHED_FIFO, priority, CPUs; None: the command's default

    def topics_in(self) -> list[str]:
        """The input topics, after remapping."""
        return [r.topic for r in self.ingress]
