"""A task's ``compile:`` in the stack file: checked where the file is read, carried to the warm-up."""
from __future__ import annotations

from pathlib import Path

import pytest

from rt_runtime.config.stack import ConfigError, build_bindings, load_stack
from rt_runtime.exec.compile import REQUESTS
from rt_runtime.sched.binding import COMPILE_MODES

CONFIG = Path(__file__).resolve().parents[1] / "config" / "stack.yaml"


def with_compile(tmp_path: Path, value: str) -> Path:
    text = CONFIG.read_text()
    anchor = "  - name: radar_objects\n"
    assert anchor in text, "config/stack.yaml's radar task changed shape; update this test"
    cfg = tmp_path / "stack.yaml"
    cfg.write_text(text.replace(anchor, anchor + f"    compile: {value}\n"))
    return cfg


def test_the_stack_files_choices_are_the_compilers():
    assert COMPILE_MODES == REQUESTS


def test_a_tasks_compile_mode_reaches_its_binding(tmp_path):
    bindings = {b.task.name: b for b in build_bindings(load_stack(with_compile(tmp_path, "jit")))[0]}
    assert bindings["radar_objects"].compile == "jit"
    assert bindings["lidar_objects"].compile is None   # not said: $RT_RUNTIME_COMPILE, else eager


def test_a_misspelt_compile_mode_is_one_line_naming_task_field_and_choices(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_stack(with_compile(tmp_path, "jitt"))
    msg = str(e.value)
    assert "\n" not in msg and "task 'radar_objects': compile" in msg and "auto, eager, jit, aot" in msg
    assert "'jitt'" in msg and "did you mean 'jit'" in msg


def test_warm_up_weighs_a_compile_against_the_run_it_is_told_at_each_tasks_rate(monkeypatch):
    """A replay says its bag's length: a 10 Hz task of a 20 s bag expects 200 jobs; unsaid: the seam's default."""
    from types import SimpleNamespace

    from rt_runtime import drive
    from rt_runtime.exec.compile import DEFAULT_JOBS

    asked = []
    monkeypatch.setattr(drive, "warm_up", lambda ex, compile, expected_jobs: asked.append((ex, compile, expected_jobs)))
    ts = SimpleNamespace(executors=["primary", None, "fallback"],
                         binding=SimpleNamespace(compile="auto", task=SimpleNamespace(period_ns=100_000_000)))
    stack = SimpleNamespace(rt=SimpleNamespace(sched=SimpleNamespace(tasks={"t": ts})))
    drive.StackRuntime.warm_up(stack, seconds=20.0)   # type: ignore[arg-type]
    assert asked == [("primary", "auto", pytest.approx(200.0)), ("fallback", "auto", pytest.approx(200.0))]
    asked.clear()
    drive.StackRuntime.warm_up(stack)   # type: ignore[arg-type]
    assert [j for *_, j in asked] == [DEFAULT_JOBS, DEFAULT_JOBS]
