"""The built-in scenario's bag (``replay.defaults.default_bag``): generated once into the cache, whole or not
at all, its storage file named after its folder as any rosbag2 folder's is."""
from __future__ import annotations

from pathlib import Path

import pytest

import rt_runtime.replay.defaults as defaults
from rt_runtime.bag import open_bag


@pytest.fixture
def short_default(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("RT_RUNTIME_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(defaults, "DEFAULT_SECONDS", 0.3)
    return tmp_path / "cache"


def test_generated_once_and_named_after_its_folder(short_default: Path) -> None:
    bag = defaults.default_bag()
    assert sorted(p.name for p in bag.iterdir()) == sorted(["metadata.yaml", f"{bag.name}.mcap"])   # no ".partial" name
    mtime = (bag / "metadata.yaml").stat().st_mtime_ns
    assert defaults.default_bag() == bag and (bag / "metadata.yaml").stat().st_mtime_ns == mtime   # not again
    with open_bag(bag) as r:
        assert r.message_count > 0 and "/sensing/lidar/points" in r.topics
    assert sorted(p.name for p in short_default.iterdir()) == [bag.name]   # nothing left beside it


def test_a_cache_entry_that_is_not_a_whole_bag_is_made_again(short_default: Path) -> None:
    bag = defaults.default_bag()
    (bag / "metadata.yaml").unlink()   # e.g. a copy that stopped half-way
    assert defaults.default_bag() == bag and (bag / "metadata.yaml").is_file()
    with open_bag(bag) as r:
        assert r.message_count > 0
