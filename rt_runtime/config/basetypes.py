"""The schema's small pieces that need nothing of the runtime: durations, refs, ``realtime:``, ``keys``.

``config.schema`` (the stack file's models) re-exports them; the DeadlineExecutor's configuration
(``ros.deadline.config``) and ``config.realtime`` take them from here, so reading that file imports
pydantic and ``core.units`` only, not the scheduler, the codecs and torch that the stack schema needs.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from ..core.units import DURATION_RE

# A duration with its unit, as ``core.units.parse_duration`` reads it ("10ms", "250us", "1.5s", "500ns").
Duration = Annotated[str, StringConstraints(pattern=DURATION_RE.pattern)]
# ``package.module:function``, as ``stack.resolve`` imports it.
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
Ref = Annotated[str, StringConstraints(pattern=rf"^{_IDENT}(\.{_IDENT})*:{_IDENT}$")]


class Model(BaseModel):
    """A config model: unknown keys refused, types strict, each field's docstring its description."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)


class Realtime(Model):
    """SCHED_FIFO and CPU pinning of the runtime's workers."""

    enabled: bool = True
    """SCHED_FIFO and pinning where the OS permits."""
    priority: Annotated[int, Field(ge=1, le=98)] = 50
    """The workers' SCHED_FIFO priority (the timekeeper runs one above)."""
    cpus: Annotated[list[int], Field(min_length=1)] | None = None
    """CPUs the workers are pinned to, in turn (default: every CPU the process may use)."""


def keys(model: type[BaseModel]) -> tuple[str, ...]:
    """The model's keys, in declaration order."""
    return tuple(model.model_fields)


REALTIME_KEYS = keys(Realtime)
