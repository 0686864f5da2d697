"""`rt-runtime compile`: the kernels each task's graph calls, the mode each gets and why; bad input in one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rt_runtime import cli
from rt_runtime.commands.compile import render

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
    lines = render(doc["kernels"], explain=True).splitlines()
    assert lines[0].split()[:3] == ["task", "kernel", "mode"] and len(lines) == 3
    assert all(ln.split()[:3] == ["radar_objects", ln.split()[1], "eager"] and ln.endswith("(rt-runtime compile measures)")
               and "eager - us x 200 calls" in ln for ln in lines[1:])


def test_explain_shows_each_modes_numbers_and_a_refusal() -> None:
    row = {"task": "t", "kernel": "k", "mode": "jit", "calls": 6000.0, "t_eager": 1e-3, "t": {"jit": 2e-4},
           "cost": {"jit": 12.0, "aot": 3.0}, "bit_equal": {"jit": True}, "net": {"jit": -7.2},
           "why": "aot failed: GuardOnDataDependentSymNode: u0"}
    line = render([row], explain=True).splitlines()[1]
    assert line.split()[:3] == ["t", "k", "jit"]
    assert line.endswith("eager 1000.0 us x 6000 calls; jit 200.0 us (cost 12.0 s, bit-identical, net -7.20 s); "
                         "aot failed: GuardOnDataDependentSymNode: u0")
    assert render([row], explain=False).splitlines()[1].split() == ["t", "k", "jit"]


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
