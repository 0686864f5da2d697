"""TensorSpec contracts against real numpy and torch tensors."""
import numpy as np
import pytest
import torch

from rt_runtime import ContractError, Dim, TensorSpec
from rt_runtime.core.units import DurationError, parse_duration


def test_symbolic_dims_parse_and_bound():
    s = TensorSpec("points", ("N<=131072", 4), "float32")
    assert s.shape == (Dim("N", 131072), 4)
    assert s.max_shape == (131072, 4)
    assert s.max_nbytes == 131072 * 4 * 4
    assert not s.is_static
    s.check(np.zeros((0, 4), np.float32))
    s.check(torch.zeros(131072, 4))


@pytest.mark.parametrize(
    "tensor, field, expected, found",
    [
        (np.zeros((8, 3), np.float32), "shape[1]", "4", "3"),
        (np.zeros((131073, 4), np.float32), "shape[0]", "N <= 131072", "131073"),
        (np.zeros((8, 4), np.float64), "dtype", "float32", "float64"),
        (np.zeros((8, 4, 1), np.float32), "shape", "2 dims", "3 dims"),
        (np.zeros((4, 8), np.float32).T, "layout", "contiguous", "strides"),
        (torch.zeros(8, 4, dtype=torch.float16), "dtype", "float32", "float16"),
        (torch.zeros(4, 8).t(), "layout", "contiguous", "strides"),
        ([[0.0] * 4], "type", "numpy, torch or cupy", "list"),
    ],
)
def test_violation_names_graph_op_tensor_field_expected_found(tensor, field, expected, found):
    s = TensorSpec("points", ("N<=131072", 4), "float32")
    with pytest.raises(ContractError) as e:
        s.check(tensor, op="voxelize", graph="lidar")
    msg = str(e.value)
    assert "graph 'lidar'" in msg and "op 'voxelize'" in msg and "tensor 'points'" in msg
    assert e.value.field == field
    assert expected in msg and found in msg


def test_alignment_checked_on_the_data_pointer():
    s = TensorSpec("x", (4,), "float32", alignment=64)
    base = np.zeros(128, np.uint8)
    off = (-base.ctypes.data) % 64
    aligned = base[off:off + 16].view(np.float32)
    s.check(aligned)
    with pytest.raises(ContractError, match="alignment"):
        s.check(base[off + 4:off + 20].view(np.float32))


def test_layouts():
    nchw = TensorSpec("img", (1, 3, 8, 8), "float32", layout="NCHW")
    nchw.check(torch.zeros(1, 3, 8, 8))
    cl = TensorSpec("img", (1, 3, 8, 8), "float32", layout="channels_last")
    cl.check(torch.zeros(1, 3, 8, 8).to(memory_format=torch.channels_last))
    with pytest.raises(ContractError, match="channels_last"):
        cl.check(torch.zeros(1, 3, 8, 8))
    TensorSpec("v", (4,), layout="strided").check(np.zeros(8, np.float32)[::2])


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(shape=(-1,)), "shape"),
        (dict(shape=("N<",)), "shape"),
        (dict(shape=(4,), dtype="floaty"), "dtype"),
        (dict(shape=(4,), device="tpu"), "device"),
        (dict(shape=(4,), layout="zigzag"), "layout"),
        (dict(shape=(4,), layout="NCHW"), "shape"),
        (dict(shape=(4,), alignment=48), "alignment"),
    ],
)
def test_bad_specs_fail_when_built(kwargs, field):
    with pytest.raises(ContractError) as e:
        TensorSpec("t", **kwargs)
    assert e.value.field == field and "tensor 't'" in str(e.value)


def test_durations_need_units():
    assert parse_duration("4ms") == 4_000_000
    assert parse_duration("250us") == 250_000
    assert parse_duration("1.5s") == 1_500_000_000
    assert parse_duration("500ns") == 500
    for bad in (10, 0.5, "10", "10 parsecs", "", None, True):
        with pytest.raises(DurationError):
            parse_duration(bad, what="task 'x': period")
