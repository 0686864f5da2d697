"""`rt-runtime batch` on real Dask clusters: the embedded LocalCluster, and `dask scheduler` plus
`dask worker` processes on 127.0.0.1; digests equal serial `rt-runtime replay`, gates, JUnit, HTML,
resume after Ctrl-C, a corrupt bag among good ones, a worker that dies on a bag. Each cluster starts
once (they cost most of the time here)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rt_runtime.sim import record

BIN = Path(sys.executable).parent
CODE = "test-fleet"   # a fixed code version: others may edit the tree while these tests run
ENV = {**os.environ, "RT_RUNTIME_CODE_VERSION": CODE}
GOOD = ("bag1", "bag2")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two 1 s recordings of the default scenario (seeds 1, 2) and a garbage .mcap beside them."""
    d = tmp_path_factory.mktemp("fleet")
    for seed, name in enumerate(GOOD, start=1):
        record(d / name, "highway_cut_in", 1.0, seed, "mcap", workers=1)
    (d / "garbage.mcap").write_bytes(b"this is not a bag\n" * 200)
    return d


@pytest.fixture(scope="module")
def serial(fleet: Path) -> dict[str, str]:
    """The reference: each good bag's digest from `rt-runtime replay BAG --json`."""
    from rt_runtime.cli import main

    out = {}
    for name in GOOD:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["replay", str(fleet / name), "--json"]) == 0
        out[name] = json.loads(buf.getvalue())["output_digest"]
    return out


def _rt(*args: object, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "rt-runtime"), *map(str, args)], capture_output=True, text=True, env=ENV,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _quiet(err: str) -> None:
    """No traceback and no Dask log line reaches the user."""
    assert "Traceback" not in err and "distributed." not in err and "tornado" not in err, err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory: pytest.TempPathFactory):
    """`dask scheduler` and `dask worker` (two worker processes) on 127.0.0.1; killed at the end."""
    logs = tmp_path_factory.mktemp("dask")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    # the workers import this file (crash_on_marked) by its name, as pytest did
    env = {**ENV, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1", "PYTHONPATH": str(Path(__file__).parent),
           "DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON__MALLOC_TRIM_THRESHOLD_": "None"}   # as the embedded one
    procs = []
    try:
        for name, args in (("scheduler", ["--host", "127.0.0.1", "--port", str(port), "--no-dashboard"]),
                           ("worker", [address, "--host", "127.0.0.1", "--nworkers", "2", "--nthreads", "1",
                                       "--no-dashboard"])):
            with open(logs / f"{name}.log", "w") as log:
                procs.append(subprocess.Popen([str(BIN / "dask"), name, *args], stdout=log, stderr=subprocess.STDOUT,
                                              env=env, stdin=subprocess.DEVNULL, start_new_session=True))
        yield address
    finally:
        for p in reversed(procs):   # each in its own session: its group is its nannies and workers
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.mark.timeout(300)
def test_batch_cut_short_on_the_embedded_cluster_resumes_on_a_dask_scheduler_with_gates_and_reports(
        fleet, serial, dask_cluster, tmp_path):
    """Ctrl-C keeps the finished rows; the same command against `dask scheduler` + `dask worker` replays
    only the rest (the store does not care where a row was made), with digests equal to serial replays."""
    from rt_runtime.fleet.store import ResultsStore

    store = tmp_path / "results"
    bags = [fleet / n for n in (*GOOD, "garbage.mcap")]
    p = subprocess.Popen([str(BIN / "rt-runtime"), "batch", *map(str, bags), "--results", str(store),
                          "--workers", "1", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=ENV, stdin=subprocess.DEVNULL)
    try:
        t0 = time.monotonic()
        while p.poll() is None and not list(store.glob("rows/*.parquet")) and time.monotonic() - t0 < 240:
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)   # the CLI's own process only: the test's group is left alone
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err
    _quiet(err)
    assert "interrupted by SIGINT" in err and "run the same command again" in err
    doc = json.loads(out)
    assert doc["interrupted"] == "SIGINT" and doc["partial"] is True and doc["cluster"]["embedded"] is True
    assert doc["cluster"]["address"].startswith("tcp://127.0.0.1:") and doc["cluster"]["workers"] == 1
    kept = ResultsStore(store).rows()
    assert 1 <= len(kept) == len(doc["bags"])
    done = {Path(r["bag"]).name for r in kept if r["error"] is None}

    expect = tmp_path / "expect.yaml"
    expect.write_text("misses: {max: 0}\ntasks.planning.jobs: {min: 1000}\n")
    junit, page = tmp_path / "junit.xml", tmp_path / "fleet.html"
    r = _rt("batch", *bags, "--results", store, "--expect", expect, "--junit", junit, "--html", page,
            "--cluster", dask_cluster, "--workers", "2", "--json")
    assert r.returncode == 1, r.stderr
    _quiet(r.stderr)
    doc = json.loads(r.stdout)
    by = {Path(b["bag"]).name: b for b in doc["bags"]}
    assert list(by) == [*GOOD, "garbage.mcap"]
    assert doc["cluster"] == {"address": dask_cluster, "workers": 2, "embedded": False}
    assert {n for n, b in by.items() if b["resumed"]} == done
    for name in GOOD:
        b = by[name]
        assert b["output_digest"] == serial[name] and b["deterministic"] is True and b["error"] is None
        assert [f["path"] for f in b["failures"]] == ["tasks.planning.jobs"] and b["passed"] is False
    bad = by["garbage.mcap"]
    assert bad["passed"] is False and "garbage.mcap" in bad["error"] and "not an MCAP file" in bad["error"]
    assert len(ResultsStore(store).rows()) == 3
    suite = ET.parse(junit).getroot().find("testsuite")
    cases = {Path(c.get("name")).name: c for c in suite.findall("testcase")}
    assert [len(cases[n].findall("failure")) for n in GOOD] == [1, 1]
    assert cases["garbage.mcap"].find("error") is not None and suite.get("errors") == "1"
    html = page.read_text()
    assert html.count("<img src='data:image/png;base64,") == 2 and "tasks.planning.jobs" in html

    ok = tmp_path / "ok.yaml"
    ok.write_text("misses: {max: 0}\ndeterministic: {equal: true}\n")
    r = _rt("batch", *bags[:2], "--results", store, "--expect", ok, "--json")   # all stored: no cluster at all
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["cluster"] is None and all(b["resumed"] and b["passed"] for b in doc["bags"])


def crash_on_marked(job):
    """A worker's task that kills its process on a bag named crash.mcap (counting its tries), else replays."""
    from rt_runtime.fleet.task import replay_bag

    if job.bag.endswith("crash.mcap"):
        with open(job.bag + ".tries", "a") as f:
            f.write("x")
        os._exit(3)
    return replay_bag(job)


@pytest.mark.timeout(240)
def test_a_bag_that_kills_its_worker_is_retried_once_then_a_failed_row(fleet, serial, dask_cluster, tmp_path):
    from distributed import Client

    from rt_runtime.fleet.bags import config_hash, content_hash
    from rt_runtime.fleet.cluster import quiet_dask, run_jobs
    from rt_runtime.fleet.task import BagJob
    from rt_runtime.replay.defaults import default_config

    cfg = str(default_config())
    good = BagJob(str(fleet / "bag2"), content_hash(fleet / "bag2"), cfg, config_hash(cfg), CODE)
    crash = BagJob(str(tmp_path / "crash.mcap"), "crash", cfg, config_hash(cfg), CODE)
    rows: list[dict] = []
    with quiet_dask(), Client(dask_cluster, timeout=30, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=120)
        assert run_jobs(client, [crash, good], rows.append, task=crash_on_marked) is None
    by = {Path(r["bag"]).name: r for r in rows}
    assert by["crash.mcap"]["error"].startswith("KilledWorker: its worker died")
    assert (tmp_path / "crash.mcap.tries").read_text() == "xx"   # Dask ran it once more, then gave up
    assert by["bag2"]["output_digest"] == serial["bag2"] and by["bag2"]["error"] is None


def test_replay_expect_judges_one_bag_and_exits_1_on_a_broken_bound(fleet, serial, tmp_path, capsys):
    from rt_runtime.cli import main

    expect = tmp_path / "expect.yaml"
    expect.write_text("misses: {max: 0}\ntasks.planning.response_ms.p99: {max: 0.001}\ntasks.nope.jobs: {min: 1}\n")
    assert main(["replay", str(fleet / "bag1"), "--expect", str(expect), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["output_digest"] == serial["bag1"] and doc["misses"] == 0
    assert doc["expect"]["passed"] is False
    assert [f["path"] for f in doc["expect"]["failures"]] == ["tasks.planning.response_ms.p99", "tasks.nope.jobs"]
