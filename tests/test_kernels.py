"""Kernels (exec/kernel.py): TorchScript bodies, bit-equal to the Python body, one-line errors."""
from __future__ import annotations

import os
import threading

import pytest
import torch

from rt_runtime.exec import KernelError, kernel


def _axpy(a: torch.Tensor, x: torch.Tensor, out: torch.Tensor, k: int) -> None:
    y = x
    for _ in range(k):
        y = torch.addcmul(y, a, x).clamp(-3.0, 3.0) * 0.999
    out.copy_(y)


@pytest.mark.skipif(bool(os.environ.get("RT_RUNTIME_EAGER_KERNELS")), reason="kernels run as Python here")
def test_a_kernel_writes_what_the_python_body_writes_bit_for_bit() -> None:
    k = kernel(_axpy)
    g = torch.Generator().manual_seed(11)
    a, x = torch.randn(257, generator=g), torch.randn(257, generator=g)
    want, got = torch.empty(257), torch.empty(257)
    _axpy(a, x, want, 40)
    k(a, x, got, 40)
    assert torch.equal(want, got) and "compiled" in repr(k)
    assert isinstance(k.compiled, torch.jit.ScriptFunction)


def test_threads_compile_a_kernel_once_and_all_get_its_result() -> None:
    k = kernel(_axpy)
    a = x = torch.full((8,), 0.5)
    outs = [torch.empty(8) for _ in range(4)]
    ths = [threading.Thread(target=k, args=(a, x, o, 5)) for o in outs]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert all(torch.equal(o, outs[0]) for o in outs) and float(outs[0][0]) != 0.5


def _not_script(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(torch.as_tensor(sorted({float(v) for v in x})))   # a set comprehension: not TorchScript


def test_a_body_torchscript_cannot_compile_is_one_line_naming_it() -> None:
    with pytest.raises(KernelError) as e:
        kernel(_not_script)(torch.ones(2), torch.empty(2))
    msg = str(e.value)
    assert "\n" not in msg and "tests.test_kernels._not_script" in msg or "_not_script" in msg


def test_eager_mode_runs_the_python_body(monkeypatch) -> None:
    monkeypatch.setenv("RT_RUNTIME_EAGER_KERNELS", "1")
    k = kernel(_not_script)
    out = torch.empty(2)
    k(torch.tensor([2.0, 1.0]), out)
    assert out.tolist() == [1.0, 2.0] and k.compiled is k.py
