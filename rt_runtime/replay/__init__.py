"""Deterministic replay of recorded bags through the configured stack."""
from __future__ import annotations

from typing import Any

__all__ = ["DIAGNOSTICS_TOPIC", "ReplayError", "ReplayResult", "replay"]


def __getattr__(name: str) -> Any:
    """The engine's names, imported on first use: the feed's reader process imports this package
    (``replay.feed``) and must not pull in the engine, and with it torch."""
    if name in __all__:
        from . import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
