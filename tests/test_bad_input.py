"""A user's mistake ends in one line that names what to fix: exit 2, no traceback, nothing written.

Each case is a real command line (``rt_runtime.cli.main([...])`` in this process, or a subprocess
where the process itself matters), with a timeout so that a hang fails instead of stalling the
suite. The property-based cases feed random flag values, random bytes and random small YAML
documents: whatever comes in, the exit status is 0, 1 or 2 and there is no traceback.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rt_runtime import cli

ROOT = Path(__file__).resolve().parents[1]
STACK = ROOT / "config" / "stack.yaml"

BOMB = """\
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
"""


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``rt-runtime ARGV`` in this process: (exit status, stdout, stderr)."""
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(err: str, *names: str) -> str:
    """stderr is exactly one line, with no traceback, naming every one of ``names``."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for n in names:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and its digest: an input that must stay as it was."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


# ---- numeric flags: argparse types (rt_runtime/commands/args.py) ------------------------------------
FLAG_CASES = [
    # (command line before the flag, flag, value)
    (["replay", "{missing}", "--config", "{missing}"], "--speed", "inf"),
    (["replay", "{missing}", "--config", "{missing}"], "--speed", "nan"),
    (["replay", "{missing}", "--config", "{missing}"], "--speed", "0"),
    (["replay", "{missing}", "--config", "{missing}"], "--speed", "-1"),
    (["replay", "{missing}", "--config", "{missing}"], "--speed", "fast"),
    (["replay", "{missing}", "--config", "{missing}"], "--until", "inf"),
    (["replay", "{missing}", "--config", "{missing}"], "--until", "nan"),
    (["replay", "{missing}", "--config", "{missing}"], "--until", "-1"),
    (["replay", "{missing}", "--config", "{missing}"], "--until", "0"),
    (["replay", "{missing}", "--config", "{missing}"], "--start", "-1"),
    (["replay", "{missing}", "--config", "{missing}"], "--start", "nan"),
    (["replay", "{missing}", "--config", "{missing}"], "--workers", "0"),
    (["replay", "{missing}", "--config", "{missing}"], "--workers", "-2"),
    (["replay", "{missing}", "--config", "{missing}"], "--workers", "1.5"),
    (["replay", "{missing}", "--config", "{missing}"], "--workers", "100000"),
    (["sim", "{tmp}/new_bag"], "--seconds", "inf"),
    (["sim", "{tmp}/new_bag"], "--seconds", "0"),
    (["sim", "{tmp}/new_bag"], "--seconds", "nan"),
    (["sim", "{tmp}/new_bag"], "--seed", "-1"),
    (["sim", "{tmp}/new_bag"], "--workers", "0"),
    (["run", "--config", "{missing}"], "--workers", "0"),
    (["run", "--config", "{missing}"], "--stale-after", "0s"),
    (["run", "--config", "{missing}"], "--stale-after", "soon"),
    (["play", "{missing}"], "--rate", "inf"),
    (["play", "{missing}"], "--rate", "0"),
    (["play", "{missing}"], "--clock-hz", "0"),
    (["play", "{missing}"], "--wait-for-subscriber", "-1"),
    (["play", "{missing}"], "--wait-for-subscriber", "nan"),
    (["analyze", "{missing}"], "--limit", "-1"),
    (["analyze", "{missing}"], "--limit", "all"),
    (["calibrate", "{missing}", "--config", "{missing}"], "--margin", "inf"),
    (["calibrate", "{missing}", "--config", "{missing}"], "--margin", "0"),
]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("before, flag, value", FLAG_CASES,
                         ids=[f"{c[0][0]}{f}={v}" for c, f, v in FLAG_CASES])
def test_numeric_flag_is_refused_in_one_line(before, flag, value, tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("an input")
    before_files = snapshot(tmp_path)
    argv = [a.format(missing=tmp_path / "missing", tmp=tmp_path) for a in before] + [f"{flag}={value}"]
    rc, out, err = run(argv, capsys)
    assert rc == 2, err
    line = one_line(err, flag, f"rt-runtime {before[0]}: error:")
    assert repr(value) in line or value in line
    assert out == ""
    assert snapshot(tmp_path) == before_files   # nothing written, nothing changed


@pytest.mark.timeout(30)
@pytest.mark.parametrize("argv", [["demo", "--speed", "2"], ["faults", "--workers", "2"], ["check"]])
def test_unknown_or_missing_arguments_are_one_line(argv, capsys):
    rc, _, err = run(argv, capsys)
    assert rc == 2
    one_line(err, f"rt-runtime {argv[0]}: error:")


@pytest.mark.timeout(30)
def test_valid_flags_still_parse():
    args = cli.build_parser().parse_args(["replay", "b", "--speed", "0.5", "--until", "2.5", "--workers", "2"])
    assert (args.speed, args.until, args.workers) == (0.5, 2.5, 2)
    args = cli.build_parser().parse_args(["replay", "b"])
    assert (args.speed, args.until, args.workers) == ("max", None, None)
    args = cli.build_parser().parse_args(["sim", "out"])
    assert (args.seconds, args.seed, args.workers) == (20.0, 0, "auto")


# ---- configurations read by `check` (rt_runtime/config/taskset.py) ---------------------------------
def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


CHECK_CASES = {
    "alias bomb as a task name": (BOMB + "policy: edf\ntasks:\n  - {name: *g, period: 10ms, wcet: 1ms}\n",
                                  "alias"),
    "alias bomb as a period": (BOMB + "policy: edf\ntasks:\n  - {name: a, period: *g, wcet: 1ms}\n", "alias"),
    "alias bomb as a chain": (BOMB + "policy: edf\ntasks:\n  - {name: a, period: 10ms, wcet: 1ms}\n"
                              "chains:\n  - {name: c, tasks: *g}\n", "alias"),
    "merge-key bomb": ("a: &a {x: 1, y: 2}\n" + "".join(
        f"{n}: &{n} {{<<: [{', '.join([f'*{p}'] * 9)}]}}\n" for p, n in zip("abcdef", "bcdefg")), "alias"),
    "recursive alias": ("policy: rm\ntasks: &t [*t]\n", "recursive"),
    "deep nesting": ("policy: rm\ntasks: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested"),
    "a huge period under EDF": ("policy: edf\ntasks:\n  - {name: a, period: 1000000000000s, wcet: 1ms, "
                                "deadline: 5ms}\n  - {name: b, period: 10ms, wcet: 1ms}\n", "period"),
    "a period of 1e40 digits": ("policy: rm\ntasks:\n  - {name: a, period: " + "9" * 40 + "s, wcet: 1ms}\n",
                                "period"),
    "a cyclic chain": ("policy: rm\ntasks:\n  - {name: a, period: 10ms, wcet: 1ms}\n"
                       "  - {name: b, period: 10ms, wcet: 1ms}\nchains:\n  - {name: c, tasks: [a, b, a]}\n",
                       "chain 'c'"),
    "a chain typo at the top level": ("policy: rm\ntasks:\n  - {name: a, period: 10ms, wcet: 1ms}\n"
                                      "chain:\n  - {name: c, tasks: [a]}\n", "chain"),
    "a chain naming no task": ("policy: rm\ntasks:\n  - {name: lidar, period: 10ms, wcet: 1ms}\n"
                               "chains:\n  - {name: c, tasks: [lidr]}\n", "lidr"),
    "a name with a line break": ('policy: rm\ntasks:\n  - {name: "a\\nb", period: 10ms, wcet: 1ms}\n', "name"),
    "a huge unknown key": ("policy: rm\n? " + "k" * 5000 + "\n: 1\ntasks: []\n", "unknown"),
    "a value printed in full": ("policy: rm\ntasks:\n  - {name: a, period: 10ms, wcet: 1ms, priority: '"
                                + "x" * 50_000 + "'}\n", "priority"),
    "a duplicate key": ("policy: rm\npolicy: dm\ntasks: []\n", "twice"),
    "not UTF-8": (None, "UTF-8"),
}


@pytest.fixture(scope="module")
def check_imported(tmp_path_factory: pytest.TempPathFactory) -> None:
    """`check` run once on a good file: the imports paid (seconds on a loaded machine), not timed below."""
    good = tmp_path_factory.mktemp("good") / "cfg.yaml"
    good.write_text("policy: rm\ntasks:\n  - {name: a, period: 10ms, wcet: 1ms}\n")
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["check", str(good)]) == 0


@pytest.mark.wallclock
@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", list(CHECK_CASES))
def test_check_refuses_in_one_line(case, tmp_path, capsys, check_imported):
    text, what = CHECK_CASES[case]
    path = tmp_path / "cfg.yaml"
    if text is None:
        path.write_bytes(b"policy: rm\ntasks: \xff\xfe\n")
    else:
        path.write_text(text)
    before = snapshot(tmp_path)
    t0 = time.monotonic()
    rc, out, err = run(["check", path], capsys)
    assert time.monotonic() - t0 < 10
    assert rc == 2, (out, err)
    line = one_line(err, "rt-runtime check: error:", str(path), what)
    assert len(line) < 800
    assert snapshot(tmp_path) == before


@pytest.mark.wallclock
@pytest.mark.timeout(30)
def test_alias_bomb_ends_in_well_under_a_second(tmp_path, capsys):
    path = write(tmp_path, BOMB + "policy: edf\ntasks:\n  - {name: *g, period: 10ms, wcet: 1ms}\n")
    run(["check", path], capsys)   # imports paid once
    t0 = time.monotonic()
    rc, _, err = run(["check", path], capsys)
    assert rc == 2 and time.monotonic() - t0 < 1.0
    one_line(err, "line 10", "alias")


@pytest.mark.timeout(30)
def test_too_many_tasks_and_too_big_a_file(tmp_path, capsys):
    many = write(tmp_path, "policy: rm\ntasks:\n" + "".join(f"  - {{name: t{i}, period: 10ms, wcet: 1us}}\n"
                                                             for i in range(1500)))
    rc, _, err = run(["check", many], capsys)
    assert rc == 2
    one_line(err, "tasks", "1500", "at most 1000")
    big = write(tmp_path, "policy: rm\n# " + "x" * (2 * 1024 * 1024) + "\n", "big.yaml")
    rc, _, err = run(["check", big], capsys)
    assert rc == 2
    one_line(err, "MiB")


@pytest.mark.timeout(30)
def test_check_and_replay_refuse_the_same_typo(tmp_path, capsys):
    # A full config with `chain:` for `chains:`: replay (parse_stack) and check (load_taskset) share the check.
    path = write(tmp_path, STACK.read_text().replace("\nchains:", "\nchain:"))
    rc, _, err = run(["check", path], capsys)
    assert rc == 2
    check_line = one_line(err, "chain: unknown top-level key", "did you mean 'chains'")
    rc, _, err = run(["replay", tmp_path / "no_bag", "--config", path], capsys)
    assert rc == 2
    assert one_line(err).split("error: ", 1)[1] == check_line.split("error: ", 1)[1]


@pytest.mark.timeout(30)
def test_check_turns_an_overflow_into_exit_2(tmp_path, capsys, monkeypatch):
    import rt_runtime.analysis.e2e as analysis   # what `check` runs: the holistic analysis

    def overflow(*_a: object, **_k: object) -> None:
        raise OverflowError("Python int too large to convert to C long")

    monkeypatch.setattr(analysis, "analyze_system", overflow)
    path = write(tmp_path, "policy: edf\ntasks:\n  - {name: a, period: 86400s, wcet: 1ms}\n")
    rc, _, err = run(["check", path], capsys)
    assert rc == 2
    one_line(err, "OverflowError", str(path))


@pytest.mark.timeout(30)
def test_longest_durations_are_analysed(tmp_path, capsys):
    # Periods up to the ceiling (one day), mixed with the shortest: a verdict, no overflow.
    path = write(tmp_path, "policy: edf\ntasks:\n"
                 "  - {name: a, period: 86400s, wcet: 1ms, deadline: 5ms}\n"
                 "  - {name: b, period: 86399.999999997s, wcet: 40000s, deadline: 86000s, jitter: 1s}\n"
                 "  - {name: c, period: 7ns, wcet: 3ns}\n")
    rc, _, err = run(["check", path], capsys)
    assert rc in (0, 1) and "Traceback" not in err


# ---- stack configurations (rt_runtime/config/stack.py) ---------------------------------------------
def stack_with(tmp_path: Path, old: str, new: str) -> Path:
    text = STACK.read_text()
    assert old in text, old
    return write(tmp_path, text.replace(old, new, 1), "stack.yaml")


STACK_CASES = {
    "diagnostics_period 0s": ('diagnostics_period: "1s"', 'diagnostics_period: "0s"', "diagnostics_period"),
    "diagnostics_period 1ns": ('diagnostics_period: "1s"', 'diagnostics_period: "1ns"', "at least 1ms"),
    "device quantum": ("device: cpu", "device: quantum", "device"),
    "device cuda:7": ("device: cpu", "device: cuda:7", "cuda:7"),
    "device a list": ("device: cpu", "device: [cpu]", "device"),
    "recover_after three": ("recover_after: 3", "recover_after: three", "recover_after"),
    "recover_after 0": ("recover_after: 3", "recover_after: 0", "recover_after"),
    "egress codec a list": ("codec: markers", "codec: [markers]", "egress[1]: codec"),
    "ingress codec a list": ("codec: lidar_points", "codec: [lidar_points]", "ingress[0]: codec"),
    "relative graph ref": ("graph: pipelines.lidar:build_lidar_graph", "graph: .lidar:build_lidar_graph",
                           "relative"),
    "graph ref without a function": ("graph: pipelines.lidar:build_lidar_graph", "graph: pipelines.lidar",
                                     "package.module:function"),
    "args not a mapping": ("args: {mount: [3.8, 0.0, 0.0]}", "args: [3.8, 0.0, 0.0]", "args"),
    "workers 0": ("workers: 1", "workers: 0", "workers"),
    "channels not a list": ("channels:\n", "channels: 5\nx_channels:\n", "channels"),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", list(STACK_CASES))
def test_stack_config_refused_in_one_line(case, tmp_path, capsys):
    old, new, what = STACK_CASES[case]
    if case == "device cuda:7":
        import torch
        if torch.cuda.device_count() > 7:
            pytest.skip("this machine has a cuda:7")
    cfg = stack_with(tmp_path, old, new)
    before = snapshot(tmp_path)
    rc, out, err = run(["replay", tmp_path / "no_bag", "--config", cfg], capsys)
    assert rc == 2, (out, err)
    one_line(err, "rt-runtime replay: error:", str(cfg), what)
    assert snapshot(tmp_path) == before


@pytest.fixture(scope="module")
def tiny_bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bag with one topic and one message: enough for replay to get to building the graphs."""
    from rt_runtime.bag import BagWriter, msg_class

    path = tmp_path_factory.mktemp("bags") / "tiny"
    with BagWriter(path, "mcap") as w:
        w.add_topic("/s", "std_msgs/msg/String")
        w.write("/s", 1000, msg_class("std_msgs/msg/String")(data="x"))
    return path


MODULES = {
    "a syntax error": ("def build(device='cpu'):\n    return (\n", "syntax error", "line 2"),
    "raising at import": ("raise RuntimeError('no licence server')\n", "RuntimeError: no licence server", ""),
    "exiting at import": ("import sys\nsys.exit(3)\n", "SystemExit", ""),
    "a builder that raises": ("def build(device='cpu', **kw):\n    raise KeyError('calib.yaml')\n",
                              "raised KeyError", "task 't'"),
    "a builder returning no graph": ("def build(device='cpu', **kw):\n    return 42\n", "not a Graph", "task 't'"),
    "a missing function": ("x = 1\n", "has no 'build'", ""),
    "a missing module": (None, "cannot import module", ""),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(MODULES))
def test_graph_module_errors_are_one_line(case, tiny_bag, tmp_path, capsys, monkeypatch):
    source, what, also = MODULES[case]
    module = f"user_graphs_{abs(hash(case)) % 10**8}"
    if source is not None:
        (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = write(tmp_path, f"policy: edf\ntasks:\n  - {{name: t, period: 10ms, wcet: 1ms, graph: {module}:build}}\n",
                "stack.yaml")
    before = snapshot(tmp_path)
    rc, out, err = run(["replay", tiny_bag, "--config", cfg, "--out", tmp_path / "out_bag"], capsys)
    assert rc == 2, (out, err)
    one_line(err, "rt-runtime replay: error:", str(cfg), module, what, also)
    after = {k: v for k, v in snapshot(tmp_path).items() if "__pycache__" not in k}
    assert after == before and not (tmp_path / "out_bag").exists()


@pytest.mark.wallclock
@pytest.mark.timeout(30)
def test_an_override_value_is_bounded_like_a_file():
    # `rt-runtime run --set KEY=VALUE` (and the node's overrides parameter) read VALUE as YAML too.
    from rt_runtime.config import ConfigError
    from rt_runtime.ros.overrides import load_config

    bomb = "[" + ", ".join(f"&{n} [{', '.join([f'*{p}'] * 9)}]" for p, n in zip("abcdef", "bcdefg")) + "]"
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="override .*alias"):
        load_config(STACK, ["tasks.planning.args=[&a [1, 1, 1, 1, 1, 1, 1, 1, 1], " + bomb[1:]])
    assert time.monotonic() - t0 < 5


# ---- traces and bags -------------------------------------------------------------------------------
def _npz(path: Path, **arrays: object) -> Path:
    import numpy as np

    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["random", "empty", "npy", "zip-like", "pickled", "wrong columns", "bag"])
def test_analyze_on_a_file_that_is_not_a_trace(kind, tmp_path, capsys):
    import numpy as np

    path = tmp_path / "x.rttrace"
    if kind == "random":
        path.write_bytes(os.urandom(5000))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "npy":
        np.save(path.with_suffix(".npy"), np.arange(3))
        path = path.with_suffix(".npy")
    elif kind == "zip-like":
        path.write_bytes(b"PK\x03\x04" + os.urandom(300))
    elif kind == "pickled":
        fields = {n: np.zeros(2, np.int64) for n in ("kind", "t_ns", "task", "job", "a", "b")}
        _npz(path, meta=np.array([{"format": "x"}], dtype=object), **fields)
    elif kind == "wrong columns":
        fields = {n: np.zeros((2, 2), np.float32) for n in ("kind", "t_ns", "task", "job", "a", "b")}
        meta = np.frombuffer(b'{"format": "rt_runtime.trace/1", "tasks": []}', np.uint8)
        _npz(path, meta=meta, **fields)
    else:
        path.write_bytes(b"\x89MCAP0\r\n" + bytes(100))
    before = snapshot(tmp_path)
    rc, _, err = run(["analyze", path], capsys)
    assert rc == 2
    line = one_line(err, "rt-runtime analyze: error:", str(path), "not an rt_runtime trace file")
    assert "allow_pickle" not in line and "pickle.load" not in line
    assert snapshot(tmp_path) == before


@pytest.mark.timeout(30)
@pytest.mark.parametrize("metadata", ["rosbag2_bagfile_information: {version: [unclosed\n", "foo: 1\n", BOMB])
def test_broken_bag_metadata_is_named_not_called_truncated(metadata, tmp_path):
    from rt_runtime.bag import BagWarning, BagWriter, msg_class, open_bag

    bag = tmp_path / "b"
    with BagWriter(bag, "mcap") as w:
        w.add_topic("/s", "std_msgs/msg/String")
        for i in range(3):
            w.write("/s", i * 1000, msg_class("std_msgs/msg/String")(data=str(i)))
    (bag / "metadata.yaml").write_text(metadata)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with open_bag(bag) as r:
            assert r.truncated is None and r.metadata_problem is not None
            assert "metadata.yaml is broken" in r.metadata_problem
            assert [m.t_ns for m in r.messages()] == [0, 1000, 2000]
    texts = [str(w.message) for w in caught if issubclass(w.category, BagWarning)]
    assert len(texts) == 1 and "metadata.yaml is broken" in texts[0] and "truncated" not in texts[0]
    assert "\n" not in texts[0]


# ---- a closed stdout ---------------------------------------------------------------------------------
@pytest.mark.wallclock
@pytest.mark.timeout(180)
def test_closed_stdout_exits_141_quietly(tmp_path):
    path = write(tmp_path, "policy: rm\ntasks:\n" + "".join(f"  - {{name: t{i}, period: {10 + i}ms, wcet: 1us}}\n"
                                                             for i in range(50)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "rt_runtime.cli", "check", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()   # the reader is gone before the first line (`| head -0`)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=150) == 141   # 8-23 s beside a CPU hog here: a process that imports `check`
    assert err == "", err


# ---- property-based --------------------------------------------------------------------------------
FUZZ_SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)
NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.integers(min_value=-10**30, max_value=10**30).map(str), TEXT)

FUZZ_FLAGS = [(["replay", "{missing}", "--config", "{missing}"], "--speed"),
              (["replay", "{missing}", "--config", "{missing}"], "--until"),
              (["replay", "{missing}", "--config", "{missing}"], "--workers"),
              (["sim", "{existing}"], "--seconds"),
              (["sim", "{existing}"], "--seed"),
              (["sim", "{existing}"], "--workers"),
              (["analyze", "{missing}"], "--limit"),
              (["calibrate", "{missing}", "--config", "{missing}"], "--margin")]


@pytest.mark.timeout(60)
@FUZZ_SETTINGS
@given(case=st.sampled_from(FUZZ_FLAGS), value=NUMBERS)
def test_fuzz_numeric_flags(case, value):
    # Valid values get as far as a missing input (exit 2 too); nothing here may start real work.
    with tempfile.TemporaryDirectory() as d:
        before, flag = case
        argv = [a.format(missing=Path(d) / "missing", existing=d) for a in before] + [f"{flag}={value}"]
        from io import StringIO
        from contextlib import redirect_stderr, redirect_stdout

        out, err = StringIO(), StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = cli.main(argv)
        assert rc == 2, err.getvalue()
        # A warning about an unusual but valid value (calibrate --margin 0.5) may come before the error.
        errors = "\n".join(x for x in err.getvalue().splitlines() if ": warning: " not in x)
        one_line(errors, f"rt-runtime {before[0]}: error:")
        assert os.listdir(d) == []


@pytest.mark.timeout(60)
@FUZZ_SETTINGS
@given(data=st.one_of(st.binary(max_size=2000), st.binary(max_size=500).map(lambda b: b"PK\x03\x04" + b)))
def test_fuzz_analyze_random_bytes(data):
    from contextlib import redirect_stderr, redirect_stdout
    from io import StringIO

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.rttrace"
        path.write_bytes(data)
        out, err = StringIO(), StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = cli.main(["analyze", str(path)])
        assert rc == 2
        line = one_line(err.getvalue(), "not an rt_runtime trace file")
        assert "pickle" not in line or "never" in line
        assert path.read_bytes() == data


DURATIONS = st.one_of(st.sampled_from(["10ms", "1ms", "0s", "-1ms", "1e3s", "86400s", "86401s", "1ns", "5 us"]),
                      st.integers(-5, 10**15).map(lambda n: f"{n}ns"), TEXT)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**20), st.floats(), TEXT, DURATIONS)
TASK = st.fixed_dictionaries({}, optional={
    "name": st.one_of(st.sampled_from(["a", "b", "c"]), TEXT, SCALARS),
    "period": st.one_of(DURATIONS, SCALARS), "wcet": st.one_of(DURATIONS, SCALARS),
    "deadline": DURATIONS, "jitter": DURATIONS, "blocking": DURATIONS, "offset": DURATIONS,
    "priority": SCALARS, "trigger": SCALARS, "min_interarrival": DURATIONS, "criticality": SCALARS,
    "redundancy": SCALARS, "speculate": SCALARS, "bogus": SCALARS})
DOC = st.fixed_dictionaries({}, optional={
    "policy": st.one_of(st.sampled_from(["rm", "dm", "fp", "edf", "EDF", "llf"]), SCALARS),
    "tasks": st.one_of(st.lists(st.one_of(TASK, SCALARS), max_size=4),
                       st.dictionaries(st.sampled_from(["a", "b", "c"]), TASK, max_size=3), SCALARS),
    "chains": st.one_of(st.lists(st.fixed_dictionaries({}, optional={
        "name": st.one_of(st.sampled_from(["x", "y"]), SCALARS),
        "tasks": st.one_of(st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=4), SCALARS),
        "deadline": DURATIONS}), max_size=2), SCALARS),
    "description": TEXT, "chian": SCALARS})


def _check_in_process(path: Path) -> tuple[int, str]:
    from contextlib import redirect_stderr, redirect_stdout
    from io import StringIO

    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = cli.main(["check", str(path)])
    return rc, err.getvalue()


@pytest.mark.timeout(60)
@FUZZ_SETTINGS
@given(doc=DOC)
def test_fuzz_check_small_documents(doc):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.yaml"
        path.write_text(yaml.safe_dump(doc, allow_unicode=True))
        rc, err = _check_in_process(path)
        assert rc in (0, 1, 2), err
        assert "Traceback" not in err
        lines = err.strip().splitlines()
        if rc == 2 and len(lines) > 1:   # the problems of one pass: a line saying how many, then one line each
            assert lines[0].endswith(f": {len(lines) - 1} problems, one per line:"), err
            assert all(line.startswith(f"{path}: ") for line in lines[1:]), err
        elif rc == 2:
            one_line(err, "rt-runtime check: error:")


@pytest.mark.timeout(60)
@FUZZ_SETTINGS
@given(text=st.lists(st.sampled_from(list("ab:-[]{}&*!|>'\" \n\t#,?%@`1") + ["policy", "tasks", "<<", "&a", "*a"]),
                    max_size=40).map("".join))
def test_fuzz_check_random_yaml_text(text):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.yaml"
        path.write_text(text)
        rc, err = _check_in_process(path)
        assert rc == 2 and "Traceback" not in err
        one_line(err, "rt-runtime check: error:")
