"""Configuration: YAML loading and validation with clear errors (file, then task or chain, then field)."""
from __future__ import annotations

from typing import Any

__all__ = ["ConfigError", "load_taskset", "load_yaml", "parse_chains", "parse_task", "parse_taskset"]


def __getattr__(name: str) -> Any:
    """The task-set names, imported on first use: ``config.yamlfile`` alone (the bag reader reads a
    metadata.yaml with it) must not pull in the schema, the scheduler and with them torch."""
    if name in __all__:
        from . import taskset

        return getattr(taskset, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
