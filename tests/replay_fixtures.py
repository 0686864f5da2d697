"""Shared fixtures for replay tests: one short recording of the built-in scenario per session."""
from __future__ import annotations

from pathlib import Path

import pytest

from rt_runtime.sim import record

SECONDS = 3.0
SEED = 7


@pytest.fixture(scope="session")
def short_bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 s of the default scenario with the full rig the reference stack's config expects."""
    path = tmp_path_factory.mktemp("bags") / "highway_3s"
    record(path, "highway_cut_in", SECONDS, SEED, "mcap", workers=2)
    return path
