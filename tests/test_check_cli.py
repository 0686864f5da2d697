"""`rt-runtime check`: exit codes, one JSON document, the table, and clear errors for bad input."""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rt_runtime import cli
from rt_runtime.commands import check

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "config" / "examples"


@pytest.fixture(autouse=True)
def _only_existing_commands(monkeypatch):
    # cli.main imports every registered subcommand; skip any that has not landed yet.
    for name in list(cli.COMMANDS):
        if importlib.util.find_spec(f"rt_runtime.commands.{name}") is None:
            monkeypatch.delitem(cli.COMMANDS, name)


def run_cli(argv, capsys):
    code = cli.main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_json(text):
    """The output must be exactly one JSON document (whitespace around it allowed)."""
    doc, end = json.JSONDecoder().raw_decode(text.strip())
    assert end == len(text.strip()), "more than one JSON document, or trailing text"
    return doc


# ---- the examples ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name, code", [("rm_schedulable", 0), ("edf_overload", 1), ("fp_blocking", 0)])
def test_examples_exit_codes_and_json(name, code, capsys):
    path = EXAMPLES / f"{name}.yaml"
    assert run_cli([str(path)], capsys)[0] == code
    rc, out, err = run_cli([str(path), "--json"], capsys)
    assert rc == code and err == ""
    doc = one_json(out)
    assert isinstance(doc["policy"], str) and isinstance(doc["utilization"], float)
    assert doc["schedulable"] is (code == 0)
    import yaml
    names = [t["name"] for t in yaml.safe_load(path.read_text())["tasks"]]
    assert [t["name"] for t in doc["tasks"]] == names          # file order
    for t in doc["tasks"]:
        assert set(t) >= {"name", "response_time_ms", "deadline_ms", "schedulable"}
        assert t["response_time_ms"] is None or isinstance(t["response_time_ms"], float)
        assert isinstance(t["deadline_ms"], float) and isinstance(t["schedulable"], bool)
        if t["response_time_ms"] is None:
            assert not t["schedulable"]


def test_rm_example_values(capsys):
    doc = one_json(run_cli([str(EXAMPLES / "rm_schedulable.yaml"), "--json"], capsys)[1])
    by = {t["name"]: t for t in doc["tasks"]}
    # camera_detect: 12 + ceil(w/5) 0.4 -> 12.4 -> 13.2 -> 13.2 ms (one imu_filter job every 5 ms)
    assert by["camera_detect"]["response_time_ms"] == pytest.approx(13.2)
    # lidar_objects has 1 ms of release jitter, included in its response time: 1 + 34.8
    assert by["lidar_objects"]["response_time_ms"] == pytest.approx(35.8)
    assert doc["utilization"] == pytest.approx(0.62)
    assert [c["name"] for c in doc["chains"]] == ["camera_to_plan", "lidar_to_plan"]


def test_fp_example_blocking_and_jitter(capsys):
    doc = one_json(run_cli([str(EXAMPLES / "fp_blocking.yaml"), "--json"], capsys)[1])
    by = {t["name"]: t for t in doc["tasks"]}
    assert by["control"]["response_time_ms"] == pytest.approx(3.0)          # B + C = 2 + 1
    assert by["localization"]["response_time_ms"] == pytest.approx(8.0)     # J + B + C + 1 control = 1+2+4+1
    assert by["logger"]["blocking_ms"] == 0.0


def test_edf_overload_names_the_misses(capsys):
    code, out, _ = run_cli([str(EXAMPLES / "edf_overload.yaml")], capsys)
    assert code == 1 and "NOT SCHEDULABLE" in out and "QPA" in out


def test_table_columns_are_aligned(capsys):
    code, out, _ = run_cli([str(EXAMPLES / "rm_schedulable.yaml")], capsys)
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("task "))
    table = lines[start:start + 5]
    assert len({len(line) for line in table}) == 1
    col = table[0].index("verdict") + len("verdict")
    assert all(line[col - 2:col] == "ok" for line in table[1:])
    assert "SCHEDULABLE" in out and "Liu & Layland" in out and "camera_to_plan" in out


def test_subprocess_json_exit_codes(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if all(importlib.util.find_spec(f"rt_runtime.commands.{n}") for n in cli.COMMANDS):
        prefix = [sys.executable, "-m", "rt_runtime.cli"]
    else:  # a subcommand registered in cli.py has not landed yet: run main() without it
        prefix = [sys.executable, "-c", "import sys, importlib.util, rt_runtime.cli as c; "
                  "[c.COMMANDS.pop(n) for n in list(c.COMMANDS) if not importlib.util.find_spec("
                  "'rt_runtime.commands.' + n)]; sys.exit(c.main(sys.argv[1:]))"]
    p = subprocess.run([*prefix, "check", str(EXAMPLES / "edf_overload.yaml"), "--json"], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 1, p.stderr
    assert one_json(p.stdout)["schedulable"] is False
    assert "Traceback" not in p.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy: rm\ntasks:\n  - {name: a, period: 10, wcet: 1ms}\n")
    p = subprocess.run([*prefix, "check", str(bad), "--json"], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=120)
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr
    assert str(bad) in p.stderr and "'a'" in p.stderr and "period" in p.stderr


# ---- bad input: exit 2, one line naming file, task and field, no traceback --------------------
GOOD_TASK = "  - {name: ok_task, period: 10ms, wcet: 1ms}\n"
BAD = {
    "zero_period": ("policy: rm\ntasks:\n  - {name: cam, period: 0ms, wcet: 1ms}\n", ["'cam'", "period", "positive"]),
    "negative_period": ("policy: rm\ntasks:\n  - {name: cam, period: -5ms, wcet: 1ms}\n", ["'cam'", "period"]),
    "missing_wcet": ("policy: rm\ntasks:\n  - {name: cam, period: 10ms}\n", ["'cam'", "wcet", "missing"]),
    "unknown_policy": ("policy: llf\ntasks:\n" + GOOD_TASK, ["policy", "llf", "edf"]),
    "missing_policy": ("tasks:\n" + GOOD_TASK, ["policy", "missing"]),
    "bare_number": ("policy: rm\ntasks:\n  - {name: cam, period: 10ms, wcet: 2}\n", ["'cam'", "wcet", "unit"]),
    "no_unit_string": ("policy: rm\ntasks:\n  - {name: cam, period: '10', wcet: 1ms}\n", ["'cam'", "period"]),
    "duplicate_names": ("policy: rm\ntasks:\n" + GOOD_TASK + GOOD_TASK, ["'ok_task'", "name", "duplicate"]),
    "yaml_syntax": ("policy: rm\ntasks:\n  - {name: cam, period: 10ms\n", ["line", "YAML"]),
    "fp_missing_priority": ("policy: fp\ntasks:\n  - {name: cam, period: 10ms, wcet: 1ms, priority: 1}\n"
                            "  - {name: lidar, period: 20ms, wcet: 1ms}\n", ["'lidar'", "priority"]),
    "unknown_key": ("policy: rm\ntasks:\n  - {name: cam, perod: 10ms, wcet: 1ms}\n", ["'cam'", "perod", "period"]),
    "negative_jitter": ("policy: rm\ntasks:\n  - {name: cam, period: 10ms, wcet: 1ms, jitter: -1ms}\n",
                        ["'cam'", "jitter"]),
    "bad_criticality": ("policy: rm\ntasks:\n  - {name: cam, period: 10ms, wcet: 1ms, criticality: huge}\n",
                        ["'cam'", "criticality"]),
    "interarrival_without_trigger": ("policy: rm\ntasks:\n  - {name: cam, min_interarrival: 10ms, wcet: 1ms}\n",
                                     ["'cam'", "min_interarrival", "trigger"]),
    "chain_unknown_task": ("policy: rm\ntasks:\n" + GOOD_TASK + "chains:\n  - {name: c1, tasks: [ok_task, ghost]}\n",
                           ["'c1'", "tasks", "ghost"]),
    "duplicate_yaml_key": ("policy: rm\ntasks:\n  - {name: cam, period: 10ms, period: 20ms, wcet: 1ms}\n",
                           ["line", "period", "twice"]),
    "not_a_mapping": ("- just\n- a list\n", ["mapping"]),
    "empty_tasks": ("policy: rm\ntasks: []\n", ["tasks", "empty"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_exit_2(case, tmp_path, capsys):
    text, needles = BAD[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    for extra in ([], ["--json"]):
        code, out, err = run_cli([str(path), *extra], capsys)
        assert code == 2, (case, out, err)
        assert out == "" and "Traceback" not in err
        assert err.startswith(f"rt-runtime check: error: {path}: ") and err.count("\n") == 1
        for n in needles:
            assert n in err, (case, err)


def test_missing_file(tmp_path, capsys):
    path = tmp_path / "nope.yaml"
    code, out, err = run_cli([str(path)], capsys)
    assert code == 2 and out == "" and str(path) in err and "not found" in err and "Traceback" not in err


def test_run_directly_returns_2_with_message(tmp_path, capsys):
    # The command module works without cli.main too: run() prints the same one-line error.
    parser = argparse.ArgumentParser(prog="rt-runtime")
    check.add_parser(parser.add_subparsers(dest="command"), "check", "help")
    path = tmp_path / "x.yaml"
    path.write_text("policy: edf\ntasks:\n  - {name: cam, period: 10ms, wcet: 0ms}\n")
    assert check.run(parser.parse_args(["check", str(path)])) == 2
    err = capsys.readouterr().err
    assert err.startswith("rt-runtime check: error: ") and "'cam'" in err and "wcet" in err


def test_full_config_keys_and_task_mapping(tmp_path, capsys):
    # A full config carries channels, devices and runtime-only task keys: check ignores them (an unknown
    # top-level key it refuses, as replay does). Tasks may also be a mapping from name to fields.
    # Arbitrary deadlines are fine under fixed priorities.
    path = tmp_path / "full.yaml"
    path.write_text(
        "policy: dm\n"
        "description: a full config\n"
        "device: cpu\n"
        "channels: [/objects]\n"
        "tasks:\n"
        "  detector: {period: 10ms, wcet: 4ms, deadline: 15ms, graph: detector, on_miss: skip,\n"
        "             redundancy: 2, speculate: false, inputs: [/img], outputs: [/objects], worker: 0,\n"
        "             publish: on_finish, offset: 1ms}\n"
        "  tracker: {trigger: /objects, period: 20ms, wcet: 2ms, criticality: high, priority: 3}\n")
    code, out, err = run_cli([str(path), "--json"], capsys)
    assert code == 0, err
    doc = one_json(out)
    assert [t["name"] for t in doc["tasks"]] == ["detector", "tracker"]
    assert any("priority" in n for n in doc["notes"]) and any("offset" in n for n in doc["notes"])
