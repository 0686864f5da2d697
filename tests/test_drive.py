"""The driver (``rt_runtime/drive.py``): the one place a stack file becomes a runtime (issue 15 item 1).

Replay, the live node, the fault campaign and the leak soak all build their runtime through
``open_stack``; a second place constructing a ``Runtime`` would wire device, capture and stream
rules twice, so the source is scanned for one. The ingress conversion is checked for what it
promises: no copy on the host, tensors where the stack's device keeps them.
"""
from __future__ import annotations

import ast
import dataclasses
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from rt_runtime.config.stack import build_bindings, load_stack
from rt_runtime.drive import host_copy, ingress_tensor, open_stack
from rt_runtime.sched import VirtualClock

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rt_runtime"
DRIVER = PACKAGE / "drive.py"
# The drivers of a stack: each must build its runtime through the driver.
ADAPTERS = ("replay/run.py", "ros/node.py", "faults/harness.py")


def calls(path: Path, name: str) -> list[int]:
    """Lines of ``path`` that call ``name(...)`` (as a bare name or an attribute: ``x.name(...)``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if called == name:
                out.append(node.lineno)
    return out


def imports(path: Path, name: str) -> bool:
    """Whether ``path`` imports ``name`` from a module (``from x import name``)."""
    return any(isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names)
               for node in ast.walk(ast.parse(path.read_text(), str(path))))


def test_only_the_driver_constructs_a_runtime_outside_the_scheduler():
    # sched/ is the runtime itself.
    found = {str(p.relative_to(ROOT)): lines for p in sorted(PACKAGE.rglob("*.py"))
             if p != DRIVER and PACKAGE / "sched" not in p.parents and (lines := calls(p, "Runtime"))}
    assert found == {}, f"Runtime(...) built outside rt_runtime/drive.py: {found}; use drive.open_stack"
    assert calls(DRIVER, "Runtime"), "the driver no longer builds the runtime: this test scans for nothing"


def test_replay_node_campaign_and_soak_go_through_the_driver():
    for rel in ADAPTERS:
        assert calls(PACKAGE / rel, "open_stack"), f"rt_runtime/{rel} does not build its runtime with open_stack"
    assert calls(ROOT / "bench" / "leak_audit.py", "open_stack"), "the leak soak does not build its runtime with open_stack"
    # Warm-up and device opening are the driver's too: a second copy would drift from it.
    for name in ("warm_up", "device_for"):
        elsewhere = {str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
                     if p != DRIVER and p.parent.name not in ("exec", "device") and imports(p, name)}
        assert elsewhere == set(), f"{name} imported outside the driver: {sorted(elsewhere)}"


@pytest.mark.parametrize("writeable", [True, False])
def test_ingress_tensor_wraps_a_contiguous_array_without_a_copy_on_the_host(writeable):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    a.flags.writeable = writeable   # read-only: a view of a message's bytes
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # torch's "not writable" warning is the driver's to silence
        t = ingress_tensor(a, "cpu")
    assert t.device.type == "cpu" and t.dtype == torch.float32 and tuple(t.shape) == (3, 4)
    assert t.data_ptr() == a.ctypes.data   # the array's own bytes
    assert torch.equal(t, torch.arange(12, dtype=torch.float32).reshape(3, 4))


def test_host_copy_is_a_copy():
    t = torch.ones(3)
    out = host_copy(t)
    t.add_(1.0)
    assert isinstance(out, np.ndarray) and out.tolist() == [1.0, 1.0, 1.0]
    a = np.zeros(2)
    b = host_copy(a)
    a += 1
    assert b.tolist() == [0.0, 0.0]


@pytest.fixture(scope="module")
def reference() -> tuple:
    """The reference stack's config and bindings (graphs built once for the module)."""
    cfg = load_stack(ROOT / "config" / "stack.yaml")
    return cfg, *build_bindings(cfg)


def test_open_stack_on_cpu_async_uses_the_twin_and_keeps_tensors_on_the_host(reference):
    cfg, bindings, initial = reference
    cfg = dataclasses.replace(cfg, device="cpu-async")
    before = threading.active_count()
    stack = open_stack(cfg, bindings, initial, clock=VirtualClock())
    try:
        assert stack.device.name == "cpu-async"
        assert all(ex.device is stack.device for ts in stack.rt.sched.tasks.values()
                   for ex in ts.executors if ex is not None)
        assert stack.rt.sched.async_device   # hand-offs ordered by the twin's events
        a = np.ones((5, 3), dtype=np.float32)
        t = stack.to_tensor(a)
        assert stack.tensors == "cpu" and t.device.type == "cpu" and t.data_ptr() == a.ctypes.data
        stack.warm_up()   # the executors' streams start their threads
        assert threading.active_count() > before
    finally:
        stack.close()
    assert threading.active_count() == before   # close stops the device's stream threads


def test_open_stack_wires_the_config_and_pushes_initial_values(reference):
    cfg, bindings, initial = reference
    stack = open_stack(cfg, bindings, initial, clock=VirtualClock(), workers=2)
    try:
        rt = stack.rt
        assert stack.device.name == "cpu" and len(rt.sched.workers) == 2
        assert rt.policy.name == cfg.policy and rt.realtime is False   # never realtime on a virtual clock
        stack.push_initial()
        rt.run_until(0)   # pushed values become visible at their instant
        for channel in initial:
            assert rt.channels[channel].writes == 1, f"{channel}: initial value not pushed"
        meta = stack.trace_meta(clock="virtual")
        assert meta["clock"] == "virtual" and meta["workers"] == 2 and meta["config"] == cfg.source
        assert set(meta["tasks_config"]) == {b.name for b in bindings}
    finally:
        stack.close()
