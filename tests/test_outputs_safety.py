"""Outputs never harm inputs; interrupts never lose data (issue 16).

Real `rt-runtime` processes on a real bag: every refused output path is one stderr line naming the
flag and the path, exit 2, no traceback, the inputs byte for byte as they were and nothing left
behind; SIGINT/SIGTERM during `replay` and `sim` keep a readable bag (and trace) marked partial and
exit 130/143; a replay that fails mid-run removes what it wrote, so a rerun to the same path works.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rt_runtime.bag import open_bag
from rt_runtime.trace import load_trace

from replay_fixtures import short_bag  # noqa: F401 - a fixture

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "config" / "stack.yaml"
# Environment-dependent warnings the runtime may print on the wall clock (no SCHED_FIFO, no pinning),
# and the line saying what "realtime" does there: not the command's own lines.
OS_WARNINGS = ("rt_runtime.sched:", "rt-runtime replay: realtime:")


def cmd(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "rt_runtime", *map(str, args)]


def run(*args: str | Path, cwd: Path) -> tuple[int, str, list[str]]:
    """``rt-runtime ARGS`` in a process: (exit status, stdout, stderr lines)."""
    p = subprocess.run(cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=110)
    return p.returncode, p.stdout, own_lines(p.stderr)


def own_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith(OS_WARNINGS)]


def digests(*paths: Path) -> dict[str, str]:
    """sha256 of every file under ``paths``."""
    out = {}
    for p in paths:
        for f in sorted([p] if p.is_file() else p.rglob("*")):
            if f.is_file():
                out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def listing(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


def leftovers(d: Path) -> list[str]:
    """Temporary siblings a write left behind."""
    return [p.name for p in d.iterdir() if p.name.endswith(".rt-tmp")]


def one_line(err: list[str], *words: str) -> None:
    assert len(err) == 1, err
    assert "Traceback" not in err[0] and all(w in err[0] for w in words), err


@pytest.fixture(scope="module")
def inputs(short_bag, tmp_path_factory):  # noqa: F811
    """A private copy of the bag and the config (their hashes are checked after every test)."""
    d = tmp_path_factory.mktemp("inputs")
    bag = d / "bag"
    shutil.copytree(short_bag, bag)
    cfg = d / "stack.yaml"
    shutil.copy(CONFIG, cfg)
    before = digests(bag, cfg)
    yield bag, cfg
    assert digests(bag, cfg) == before


def unwritable_dir(tmp_path: Path) -> Path:
    """A directory this process cannot create files in (root ignores modes: /sys refuses anyway)."""
    if os.geteuid() == 0:
        return Path("/sys")
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    return d


def start(*args: str | Path, cwd: Path, staged: Path) -> subprocess.Popen:
    """Start ``rt-runtime ARGS``; return once its output ``staged`` is being written (its temporary sibling exists)."""
    p = subprocess.Popen(cmd(*args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while not list(staged.parent.glob(f".{staged.name}.*.rt-tmp")):
        if p.poll() is not None:
            pytest.fail(f"ended before writing: {p.returncode} {p.communicate()}")
        assert time.monotonic() - t0 < 90, "the output was never started"
        time.sleep(0.05)
    time.sleep(0.5)   # a few messages in
    return p


@pytest.mark.timeout(120)
def test_replay_refuses_outputs_over_inputs_existing_or_unwritable(inputs, tmp_path):
    bag, cfg = inputs
    (tmp_path / "old.rttrace").write_bytes(b"an earlier trace")
    (tmp_path / "old_bag").mkdir()
    (tmp_path / "old_bag" / "metadata.yaml").write_text("not touched\n")
    (tmp_path / "a_file").write_text("x")
    ro = unwritable_dir(tmp_path)
    cases = [   # (extra args, flag, path as given, what the line says)
        (["--trace", bag / "bag.mcap"], "--trace", bag / "bag.mcap", "bag"),
        (["--trace", cfg], "--trace", cfg, "config"),
        (["--out", bag], "--out", bag, "bag"),
        (["--out", bag / "sub"], "--out", bag / "sub", "inside the bag"),
        (["--out", bag.parent, "--force"], "--out", bag.parent, "contains the bag"),
        (["--out", "old_bag"], "--out", "old_bag", "exists already"),
        (["--trace", "old.rttrace"], "--trace", "old.rttrace", "exists already"),
        (["--out", "a_file/bag"], "--out", "a_file/bag", "not a directory"),
        (["--out", ro / "x" / "bag"], "--out", ro / "x" / "bag", "not writable"),
        (["--out", "o", "--trace", "o/t.rttrace"], "--trace", "o/t.rttrace", "--out o"),
    ]
    before = listing(tmp_path)
    for extra, flag, path, says in cases:
        rc, out, err = run("replay", bag, "--config", cfg, *extra, cwd=tmp_path)
        assert rc == 2 and out == "", (extra, rc, out)
        one_line(err, f"{flag} {path}", says)
    assert listing(tmp_path) == before
    assert (tmp_path / "old.rttrace").read_bytes() == b"an earlier trace"


@pytest.fixture(scope="module")
def interrupted(inputs, tmp_path_factory):
    """A replay on the wall clock cut by SIGINT once its output bag is being written."""
    bag, cfg = inputs
    d = tmp_path_factory.mktemp("sigint")
    p = start("replay", bag, "--config", cfg, "--speed", "0.5", "--out", "out", "--trace", "t.rttrace", "--json",
              cwd=d, staged=d / "out")
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=100)
    return d, p.returncode, out, own_lines(err)


@pytest.mark.wallclock
@pytest.mark.timeout(120)
def test_sigint_keeps_a_readable_partial_bag_and_trace(interrupted):
    d, rc, out, err = interrupted
    assert rc == 130, (rc, err)
    one_line(err, "interrupted by SIGINT", "out (bag, marked partial)", "t.rttrace (trace, marked partial)")
    doc = json.loads(out)   # still exactly one JSON document
    assert doc["interrupted"] == "SIGINT" and doc["partial"] is True
    assert 0 <= doc["duration_s"] < 3.0
    with open_bag(d / "out") as r:
        assert r.metadata["partial"] == "true" and "SIGINT" in r.metadata["partial_reason"]
        assert r.truncated is None and r.message_count == sum(doc["outputs"].values())
        assert len(list(r.messages())) == r.message_count
    cols, meta = load_trace(d / "t.rttrace")
    assert meta["partial"] is True and meta["interrupted"] == "SIGINT" and meta["bag_duration_s"] > doc["duration_s"]
    assert leftovers(d) == []


@pytest.mark.timeout(120)
def test_analyze_refuses_its_inputs_and_existing_files(interrupted, inputs, tmp_path):
    d, *_ = interrupted
    _, cfg = inputs
    trace = d / "t.rttrace"
    before = digests(trace, cfg)
    (tmp_path / "p.json").write_text("{}")
    for extra, flag, path, says in [
            (["--perfetto", trace], "--perfetto", trace, "that is the trace"),
            (["--html", cfg, "--config", cfg], "--html", cfg, "that is the config"),
            (["--perfetto", "p.json"], "--perfetto", "p.json", "exists already"),
            (["--plots", "a", "--html", "a/r.html"], "--html", "a/r.html", "--plots a")]:
        rc, out, err = run("analyze", trace, *extra, cwd=tmp_path)
        assert rc == 2 and out == "", (extra, rc, out)
        one_line(err, f"{flag} {path}", says)
    assert sorted(os.listdir(tmp_path)) == ["p.json"]
    rc, out, err = run("analyze", trace, "--perfetto", "p.json", "--force", "--json", cwd=tmp_path)
    assert rc == 0, err
    assert json.loads(out)["written"] == ["p.json"] and json.loads((tmp_path / "p.json").read_text())["traceEvents"]
    assert sorted(os.listdir(tmp_path)) == ["p.json"] and digests(trace, cfg) == before


@pytest.mark.wallclock
@pytest.mark.timeout(120)
def test_sigterm_keeps_a_readable_partial_bag(inputs, tmp_path):
    bag, cfg = inputs
    p = start("replay", bag, "--config", cfg, "--speed", "0.5", "--out", "kept", cwd=tmp_path, staged=tmp_path / "kept")
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=100)
    assert p.returncode == 143, (p.returncode, err)
    one_line(own_lines(err), "interrupted by SIGTERM", "kept (bag, marked partial)")
    assert "output digest" in out   # the summary of what was replayed
    with open_bag(tmp_path / "kept") as r:
        assert r.metadata["partial"] == "true" and "SIGTERM" in r.metadata["partial_reason"]
        assert len(list(r.messages())) == r.message_count
    assert leftovers(tmp_path) == []


def _corrupt_chunk(bag: Path, dst: Path, chunk: int = 2) -> None:
    """A copy of ``bag`` whose ``chunk``-th MCAP chunk has a broken record: it opens, then fails mid-replay."""
    shutil.copytree(bag, dst)
    f = next(dst.glob("*.mcap"))
    data = bytearray(f.read_bytes())
    pos, seen = 8, 0
    while pos < len(data):
        op, n = data[pos], struct.unpack_from("<Q", data, pos + 1)[0]
        if op == 0x06:   # Chunk: start, end, uncompressed size, crc, compression, records
            if seen == chunk:
                c = pos + 9 + 8 + 8 + 8 + 4
                c += 4 + struct.unpack_from("<I", data, c)[0] + 8
                struct.pack_into("<Q", data, c + 1, 1 << 62)   # the first record's length
                f.write_bytes(bytes(data))
                return
            seen += 1
        pos += 9 + n
    raise AssertionError("the bag has too few chunks")


@pytest.mark.timeout(120)
def test_a_replay_failing_mid_run_leaves_nothing_and_a_rerun_works(inputs, tmp_path):
    bag, cfg = inputs
    bad = tmp_path / "bad_bag"
    _corrupt_chunk(bag, bad)
    before = digests(bad)
    rc, out, err = run("replay", bad, "--config", cfg, "--out", "o", "--trace", "t.rttrace", cwd=tmp_path)
    assert rc == 2, (rc, err)
    one_line(err, "corrupt data")
    assert sorted(os.listdir(tmp_path)) == ["bad_bag"] and digests(bad) == before   # nothing left behind
    rc, out, err = run("replay", bag, "--config", cfg, "--out", "o", "--trace", "t.rttrace", "--until", "0.3",
                       cwd=tmp_path)
    assert rc == 0, err
    with open_bag(tmp_path / "o") as r:
        assert "partial" not in r.metadata and r.message_count > 0
    assert "partial" not in load_trace(tmp_path / "t.rttrace")[1]
    assert leftovers(tmp_path) == []


@pytest.mark.wallclock
@pytest.mark.timeout(120)
def test_sim_sigint_keeps_a_partial_bag_and_force_replaces_it(tmp_path):
    p = start("sim", "s", "--seconds", "20", "--workers", "1", cwd=tmp_path, staged=tmp_path / "s")
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=100)
    assert p.returncode == 130, (p.returncode, err)
    one_line(own_lines(err), "interrupted by SIGINT", "kept s (marked partial)")
    with open_bag(tmp_path / "s") as r:
        assert r.metadata["partial"] == "true" and r.message_count > 0
        assert r.duration_ns < 20e9 and len(list(r.messages())) == r.message_count
    rc, out, err = run("sim", "s", "--seconds", "0.2", cwd=tmp_path)
    assert rc == 2
    one_line(err, "OUT s", "exists already")
    rc, out, err = run("sim", "s", "--seconds", "0.2", "--workers", "1", "--force", cwd=tmp_path)
    assert rc == 0, err
    with open_bag(tmp_path / "s") as r:
        assert "partial" not in r.metadata
    assert sorted(os.listdir(tmp_path)) == ["s"]


@pytest.mark.timeout(120)
def test_calibrate_refuses_existing_outputs_without_force(inputs, tmp_path):
    bag, cfg = inputs
    (tmp_path / "c.yaml").write_text("old\n")
    for extra, flag, path, says in [(["--out", "c.yaml"], "--out", "c.yaml", "exists already"),
                                    (["--out", "n.yaml", "--trace", bag / "t"], "--trace", bag / "t", "inside the bag"),
                                    (["--out", "n.yaml", "--trace", "n.yaml"], "--trace", "n.yaml", "--out")]:
        rc, out, err = run("calibrate", bag, "--config", cfg, *extra, cwd=tmp_path)
        assert rc == 2, (extra, rc, err)
        one_line(err, f"{flag} {path}", says)
    assert sorted(os.listdir(tmp_path)) == ["c.yaml"] and (tmp_path / "c.yaml").read_text() == "old\n"
