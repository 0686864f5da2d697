"""`rt-runtime compile`: the kernels each task's graph calls, the mode each gets and why; bad input in one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay_fixtures import short_bag  # noqa: F401 - a fixture
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
    code, out, _ = run_cli(["--task", "radar_objects", "--json", "--seconds", "10", "--no-bag"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["mode"] == "auto"
    kernels = {r["kernel"]: r for r in doc["kernels"]}
    assert set(kernels) == {"pipelines.radar._cluster", "pipelines.radar._objects"}
    assert all(r["task"] == "radar_objects" and r["mode"] == "eager" and "no compiled mode measured" in r["why"]
               for r in kernels.values())
    assert all(r["calls"] == pytest.approx(10 / 0.05) for r in kernels.values())   # 20 Hz x 10 s, one call a job
    lines = render(doc["kernels"], explain=True).splitlines()
    assert lines[0].split()[:3] == ["task", "kernel", "mode"] and len(lines) == 3
    assert all(ln.split()[:3] == ["radar_objects", ln.split()[1], "eager"] and ln.endswith("(rt-runtime compile --build measures)")
               and "on the warm-up's zeros: eager - us x 200 calls" in ln for ln in lines[1:])


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
    (["--bag", "b", "--no-bag"], "not allowed with argument --bag"),
    (["--samples", "0"], "--samples: expected a positive count, found 0"),
])
def test_bad_input_is_one_line_and_exit_2(argv, words, capsys):
    try:
        code, _, err = run_cli(argv, capsys)
    except SystemExit as e:   # argparse's own refusals
        code, err = e.code, capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and words in lines[0], err


def test_compile_measures_each_kernel_on_the_bags_arguments_and_explain_says_so(short_bag, monkeypatch,  # noqa: F811
                                                                              tmp_path, capsys):
    """The bag's first second, eager: real shapes recorded (not the warm-up's 256 rows of zeros), timed, labelled."""
    monkeypatch.setenv("RT_RUNTIME_CACHE", str(tmp_path))
    code, out, err = run_cli(["--bag", str(short_bag), "--bag-seconds", "1", "--samples", "3", "--task",
                              "radar_objects", "--json", "--seconds", "10"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["inputs"] == "3 calls a kernel recorded from highway_3s (its first 1 s)"
    kernels = {r["kernel"]: r for r in doc["kernels"]}
    cluster = kernels["pipelines.radar._cluster"]
    assert all(r["inputs"] == doc["inputs"] and len(r["shapes"]) == 3 for r in kernels.values())
    # the radar's points: a scan's returns, not the warm-up's min(bound, 256) rows
    rows = [shapes[0][0] for shapes in cluster["shapes"]]
    assert all(0 < n < 256 for n in rows), rows
    # both sets of figures measured, the bag's chosen by: on the zeros every point sits at the origin
    assert cluster["t_eager"] > 0 and cluster["probe"]["t_eager"] > 0 and cluster["probe"]["mode"] == "eager"
    assert cluster["probe"]["t_eager"] > 2 * cluster["t_eager"]   # 5x here
    line = render([cluster], explain=True).splitlines()[1]
    assert f"on {doc['inputs']}: eager" in line and "on the warm-up's zeros (not used): eager" in line
    rec = json.loads(next(p for p in tmp_path.glob("*.json") if "_cluster" in p.read_text()).read_text())
    assert rec["real"]["inputs"] == doc["inputs"] and rec["real"]["t_eager"] == pytest.approx(cluster["t_eager"])


def test_a_missing_bag_or_one_without_the_configs_topics_is_one_line(tmp_path, capsys):
    from rt_runtime.bag import BagWriter, msg_class

    tiny = tmp_path / "tiny"
    with BagWriter(tiny, "mcap") as w:
        w.add_topic("/s", "std_msgs/msg/String")
        w.write("/s", 1000, msg_class("std_msgs/msg/String")(data="x"))
    for bag, words in ((tmp_path / "nope", "nope"), (tiny, "the configuration needs topic(s)")):
        code, _, err = run_cli(["--bag", str(bag), "--task", "radar_objects"], capsys)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("rt-runtime compile: ") and words in lines[0], err
