"""Deterministic replay of recorded bags through the configured stack."""
from .engine import DIAGNOSTICS_TOPIC, ReplayError, ReplayResult, replay

__all__ = ["DIAGNOSTICS_TOPIC", "ReplayError", "ReplayResult", "replay"]
