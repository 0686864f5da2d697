"""Safety: time redundancy (compare / vote), fault injection campaigns, degrade modes (docs/SAFETY.md).

Light to import: the torch-dependent parts (``RedundantExecutor``, the campaign) load on first use.
"""
from __future__ import annotations

from typing import Any

from .degrade import DEGRADED, MINIMAL_RISK, NOMINAL, STATES, DegradeStateMachine
from .spec import RedundancySpec, parse_redundancy

_LAZY = {"RedundantExecutor": ".redundancy", "Redundant": ".redundancy", "SafetyMonitor": ".monitor",
         "Injector": ".inject", "Injection": ".inject", "CampaignConfig": ".campaign", "run_campaign": ".campaign",
         "load_campaign": ".campaign"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DEGRADED", "MINIMAL_RISK", "NOMINAL", "STATES", "DegradeStateMachine", "RedundancySpec",
           "parse_redundancy", *_LAZY]
