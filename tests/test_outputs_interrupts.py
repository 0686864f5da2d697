"""Interrupts that used to end in a traceback or a hang (issue 27): SIGINT/SIGTERM during a replay that
writes an SQLite bag, and signals to `sim`'s whole process group (a Ctrl-C, `timeout`, a service manager)
while its renderer processes work, or one of those processes killed.

Real `rt-runtime` processes on a real bag; the helpers are test_outputs_safety's. Whatever the moment:
exit 130/143 with one line, the bag kept readable and marked partial, nothing else left behind.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from rt_runtime.bag import open_bag

from replay_fixtures import short_bag  # noqa: F401 - a fixture
from test_outputs_safety import cmd, inputs, leftovers, one_line, own_lines, start  # noqa: F401 - inputs: a fixture


@pytest.mark.wallclock
@pytest.mark.timeout(150)
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_an_sqlite3_replay_keeps_a_readable_partial_bag(sig, code, inputs, tmp_path):
    # The output bag is written by the replay's writer thread; an SQLite connection works only in the
    # thread that opened it, so that thread opens, writes and closes it.
    bag, cfg = inputs
    p = start("replay", bag, "--config", cfg, "--speed", "1", "--out-format", "sqlite3", "--out", "o",
              "--trace", "t.rttrace", cwd=tmp_path, staged=tmp_path / "o")
    # The first second of outputs written (the bag is 3 s): 1.5 s of wall time in which the replay also got
    # 0.5 s of CPU (a loaded machine gave it too little in 1.5 s alone: nothing had been written then)
    ran(p.pid, wall_s=1.5, cpu_s=0.5, limit_s=60)
    p.send_signal(sig)
    out, err = p.communicate(timeout=100)
    assert p.returncode == code, (p.returncode, err)
    name = signal.Signals(sig).name
    one_line(own_lines(err), f"interrupted by {name}", "o (bag, marked partial)", "t.rttrace (trace, marked partial)")
    with open_bag(tmp_path / "o") as r:
        assert r.storage == "sqlite3" and r.metadata["partial"] == "true" and name in r.metadata["partial_reason"]
        assert r.truncated is None and r.message_count > 0 and len(list(r.messages())) == r.message_count
    assert leftovers(tmp_path) == []


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds process ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ran(pid: int, wall_s: float, cpu_s: float, limit_s: float = 60) -> None:
    """Return once ``wall_s`` have passed and process ``pid`` has used ``cpu_s`` more CPU (at most ``limit_s``)."""
    t0, c0 = time.monotonic(), process_cpu_s(pid)
    while time.monotonic() - t0 < limit_s and (time.monotonic() - t0 < wall_s or process_cpu_s(pid) - c0 < cpu_s):
        time.sleep(0.05)


def renderers(pid: int, wait_s: float = 90) -> list[int]:
    """The child processes of ``pid`` (the sim's renderers), once it has some."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < wait_s:
        try:
            kids = [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            kids = []
        if kids:
            return kids
        time.sleep(0.05)
    pytest.fail("the renderers never started")


def start_sim(tmp_path: Path) -> subprocess.Popen:
    """`rt-runtime sim` in a process group of its own, with two renderers at work."""
    p = subprocess.Popen(cmd("sim", "s", "--seconds", "20", "--workers", "2"), cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    renderers(p.pid)
    return p


def finish(p: subprocess.Popen) -> tuple[str, str]:
    """Its output, or the test fails (and the group is killed) when it does not end within 60 s."""
    try:
        return p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        pytest.fail("sim did not end within 60 s of the signal")


@pytest.mark.wallclock
@pytest.mark.timeout(150)
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("after_s", [0.0, 1.0])
def test_a_signal_to_sims_process_group_keeps_a_partial_bag(sig, code, after_s, tmp_path):
    # A renderer a group's SIGTERM ends while it holds multiprocessing.Pool's queue lock left the old
    # Pool.terminate waiting for that lock for ever; now the renderers ignore SIGINT (their parent stops
    # after the message it is writing) and a SIGTERM that ends them is a stop like the parent's own.
    p = start_sim(tmp_path)
    time.sleep(after_s)
    os.killpg(p.pid, sig)
    out, err = finish(p)
    assert p.returncode == code, (p.returncode, err)
    one_line(own_lines(err), f"interrupted by {signal.Signals(sig).name}", "kept s (marked partial)")
    with open_bag(tmp_path / "s") as r:
        assert r.metadata["partial"] == "true" and r.truncated is None
        assert len(list(r.messages())) == r.message_count
    assert sorted(os.listdir(tmp_path)) == ["s"]


@pytest.mark.wallclock
@pytest.mark.timeout(150)
def test_a_renderer_killed_mid_run_ends_sim_in_one_line(tmp_path):
    # The old Pool waited for ever for the frame the killed process was rendering.
    p = start_sim(tmp_path)
    time.sleep(0.5)
    os.kill(renderers(p.pid)[0], signal.SIGKILL)
    out, err = finish(p)
    assert p.returncode == 1, (p.returncode, err)
    one_line(own_lines(err), "rt-runtime sim: error: a process rendering sensor frames ended abruptly")
    assert os.listdir(tmp_path) == []   # nothing kept, nothing half-written


def test_a_ctrl_c_while_the_commands_load_is_one_line_not_a_traceback(capsys, monkeypatch):
    # The subcommands' modules are imported before parsing (torch among them: seconds on a busy
    # machine); a SIGINT there raised KeyboardInterrupt out of main with a traceback.
    from rt_runtime import cli

    def interrupted(name: str, *a, **k):
        if name.startswith("rt_runtime.commands."):
            os.kill(os.getpid(), signal.SIGINT)   # the real signal, handled by Python's default handler
            time.sleep(1)
        return real(name, *a, **k)

    real = cli.importlib.import_module
    monkeypatch.setattr(cli.importlib, "import_module", interrupted)
    # As in a fresh `rt-runtime` process: Python's own SIGINT handler (an earlier test in this process,
    # rclpy's init among them, may have left its own, which swallows the signal).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = cli.main(["check", "config/stack.yaml"])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["rt-runtime: interrupted by SIGINT while starting"]
