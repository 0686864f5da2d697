"""`rt-runtime compile`: the kernels each task's graph calls, the mode each gets and why; bad input in one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rt_runtime import cli

ROOT = Path(__file__).resolve().parents[1]
STACK = str(ROOT / "config" / "stack.yaml")


def run_cli(argv, capsys):
    code = cli.main(["compile", "--config", STACK, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_auto_with_nothing_measured_keeps_every_kernel_eager_and_says_why(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("RT_RUNTIME_CACHE", str(tmp_path))
    code, out, _ = run_cli(["--task", "radar_objects", "--json", "--seconds", "10"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["mode"] == "auto"
    kernels = {r["kernel"]: r for r in doc["kernels"]}
    assert set(kernels) == {"pipelines.radar._cluster", "pipelines.radar._objects"}
    assert all(r["task"] == "radar_objects" and r["mode"] == "eager" and "nothing measured" in r["why"]
               for r in kernels.values())
    assert all(r["calls"] == pytest.approx(10 / 0.05) for r in kernels.values())   # 20 Hz x 10 s, one call a job
    code, out, _ = run_cli(["--task", "radar_objects", "--explain", "--mode", "eager"], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:3] == ["task", "kernel", "mode"] and len(lines) == 3
    assert all(ln.split()[:3] == ["radar_objects", ln.split()[1], "eager"] and ln.endswith("asked") for ln in lines[1:])


@pytest.mark.parametrize("argv, words", [
    (["--task", "nope"], "--task: no task 'nope' in"),
    (["--build", "fast"], "expected a comma-separated list of jit, aot; found 'fast'"),
    (["--mode", "fastest"], "invalid choice: 'fastest'"),
])
def test_bad_input_is_one_line_and_exit_2(argv, words, capsys):
    try:
        code, _, err = run_cli(argv, capsys)
    except SystemExit as e:   # argparse's own refusals
        code, err = e.code, capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and words in lines[0], err
