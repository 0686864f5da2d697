"""`rt-runtime batch` refuses bad input before any cluster starts: one line naming the flag or file, exit 2."""
from __future__ import annotations

import pytest

from rt_runtime.cli import main


@pytest.fixture()
def bag(tmp_path):
    """A folder that looks like a bag (never replayed here: every case stops before)."""
    b = tmp_path / "bag"
    b.mkdir()
    (b / "metadata.yaml").write_text("rosbag2_bagfile_information: {}\n")
    (b / "bag.mcap").write_bytes(b"x")
    return b


def _fails(capsys, argv, *says):
    assert main(["batch", *map(str, argv)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rt-runtime batch: error: ") and err.count("\n") == 1, err
    for s in says:
        assert s in err, err
    return err


def test_bags_that_name_nothing(capsys, tmp_path):
    _fails(capsys, [tmp_path / "none-*.mcap"], "BAGS", "matches no file")
    _fails(capsys, [tmp_path / "missing"], "BAGS", "no such file")
    (tmp_path / "empty").mkdir()
    _fails(capsys, [tmp_path / "empty"], "found none there")


def test_outputs_that_would_touch_inputs_or_exist(capsys, tmp_path, bag):
    _fails(capsys, [bag, "--junit", bag / "j.xml"], "--junit", "inside the bag")
    (tmp_path / "j.xml").write_text("old")
    _fails(capsys, [bag, "--junit", tmp_path / "j.xml"], "--junit", "exists already", "--force")
    _fails(capsys, [bag, "--html", tmp_path / "r.html", "--junit", tmp_path / "r.html", "--force"], "same path")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("x")
    _fails(capsys, [bag, "--results", tmp_path / "notes"], "--results", "not a results store")
    assert (tmp_path / "j.xml").read_text() == "old"


def test_bad_expect_file_or_config(capsys, tmp_path, bag):
    e = tmp_path / "expect.yaml"
    e.write_text("misses: {below: 1}\n")
    _fails(capsys, [bag, "--expect", e], str(e), "unknown bound 'below'")
    _fails(capsys, [bag, "--expect", tmp_path / "nope.yaml"], "nope.yaml", "file not found")
    _fails(capsys, [bag, "--config", tmp_path / "nope.yaml"], "nope.yaml")


def test_workers_flag_is_checked_by_argparse(capsys, bag):
    assert main(["batch", str(bag), "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_scheduler_that_is_not_there(capsys, bag, monkeypatch):
    import socket

    from rt_runtime.fleet import cluster

    with socket.socket() as s:   # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 2.0)
    _fails(capsys, [bag, "--cluster", f"tcp://127.0.0.1:{port}"], f"--cluster tcp://127.0.0.1:{port}",
           "cannot connect")
