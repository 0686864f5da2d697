"""Safety: the runtime's safety extensions: time redundancy (compare / vote), degrade modes, the
supervisor, input screening and invariants, speculation (docs/SAFETY.md). The fault-injection campaign
that exercises them drives the stack from outside, as replay does: ``rt_runtime.faults``.

Light to import: the torch-dependent parts (``RedundantExecutor``, the monitor) load on first use.
"""
from __future__ import annotations

from typing import Any

from .degrade import DEGRADED, MINIMAL_RISK, NOMINAL, STATES, DegradeStateMachine
from .spec import RedundancySpec

_LAZY = {"RedundantExecutor": ".redundancy", "Redundant": ".redundancy", "SafetyMonitor": ".monitor"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DEGRADED", "MINIMAL_RISK", "NOMINAL", "STATES", "DegradeStateMachine", "RedundancySpec", *_LAZY]
