"""`rt-runtime analyze` end to end: its JSON, HTML, plots and Perfetto outputs, bad input, and a replay
whose own summary must agree with what analyze reads from the replay's trace."""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from rt_runtime.cli import main
from test_analyze import inflate, run_traced

CAUSES = {"overrun", "interference", "blocking", "late_input", "aborted"}
STACK = Path(__file__).resolve().parents[1] / "config" / "stack.yaml"


@pytest.fixture(scope="module")
def hog_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    specs = [("H", 5, 5, 1, [("spin", 500)], 0), ("V", 20, 20, 12, [(f"v{i}", 1000) for i in range(9)], 0),
             ("Lo", 100, 100, 8, [("short", 1000), ("long", 3000)], 0)]
    path, _ = run_traced(specs, "rm", 400, tmp_path_factory.mktemp("hog"),
                         cost=inflate("H", 0, lambda j: (j // 4) % 5 == 1, 3000))
    return path


def test_json_is_one_document_in_the_documented_shape(hog_trace: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["analyze", str(hog_trace), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)   # exactly one document, nothing else on stdout
    by_name = {t["name"]: t for t in doc["tasks"]}
    assert set(by_name) == {"H", "V", "Lo"}
    for t in doc["tasks"]:
        assert isinstance(t["jobs"], int) and isinstance(t["misses"], int) and isinstance(t["miss_ratio"], float)
        assert set(t["response_ms"]) == {"p50", "p90", "p99", "max"} and set(t["exec_ms"]) >= {"p50", "p99", "max"}
    assert by_name["V"]["misses"] == 4 and by_name["V"]["miss_ratio"] == pytest.approx(4 / 21)
    assert by_name["V"]["response_ms"]["max"] == pytest.approx(21.5)
    assert len(doc["misses"]) == 4
    for m in doc["misses"]:
        assert set(m) >= {"task", "job", "release_ms", "deadline_ms", "finish_ms", "cause"}
        assert m["task"] == "V" and m["cause"] == "interference"
        assert m["finish_ms"] - m["deadline_ms"] == pytest.approx(1.5)
        assert next(iter(m["accounting"]["interference_ms"])) == "H"
    assert doc["rta"]["schedulable"] is False


def test_text_report_names_the_cause_and_the_verdict(hog_trace: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["analyze", str(hog_trace)]) == 0
    out = capsys.readouterr().out
    assert "V#1: released 20.00, deadline 40.00, finished 41.50, late by 1.50 -> interference by H" in out
    assert "response 21.50 ms = own 9.00 + interference 12.50 (H 12.50)" in out
    assert "with what was observed, this configuration is not schedulable under rm" in out


def test_html_plots_and_perfetto(hog_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    html, plots, perfetto = tmp_path / "r.html", tmp_path / "plots", tmp_path / "p.json"
    assert main(["analyze", str(hog_trace), "--html", str(html), "--plots", str(plots), "--perfetto", str(perfetto),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    text = html.read_text()
    assert text.count("src='data:image/png;base64,") >= 3 and "<script" not in text and "href=" not in text
    assert "V#1" in text and "interference" in text
    names = sorted(p.name for p in plots.iterdir())
    assert {"response_cdf.png", "exec_hist.png", "timeline_V_1.png"} <= set(names)
    assert all((plots / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names)
    events = json.loads(perfetto.read_text())["traceEvents"]
    assert sum(1 for e in events if e.get("name", "").startswith("deadline miss")) == 4
    assert str(html) in doc["written"]


@pytest.mark.parametrize("content", [None, b"not a zip at all", b"PK\x03\x04garbage"])
def test_missing_or_corrupt_trace_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                         content: bytes | None) -> None:
    path = tmp_path / "bad.rttrace"
    if content is not None:
        path.write_bytes(content)
    assert main(["analyze", str(path), "--json"]) == 2
    err = capsys.readouterr()
    assert err.out == ""
    lines = err.err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in err.err


def test_explicit_config_that_cannot_be_read_is_a_usage_error(hog_trace: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    assert main(["analyze", str(hog_trace), "--config", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in capsys.readouterr().err


@pytest.mark.wallclock
def test_analyze_agrees_with_the_replay_summary(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A 2 s replay of the reference stack: jobs, misses and response p50/p99/max must match its summary."""
    import dataclasses

    from rt_runtime.commands.replay import result_json
    from rt_runtime.config.stack import load_stack
    from rt_runtime.replay import replay
    from rt_runtime.sim import Rig, record

    t0 = time.perf_counter()
    # Rig.small()'s 160x96 camera does not fit the stack's camera graph (it is planned for 640x384):
    # keep the full camera, take the small LiDAR.
    record(tmp_path / "bag", "highway_cut_in", 2.0, 11, "mcap", rig=Rig(lidar=Rig.small().lidar))
    trace = tmp_path / "replay.rttrace"
    cfg = load_stack(STACK)
    # A planning deadline below its execution time, so that there are misses to count and explain
    # (planning degrades to its fallback graph and recovers, so the chain still has outputs). Measured
    # timing: under budget timing the fallback, which takes the same budget, would miss too.
    cfg.tasks = [dataclasses.replace(t, deadline_ns=2_000_000) if t.name == "planning" else t for t in cfg.tasks]
    cfg.chains = [dataclasses.replace(c, deadline_ns=None) for c in cfg.chains]   # hop by hop: planning's own deadline
    result = replay(tmp_path / "bag", cfg, trace=trace, timing="measured")
    assert result.misses > 0
    summary = {t["name"]: t for t in result_json(result)["tasks"]}
    assert main(["analyze", str(trace), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    got = {t["name"]: t for t in doc["tasks"]}
    assert set(got) == set(summary)
    for name, s in summary.items():
        g, times = got[name], result.tasks[name]
        assert g["jobs"] == s["jobs"] and g["misses"] == s["misses"], name
        for k in ("p50", "p99", "max"):
            assert g["response_ms"][k] == pytest.approx(s["response_ms"][k], abs=1e-4), (name, k)
            assert g["response_ms"][k] == pytest.approx(times.percentiles_ms()[k], abs=1e-9), (name, k)
        if len(times.exec_ns):
            assert g["exec_ms"]["max"] == pytest.approx(float(np.max(times.exec_ns)) / 1e6)
    assert len([m for m in doc["misses"] if m["missed"]]) == result.misses
    assert {c["name"] for c in doc["chains"]} == {"lidar_to_plan", "fusion_to_plan"}   # from the config the trace names
    assert doc["chains"][0]["outputs"] > 0
    assert time.perf_counter() - t0 < 150   # 14 s beside a CPU hog here
    assert doc["rta"]["policy"] == "edf" and "verdict" in doc["rta"]
    # How each task's graph ran: on the CPU nothing is captured, every job runs eagerly, none "falls back".
    graphs = doc["graphs"]
    assert doc["trace"]["device"] == "cpu" and {n.split("/")[0] for n in graphs} == set(summary)
    assert "planning/fallback" in graphs   # the degraded mode's graph is listed beside the nominal one
    for name in summary:   # every finished job ran one of the task's graphs (plus two warm-up runs each)
        runs = sum(g["jobs"] for n, g in graphs.items() if n.split("/")[0] == name)
        assert runs >= result.tasks[name].finished, name
    for name, g in graphs.items():
        assert g["captures"] == g["replays"] == g["fallbacks"] == 0 and g["arena_bytes"] > 0, name
    for m in doc["misses"]:
        assert set([m["cause"]] if isinstance(m["cause"], str) else m["cause"]) <= CAUSES
