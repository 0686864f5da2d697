"""`rt-runtime calibrate`: real replays of the short bag, budgets checked against the trace they came from."""
from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from rt_runtime.cli import main
from rt_runtime.commands.calibrate import Budget, fallback_shares, fmt, plan, rewrite, round_up
from rt_runtime.config.stack import build_bindings, load_stack
from rt_runtime.core.units import parse_duration
from rt_runtime.sched.events import EventKind as K
from rt_runtime.trace import load_trace

from replay_fixtures import short_bag  # noqa: F401 - a fixture

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "config" / "stack.yaml"


def cli(*args: str) -> tuple[int, str, str]:
    """``rt-runtime ARGS`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def calibrated(short_bag, tmp_path_factory):  # noqa: F811
    """One calibration of the reference stack on the short bag, with its trace kept."""
    d = tmp_path_factory.mktemp("calibrate")
    rc, out, err = cli("calibrate", str(short_bag), "--config", str(CONFIG), "--out", str(d / "cal.yaml"),
                       "--trace", str(d / "cal.rttrace"), "--json")
    assert rc in (0, 1), err
    return rc, json.loads(out), d / "cal.yaml", d / "cal.rttrace"


def trace_p99s(trace: Path) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Recomputed here from the raw events: per task the p99 of finished primary jobs, per op its p99."""
    cols, meta = load_trace(trace)
    done = {(t, j) for k, t, j in zip(cols.kind, cols.task, cols.job) if k == K.FINISH}
    fb = {(t, j) for k, t, j, b in zip(cols.kind, cols.task, cols.job, cols.b) if k == K.START and b == 1}
    jobs: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for k, t, j, a, b in zip(cols.kind, cols.task, cols.job, cols.a, cols.b):
        if k == K.MEASURED and (t, j) in done and (t, j) not in fb:
            jobs.setdefault((int(t), int(j)), []).append((int(a), int(b)))
    tasks: dict[str, list[int]] = {}
    ops: dict[str, dict[str, list[int]]] = {}
    for (t, _), steps in jobs.items():
        name = cols.tasks[t]
        if steps and steps[-1][0] == len(meta["ops"][name]):
            # a run's output-invariants check step (and the executor's tail after it): its cost is declared apart
            steps = [st for st in steps if st[0] < len(meta["ops"][name])]
        if len(steps) != len(meta["ops"][name]):
            continue   # the reference stack's steps are single ops; a shorter job was cut off
        tasks.setdefault(name, []).append(sum(b for _, b in steps))
        for a, b in steps:
            ops.setdefault(name, {}).setdefault(meta["ops"][name][a], []).append(b)
    return ({n: float(np.percentile(v, 99)) for n, v in tasks.items()},
            {n: {op: float(np.percentile(v, 99)) for op, v in o.items()} for n, o in ops.items()})


def test_budgets_are_the_traces_p99_times_margin(calibrated):
    rc, doc, out, trace = calibrated
    job_p99, op_p99 = trace_p99s(trace)
    cfg = load_stack(out)
    entries, before = cfg.entries, load_stack(CONFIG).entries
    shares = fallback_shares(cfg)
    assert set(job_p99) == set(entries)
    for name, p99 in job_p99.items():
        wcet = parse_duration(entries[name]["wcet"])
        assert p99 * 1.5 - 1 <= wcet < p99 * 1.5 + 10_000, name      # rounded up to 10 us
        ops = {op: parse_duration(v) for op, v in entries[name]["op_budgets"].items()}
        want = {op: round_up(v * 1.5) for op, v in op_p99[name].items()}
        if name in shares:   # ops the fallback also runs must fit its fallback_wcet, else they keep their budget
            shared, budget = shares[name]
            if sum(ns for op, ns in want.items() if op in shared) > budget:
                kept = {op: parse_duration(v) for op, v in (before[name].get("op_budgets") or {}).items()}
                assert all(ops.get(op) == kept.get(op) for op in shared), name
                ops = {op: ns for op, ns in ops.items() if op not in shared}
                want = {op: ns for op, ns in want.items() if op not in shared}
        assert set(ops) == set(want) and sum(ops.values()) <= wcet, name
        if sum(want.values()) <= wcet:
            assert ops == want, name
        else:   # scaled down proportionally to fit
            f = wcet / sum(want.values())
            assert all(want[op] * f - 10_000 <= ns <= want[op] * f for op, ns in ops.items()), name
    t = {x["name"]: x for x in doc["tasks"]}
    assert all(math.isclose(t[n]["p99_ms"], job_p99[n] / 1e6, abs_tol=1e-4) for n in job_p99)
    build_bindings(load_stack(out))   # op budgets checked against the built graphs too


def test_ops_the_fallback_also_runs_fit_its_own_budget_or_keep_theirs():
    # a budget is per op name: planning's minimal_risk op runs in its fallback graph too, whose budget is
    # fallback_wcet; on a loaded machine its p99 x margin exceeded it and calibrate wrote a config it refused
    b = Budget("planning", jobs=10, p99_ns=10e6, op_p99_ns={"plan": 2e6, "minimal_risk": 1.4e6})
    plan(b, 1.5, (frozenset({"minimal_risk"}), 1_600_000))
    assert b.ops == {"plan": "3ms"} and "['minimal_risk'] left out" in b.note and "fallback_wcet of 1.6ms" in b.note
    b = Budget("planning", jobs=10, p99_ns=10e6, op_p99_ns={"plan": 2e6, "minimal_risk": 1.0e6})
    plan(b, 1.5, (frozenset({"minimal_risk"}), 1_600_000))
    assert b.ops == {"plan": "3ms", "minimal_risk": "1.5ms"} and "left out" not in b.note


def test_written_config_keeps_the_original_text(calibrated):
    _, doc, out, _ = calibrated
    old, new = CONFIG.read_text().splitlines(), out.read_text().splitlines()
    header = new[1:5] if new[0].startswith("# yaml-language-server:") else new[:4]   # the schema line stays first
    assert all(h.startswith("# ") for h in header) and "x 1.5" in header[1] and "cores" in header[0]
    assert doc["machine"]["host"] in header[0] and any("command: rt-runtime calibrate" in h for h in header)
    # Every line but the budgets and the previous calibration's header is still there, in order; the
    # comments among them.
    kept = iter(new)
    at = next((i for i, line in enumerate(old[:2]) if line.startswith("# Calibrated by")), None)
    previous = old[at:at + 4] if at is not None else []
    assert all(any(line == n for n in kept) for line in old
               if "wcet:" not in line and "op_budgets:" not in line and line not in previous)
    assert sum(line.strip().startswith("#") for line in old) <= sum(line.strip().startswith("#") for line in new)
    assert sum("op_budgets:" in line for line in new) == len(doc["tasks"])


def test_verdict_matches_check(calibrated):
    rc, doc, out, _ = calibrated
    assert doc["schedulable"] == (rc == 0) and doc["out"] == str(out)
    assert cli("check", str(out))[0] == rc


def test_mapping_form_flow_entry_and_redundancy(short_bag, tmp_path):  # noqa: F811
    """Tasks as a mapping, one entry in flow style, a redundant task, and a margin no stack fits in."""
    doc = yaml.safe_load(CONFIG.read_text())
    tasks = {t.pop("name"): t for t in doc["tasks"]}
    tasks["prediction"]["redundancy"] = "dual"
    radar = tasks.pop("radar_objects")
    doc["tasks"] = tasks
    text = yaml.safe_dump(doc, sort_keys=False, width=200).replace(
        "tasks:\n", "tasks:\n  radar_objects: " + json.dumps(radar) + "   # flow style\n", 1)
    cfg = tmp_path / "mapped.yaml"
    cfg.write_text("# tasks as a mapping\n" + text)
    rc, out, err = cli("calibrate", str(short_bag), "--config", str(cfg), "--out", str(tmp_path / "c.yaml"),
                       "--margin", "20")
    assert rc == 1 and "does not fit: not schedulable under edf" in out, err
    new = (tmp_path / "c.yaml").read_text()
    assert "# tasks as a mapping" in new and "# radar_objects: calibrated:" in new
    entries = load_stack(tmp_path / "c.yaml").entries
    assert entries["radar_objects"]["op_budgets"] and entries["prediction"]["redundancy"] == "dual"
    assert "per run" in new   # the redundant task's wcet is one run: its job time over the two copies


def test_out_that_is_an_input_is_refused(short_bag, tmp_path):  # noqa: F811
    cfg = tmp_path / "stack.yaml"
    shutil.copy(CONFIG, cfg)
    before = cfg.read_bytes()
    for out in (cfg, tmp_path / "x" / ".." / "stack.yaml", short_bag, short_bag / "cal.yaml"):
        (tmp_path / "x").mkdir(exist_ok=True)
        rc, stdout, err = cli("calibrate", str(short_bag), "--config", str(cfg), "--out", str(out))
        assert rc == 2 and "--out" in err and len(err.strip().splitlines()) == 1, err
    assert cfg.read_bytes() == before


@pytest.mark.parametrize("margin", ["0", "-1", "abc", "nan", "inf"])
def test_bad_margin_is_one_line(margin, tmp_path):
    rc, _, err = cli("calibrate", str(tmp_path), "--margin", margin, "--out", str(tmp_path / "c.yaml"))
    assert rc == 2 and "--margin" in err and len(err.strip().splitlines()) == 1, err


def test_rewrite_flow_block_and_existing_op_budgets():
    text = ("policy: edf   # top\ntasks:\n"
            "  - {name: a, period: 10ms, wcet: '1ms', op_budgets: {x: 1ms, keep: 2ms}}\n"
            "  - name: b   # b\n    period: 10ms\n    wcet: 2 ms   # measured once\n    op_budgets:\n"
            "      x: 1ms   # old\n      y: 1ms\n    graph: g\n")
    bud = {"a": Budget("a", new="1.5ms", ops={"x": "700us"}, note="calibrated: A"),
           "b": Budget("b", new="3ms", ops={"x": "1ms", "y": "2ms"}, note="calibrated: B")}
    got = rewrite(text, bud, ["Calibrated by `rt-runtime calibrate` now", "two", "three", "four"])
    assert got.splitlines()[4:] == [
        "policy: edf   # top", "tasks:", "  # a: calibrated: A",
        "  - {name: a, period: 10ms, wcet: '1.5ms', op_budgets: {x: \"700us\", keep: \"2ms\"}}",
        "  - name: b   # b", "    period: 10ms", "    wcet: 3ms   # calibrated: B | measured once",
        "    op_budgets:", '      x: "1ms"', '      y: "2ms"', "    graph: g"]
    again = rewrite(got, bud, ["Calibrated by `rt-runtime calibrate` later", "2", "3", "4"])
    assert again.count("Calibrated by") == 1 and again.count("# a: calibrated") == 1
    assert "wcet: 3ms   # calibrated: B | measured once\n" in again


def test_durations_read_back_exactly():
    for ns in range(10_000, 200_000_000, 70_000):
        assert parse_duration(fmt(ns)) == ns
