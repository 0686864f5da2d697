"""The last tracebacks and unnamed errors of the bad-input probe (issue 27): each is one line naming the
file, task, field or flag, what was expected and what was found; exit 2; nothing written.

A bag's storage file cut at every byte near either end (its magics, first records, footer), a trace whose
metadata has a field of the wrong type, a bag of random bytes for `faults --bag`, `demo --out-dir` naming a
file, a task's enum-valued fields with values they do not take, and a graph argument of the wrong type.
Real commands (``rt_runtime.cli.main``), real bags and traces; the helpers are test_bad_input's.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from test_bad_input import one_line, run, snapshot, stack_with, write


# ---- a storage file cut near either end --------------------------------------------------------------
@pytest.fixture(scope="module")
def storage_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The bytes of a small bag's storage file in each format (.mcap, .db3), as a user may pass one bare."""
    from rt_runtime.bag import BagWriter, msg_class

    d = tmp_path_factory.mktemp("storage")
    out = {}
    for fmt, suffix in (("mcap", ".mcap"), ("sqlite3", ".db3")):
        with BagWriter(d / fmt, fmt) as w:
            w.add_topic("/s", "std_msgs/msg/String")
            for i in range(5):
                w.write("/s", i * 1000, msg_class("std_msgs/msg/String")(data=str(i)))
        out[suffix] = next((d / fmt).glob(f"*{suffix}")).read_bytes()
    return out


def read_or_refused(rc: int, err: str, command: str, path: Path) -> None:
    """Exit 0 (what was readable, a warning beside it) or exit 2 with one line naming the file; no traceback."""
    assert "Traceback" not in err and rc in (0, 2), (rc, err)
    if rc == 2:
        one_line(err, f"rt-runtime {command}: error:", str(path))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("suffix", [".mcap", ".db3"])
def test_a_storage_file_cut_at_any_byte_near_its_ends_is_read_or_refused(suffix, storage_files, tmp_path, capsys):
    # Every length 0..64 (inside the magic: `TypeError: ord() expected a character` from the bag library
    # at exactly the 8-byte magic), and the last 64 bytes (the footer and the trailing magic).
    data = storage_files[suffix]
    path = tmp_path / f"cut{suffix}"
    for n in [*range(65), *range(len(data) - 64, len(data))]:
        path.write_bytes(data[:n])
        rc, out, err = run(["inspect", path], capsys)
        read_or_refused(rc, err, "inspect", path)
    for n in (0, 5, 8, 9, 40, len(data) - 37, len(data) - 3):   # the commands that read bags, at the telling cuts
        path.write_bytes(data[:n])
        for argv in (["replay", path], ["faults", "--bag", path]):
            rc, out, err = run(argv, capsys)
            assert rc == 2, (n, argv, err)
            one_line(err, f"rt-runtime {argv[0]}: error:", str(path))
    path.write_bytes(data[:8])
    if suffix == ".mcap":   # the magic and nothing after it: said so, not the bag library's TypeError
        rc, _, err = run(["inspect", path], capsys)
        assert rc == 2 and "ord()" not in one_line(err, "the file ends after its magic: no records")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name, data", [("random.mcap", os.urandom(3000)), ("random.db3", os.urandom(3000)),
                                        ("random.bin", os.urandom(3000))])
def test_faults_on_a_bag_of_random_bytes_is_one_line(name, data, tmp_path, capsys):
    path = tmp_path / name
    path.write_bytes(data)
    before = snapshot(tmp_path)
    rc, out, err = run(["faults", "--bag", path], capsys)
    assert rc == 2 and out == "", err
    one_line(err, "rt-runtime faults: error:", f"bag {path}")
    assert snapshot(tmp_path) == before


# ---- trace metadata of the wrong type ---------------------------------------------------------------
@pytest.fixture(scope="module")
def real_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace the real runtime wrote (test_analyze's task set on the virtual clock)."""
    from test_analyze import run_traced

    path, _ = run_traced([("H", 5, 5, 1, [("spin", 500)], 0), ("L", 20, 20, 4, [("a", 1000), ("b", 1000)], 0)],
                         "rm", 100, tmp_path_factory.mktemp("trace"))
    return path


def with_meta(trace: Path, dst: Path, key: tuple, value: object) -> Path:
    """A copy of ``trace`` whose metadata has ``value`` at ``key`` (a path of keys)."""
    with np.load(trace) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["meta"].tobytes())
    node = meta
    for k in key[:-1]:
        node = node[k]
    node[key[-1]] = value
    with open(dst, "wb") as f:
        np.savez_compressed(f, **{**arrays, "meta": np.frombuffer(json.dumps(meta).encode(), np.uint8)})
    return dst


META_CASES = [   # (where, value, what the line says)
    (("tasks_config",), "lidar", "metadata tasks_config: expected an object (name -> an object with period_ns"),
    (("tasks_config",), None, "metadata tasks_config: expected an object"),
    (("tasks_config", "H"), "x", "metadata tasks_config[H]: expected an object with period_ns"),
    (("tasks_config", "H", "wcet_ns"), "1ms", "metadata tasks_config[H].wcet_ns: expected an integer from 0 to"),
    (("tasks_config", "H", "period_ns"), 0, "metadata tasks_config[H].period_ns: expected an integer from 1 to"),
    (("tasks_config", "H", "deadline_ns"), 10 ** 30, "metadata tasks_config[H].deadline_ns: expected an integer"),
    (("ops",), None, "metadata ops: expected an object (name -> a list of strings), found null"),
    (("ops", "H"), "spin", 'metadata ops[H]: expected a list of strings, found a string "spin"'),
    (("workers",), 10 ** 30, "metadata workers: expected an integer from 1 to 1024"),
    (("policy",), ["rm"], 'metadata policy: expected a string, found a list ["rm"]'),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("key, value, says", META_CASES, ids=[f"{'.'.join(c[0])}={c[1]!r}"[:40] for c in META_CASES])
def test_analyze_names_a_metadata_field_of_the_wrong_type(key, value, says, real_trace, tmp_path, capsys):
    path = with_meta(real_trace, tmp_path / "t.rttrace", key, value)
    before = snapshot(tmp_path)
    rc, out, err = run(["analyze", path, "--json"], capsys)
    assert rc == 2 and out == "", err
    one_line(err, "rt-runtime analyze: error:", str(path), says)
    assert snapshot(tmp_path) == before


@pytest.mark.timeout(60)
@pytest.mark.parametrize("column, value, says", [("job", 2 ** 40, "column 'job': expected job indices up to the"),
                                                 ("task", 7, "column 'task': expected ids of the 2 task names")])
def test_analyze_refuses_a_column_no_run_writes(column, value, says, real_trace, tmp_path, capsys):
    # A job index past the events the run emitted made the analysis allocate an array that long (8 TiB).
    with np.load(real_trace) as z:
        arrays = {k: z[k] for k in z.files}
    arrays[column][len(arrays[column]) // 2] = value
    path = tmp_path / "t.rttrace"
    with open(path, "wb") as f:
        np.savez_compressed(f, **arrays)
    rc, out, err = run(["analyze", path], capsys)
    assert rc == 2 and out == "", err
    one_line(err, "rt-runtime analyze: error:", str(path), says, "(file corrupt)")


@pytest.mark.timeout(60)
def test_a_trace_with_every_metadata_field_right_still_reads(real_trace, capsys):
    rc, out, err = run(["analyze", real_trace, "--json"], capsys)
    assert rc == 0, err
    assert {t["name"] for t in json.loads(out)["tasks"]} == {"H", "L"}


# ---- demo --out-dir --------------------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("where, says", [("a_file", "is a file, not a directory"),
                                         ("a_file/sub", "a_file is a file, not a directory")])
def test_demo_out_dir_that_cannot_be_a_folder_is_one_line(where, says, tmp_path, capsys):
    (tmp_path / "a_file").write_text("kept")
    before = snapshot(tmp_path)
    rc, out, err = run(["demo", "--out-dir", tmp_path / where], capsys)
    assert rc == 2 and out == "", err
    one_line(err, "rt-runtime demo: error:", f"--out-dir {tmp_path / where}", says)
    assert snapshot(tmp_path) == before


# ---- enum-valued task fields and graph arguments ------------------------------------------------------
ENUM_CASES = {   # (old, new, what the line says) in config/stack.yaml
    "on_miss explode": ("on_miss: degrade", "on_miss: explode",
                        "task 'planning': on_miss: expected one of skip, abort, degrade, none, found 'explode'"),
    "on_miss a typo": ("on_miss: degrade", "on_miss: degarde", "found 'degarde' (did you mean 'degrade'?)"),
    "on_overrun a list": ("on_overrun: none\n    graph: pipelines.lidar",
                          "on_overrun: [none]\n    graph: pipelines.lidar",
                          "task 'lidar_objects': on_overrun: expected one of skip, abort, degrade, none, "
                          "found ['none']"),
    "publish a number": ("criticality: safety", "criticality: safety\n    publish: 1",
                         "task 'planning': publish: expected one of let, on_finish, found 1"),
    "publish a typo": ("criticality: safety", "criticality: safety\n    publish: on_finsh",
                       "(did you mean 'on_finish'?)"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(ENUM_CASES))
def test_an_enum_field_names_task_field_choices_and_value(case, tmp_path, capsys):
    old, new, says = ENUM_CASES[case]
    cfg = stack_with(tmp_path, old, new)
    before = snapshot(tmp_path)
    rc, out, err = run(["replay", tmp_path / "no_bag", "--config", cfg], capsys)
    assert rc == 2, (out, err)
    one_line(err, "rt-runtime replay: error:", str(cfg), says)
    assert snapshot(tmp_path) == before
    # check reads the whole stack file too: it passed these values on to a replay that refused them
    rc, out, err = run(["check", cfg], capsys)
    assert rc == 2 and out == "", (out, err)
    one_line(err, "rt-runtime check: error:", str(cfg), says)


ARG_CASES = {   # args of the LiDAR detector's builder, a task of its own: (args, what the line says)
    "a list item that is no number": ("{mount: [r, 0.0, 1.9, 0.0]}",
                                      "task 'lidar_objects': args.mount: pipelines.lidar:build_lidar_graph cannot use "
                                      "['r', 0.0, 1.9, 0.0] (ValueError: could not convert string to float: 'r')"),
    "a word for a list": ("{mount: r, voxel: 0.2}", "task 'lidar_objects': args.mount: "),
    "an unknown argument": ("{mount: [1.2, 0.0, 1.9, 0.0], bogus: 1}", "task 'lidar_objects': args.bogus: "),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", list(ARG_CASES))
def test_a_graph_argument_the_builder_cannot_use_is_named(case, tmp_path):
    from rt_runtime.config import ConfigError
    from rt_runtime.config.stack import build_bindings, load_stack

    args, says = ARG_CASES[case]
    cfg = write(tmp_path, "policy: edf\ntasks:\n  - name: lidar_objects\n    period: 100ms\n    wcet: 10ms\n"
                f"    graph: pipelines.lidar:build_lidar_graph\n    args: {args}\n", "stack.yaml")
    with pytest.raises(ConfigError) as e:
        build_bindings(load_stack(cfg))
    line = str(e.value)
    assert line.startswith(f"{cfg}: ") and says in line and "\n" not in line, line


@pytest.mark.timeout(300)
def test_a_nested_graph_argument_is_named_to_its_key(tmp_path):
    # The planner's road is a mapping: the line names the key inside it, as the file has it.
    from rt_runtime.config import ConfigError
    from rt_runtime.config.stack import build_bindings, load_stack

    cfg = stack_with(tmp_path, "lane_width: 3.5", "lane_width: wide")
    with pytest.raises(ConfigError) as e:
        build_bindings(load_stack(cfg))
    assert "task 'planning': args.road.lane_width: pipelines.stack:build_planning cannot use 'wide'" in str(e.value)
