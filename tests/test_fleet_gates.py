"""Fleet replay's pure parts: gates on dotted paths, bag selection, the Parquet store, the reports."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rt_runtime.config import ConfigError
from rt_runtime.fleet.bags import BagSelectionError, content_hash, find_bags
from rt_runtime.fleet.gates import (Bound, check, format_failures, gate_lines, gate_verdict, load_expect, lookup,
                                    parse_expect)
from rt_runtime.fleet.report import fleet_cdf, junit_xml, worst
from rt_runtime.fleet.runner import BagOutcome, gate_row, run_batch
from rt_runtime.fleet.store import ResultsStore, StoreError
from rt_runtime.fleet.task import BagJob, new_row

DOC = {"misses": 0, "deterministic": True,
       "tasks": [{"name": "lidar", "response_ms": {"p99": 31.2}}, {"name": "planning", "response_ms": {"p99": 72.5}}],
       "quality": {"planning": {"collision_free_rate": 0.9}}}


def test_paths_step_into_mappings_and_select_list_elements_by_name():
    assert lookup(DOC, "tasks.planning.response_ms.p99") == 72.5
    assert lookup(DOC, "quality.planning.collision_free_rate") == 0.9
    assert lookup(DOC, "tasks.radar.response_ms.p99") is not None and check(
        DOC, [Bound("tasks.radar.response_ms.p99", "max", 1)])[0].found is None


def test_a_bag_fails_exactly_the_bounds_it_breaks():
    bounds = parse_expect({"misses": {"max": 0}, "tasks.planning.response_ms.p99": {"max": 60},
                           "quality.planning.collision_free_rate": {"min": 1.0}, "deterministic": {"equal": True},
                           "tasks.lidar.response_ms.p99": {"min": 1, "max": 40}}, "e.yaml")
    broken = check(DOC, bounds)
    assert [(f.bound.path, f.bound.kind) for f in broken] == [
        ("tasks.planning.response_ms.p99", "max"), ("quality.planning.collision_free_rate", "min")]
    good = {**DOC, "tasks": [DOC["tasks"][0], {"name": "planning", "response_ms": {"p99": 59.9}}],
            "quality": {"planning": {"collision_free_rate": 1.0}}}
    assert gate_verdict(good, bounds) == {"passed": True, "failures": []}


def test_a_missing_path_or_a_non_number_fails_rather_than_passes():
    broken = check({"misses": None, "deterministic": 1}, [Bound("misses", "max", 0), Bound("quality.x", "min", 0),
                                                          Bound("deterministic", "equal", True)])
    assert [f.why for f in broken] == ["not a number: None", "not in the replay's results", "1 != True"]


@pytest.mark.parametrize("text, says", [
    ("misses: {maxx: 0}\n", "misses: unknown bound 'maxx'"),
    ("misses: {max: .inf}\n", "misses.max: expected a finite number"),
    ("misses: 0\n", "misses: expected bounds such as {max: 0}"),
    ("tasks..p99: {max: 1}\n", "expected a dotted path"),
    ("- misses\n", "expected a mapping of dotted paths"),
    ("", "the file is empty"),
    ("misses: {max: 0}\nmisses: {max: 1}\n", "found key 'misses' twice"),
])
def test_a_bad_expect_file_is_one_line_naming_the_file_and_path(tmp_path, text, says):
    p = tmp_path / "expect.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_expect(p)
    assert str(e.value).startswith(str(p)) and says in str(e.value) and "\n" not in str(e.value)


def test_replay_summary_says_whether_the_bounds_hold():
    assert gate_lines({"passed": True, "failures": []}, "e.yaml") == ["expect e.yaml: every bound holds"]
    lines = gate_lines(gate_verdict(DOC, [Bound("misses", "max", -1)]), "e.yaml")
    assert lines[0] == "expect e.yaml: 1 bound(s) broken" and lines[2].split() == ["misses", "<=", "-1", "0"]


def test_failure_table_lists_every_broken_bound():
    lines = format_failures([("a.mcap", [{"path": "misses", "bound": "<= 0", "found": 3}]),
                             ("b.mcap", [{"path": "quality.x", "bound": ">= 1", "found": None}])])
    assert lines[0].split() == ["bag", "path", "bound", "found"]
    assert lines[1].split() == ["a.mcap", "misses", "<=", "0", "3"]
    assert lines[2].split() == ["b.mcap", "quality.x", ">=", "1", "-"]


def _bag_dir(p: Path) -> Path:
    p.mkdir(parents=True)
    (p / "metadata.yaml").write_text("rosbag2_bagfile_information: {}\n")
    (p / f"{p.name}.mcap").write_bytes(p.name.encode())
    return p


def test_bags_are_found_in_folders_globs_and_paths_each_once(tmp_path):
    a, b = _bag_dir(tmp_path / "fleet" / "a"), _bag_dir(tmp_path / "fleet" / "day2" / "b")
    loose = tmp_path / "fleet" / "loose.db3"
    loose.write_bytes(b"x")
    (tmp_path / "fleet" / "notes.txt").write_text("not a bag")
    assert find_bags([str(tmp_path / "fleet")]) == [a, b, loose]
    assert find_bags([str(tmp_path / "fleet" / "*" / "*.mcap"), str(a)]) == [a]
    assert find_bags([str(b / "b.mcap"), str(loose)]) == [b, loose]
    for arg, says in ((str(tmp_path / "none*"), "matches no file"), (str(tmp_path / "nope"), "no such file"),
                      (str(tmp_path), "")):
        if says:
            with pytest.raises(BagSelectionError, match=says):
                find_bags([arg])
    (tmp_path / "empty").mkdir()
    with pytest.raises(BagSelectionError, match="found none there"):
        find_bags([str(tmp_path / "empty")])


def test_content_hash_follows_the_bytes_not_the_path(tmp_path):
    a = _bag_dir(tmp_path / "x" / "same")
    b = _bag_dir(tmp_path / "y" / "same")
    assert content_hash(a) == content_hash(b)
    (b / "same.mcap").write_bytes(b"other")
    assert content_hash(a) != content_hash(b)


def _row(bag: str, **kw) -> dict:
    row = new_row(BagJob(bag, f"h-{bag}", "stack.yaml", "c", "v"))
    row.update(kw)
    return row


def test_store_keeps_one_parquet_row_per_key_and_reads_them_back(tmp_path):
    store = ResultsStore(tmp_path / "results")
    tasks = [{"name": "planning", "jobs": 10, "misses": 0, "errors": 0, "p50_ms": 1.0, "p99_ms": 2.0,
              "max_ms": 2.5, "quantiles_ms": [1.0, 2.0]}]
    store.put(_row("a", output_digest="d1", misses=0, tasks=tasks, replay=json.dumps(DOC)))
    store.put(_row("b", error="bag b: cannot read"))
    store.put(_row("a", output_digest="d2", misses=1, tasks=tasks))   # the same key: replaced
    assert sorted(p.name for p in (tmp_path / "results" / "rows").iterdir()) == sorted(
        f"{_row(x)['key']}.parquet" for x in "ab")
    a = ResultsStore(tmp_path / "results").get(_row("a")["key"])
    assert (a["output_digest"], a["misses"], a["tasks"][0]["name"], a["tasks"][0]["quantiles_ms"]) == \
        ("d2", 1, "planning", [1.0, 2.0])
    assert {r["bag"] for r in store.rows()} == {"a", "b"}
    import pyarrow.dataset as ds

    assert ds.dataset(tmp_path / "results" / "rows").to_table().num_rows == 2   # one table for any reader


def test_store_refuses_a_folder_that_is_not_one(tmp_path):
    (tmp_path / "mine.txt").write_text("x")
    with pytest.raises(StoreError, match="not a results store"):
        ResultsStore.check_folder(tmp_path)
    ResultsStore.check_folder(tmp_path / "new")   # a new folder is fine


def test_resume_replays_only_what_the_store_lacks_and_regates_stored_rows(tmp_path):
    store = ResultsStore(tmp_path / "results")
    jobs = [BagJob(b, f"h-{b}", "stack.yaml", "c", "v") for b in ("a", "b", "c", "d")]
    store.put({**new_row(jobs[0]), "replay": json.dumps({"misses": 2}), "misses": 2})
    store.put({**new_row(jobs[1]), "error": "worker lost"})   # an error row is replayed again
    store.put({**new_row(jobs[3]), "code_version": "w"})      # so is one a worker made with other code
    asked: list[str] = []

    def run(todo, on_row):
        asked.extend(j.bag for j in todo)
        for j in todo:
            on_row({**new_row(j), "replay": json.dumps({"misses": 0}), "misses": 0})
        return None

    out, cut = run_batch(jobs, store, [Bound("misses", "max", 0)], run)
    assert asked == ["b", "c", "d"] and cut is None
    assert [(o.bag, o.resumed, o.passed) for o in out] == [("a", True, False), ("b", False, True), ("c", False, True),
                                                           ("d", False, True)]
    assert out[0].failures[0]["found"] == 2
    assert store.get(jobs[1].key)["error"] is None and store.get(jobs[2].key)["passed"] is True


def test_junit_has_a_testcase_per_bag_a_failure_per_bound_and_an_error_per_unreplayable_bag():
    fails = [{"path": "misses", "bound": "<= 0", "found": 2, "why": "2 > 0"},
             {"path": "quality.x", "bound": ">= 1", "found": None, "why": "not in the replay's results"}]
    outs = [BagOutcome("a", _row("a", wall_s=1.5), failures=fails), BagOutcome("b", _row("b", error="bad bag")),
            BagOutcome("c", _row("c"))]
    root = ET.fromstring(junit_xml(outs, 3.0, partial="interrupted by SIGINT after 3 of 4 bags"))
    suite = root.find("testsuite")
    assert (root.get("partial"), suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("true", "3", "1", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert [f.get("message") for f in cases["a"].findall("failure")] == ["misses <= 0, found 2",
                                                                          "quality.x >= 1, found missing"]
    assert cases["b"].find("error").get("message") == "bad bag" and not cases["c"].findall("failure")


def test_fleet_cdf_weights_each_bag_by_its_jobs_and_worst_puts_errors_first():
    t = lambda q, jobs: {"name": "planning", "jobs": jobs, "p99_ms": max(q), "quantiles_ms": q}  # noqa: E731
    outs = [BagOutcome("a", _row("a", tasks=[t([1.0, 1.0], 30)], misses=0)),
            BagOutcome("b", _row("b", tasks=[t([5.0, 5.0], 10)], misses=3)),
            BagOutcome("c", _row("c", error="x"))]
    v, p = fleet_cdf(outs)["planning"]
    assert p[list(v).index(1.0) + 1] == pytest.approx(0.75) and p[-1] == pytest.approx(1.0)
    assert [o.bag for o in worst(outs)] == ["c", "b", "a"]
    assert gate_row(outs[2].row, [Bound("misses", "max", 0)]) == []
