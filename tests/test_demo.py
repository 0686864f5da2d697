"""`make demo`'s main job, end to end: the built-in scenario through the reference stack, outputs and report."""
from __future__ import annotations

import pytest

from rt_runtime.bag import open_bag
from rt_runtime.cli import main
from rt_runtime.trace import load_trace


@pytest.mark.timeout(600)
def test_demo_replays_the_built_in_scenario_and_reports(tmp_path, capsys) -> None:
    assert main(["demo", "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "logical timeline (budget timing" in out and "this machine (measured step times" in out
    assert "deterministic (budget timing" in out and "; clean" in out and "safety: nominal throughout" in out
    with open_bag(tmp_path / "demo_outputs") as bag:
        assert {"/planning/trajectory", "/perception/objects", "/diagnostics"} <= set(bag.topics)
    cols, meta = load_trace(tmp_path / "demo.rttrace")
    assert len(cols) > 0 and meta["timing"] == "budget"
    assert main(["demo", "--out-dir", str(tmp_path)]) == 0   # a second run replaces its own outputs
