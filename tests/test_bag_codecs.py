"""Codecs: PointCloud2 and images to arrays and back, including the layouts real bags contain."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rt_runtime.bag import (CodecError, array_to_cloud, array_to_compressed, array_to_image, cloud_to_array, cloud_xyz,
                            compressed_to_array, from_cdr, image_to_array, msg_class, to_cdr, to_rgb)
from rt_runtime.bag.types import header


def _field(name: str, offset: int, datatype: int, count: int = 1) -> object:
    return msg_class("sensor_msgs/msg/PointField")(name=name, offset=offset, datatype=datatype, count=count)


def _raw_cloud(fields: list, point_step: int, row_step: int, h: int, w: int, data: bytes, big: bool = False) -> object:
    return msg_class("sensor_msgs/msg/PointCloud2")(
        header=header(0, "lidar"), height=h, width=w, fields=fields, is_bigendian=big, point_step=point_step,
        row_step=row_step, data=np.frombuffer(data, np.uint8), is_dense=False)


def test_hand_built_cloud_with_padding_and_odd_row_step() -> None:
    """x,y,z float32, 4 pad bytes, intensity float32, ring uint16 -> point_step 22; rows padded by 6 bytes."""
    h, w, step, row = 3, 5, 22, 22 * 5 + 6
    buf = bytearray(b"\xee" * (row * h))  # padding bytes are garbage on purpose
    for r in range(h):
        for c in range(w):
            struct.pack_into("<fff4xfH", buf, r * row + c * step, r, c, r * c, 1.5 * c, r)
    fields = [_field("x", 0, 7), _field("y", 4, 7), _field("z", 8, 7), _field("intensity", 16, 7),
              _field("ring", 20, 4)]
    msg = _raw_cloud(fields, step, row, h, w, bytes(buf))
    msg = from_cdr(to_cdr(msg), "sensor_msgs/msg/PointCloud2")  # through CDR as from a bag
    a = cloud_to_array(msg)
    assert a.shape == (3, 5) and a.dtype.itemsize == 22
    assert np.shares_memory(a, msg.data)  # zero-copy view
    assert (a["x"] == np.arange(3)[:, None]).all() and (a["y"] == np.arange(5)[None, :]).all()
    assert (a["intensity"] == 1.5 * np.arange(5)).all() and (a["ring"] == np.arange(3)[:, None]).all()
    xyz = cloud_xyz(a, ("intensity", "ring"))
    assert xyz.shape == (15, 5) and xyz.dtype == np.float32
    back = cloud_to_array(array_to_cloud(a, "lidar", 0))  # re-encoded tight: same values
    assert back.shape == (3, 5) and all((back[n] == a[n]).all() for n in a.dtype.names)


def test_big_endian_cloud_and_count_fields() -> None:
    buf = struct.pack(">ffhh", 1.0, 2.0, -3, 4) + struct.pack(">ffhh", 5.0, 6.0, 7, 8)
    msg = _raw_cloud([_field("x", 0, 7), _field("y", 4, 7), _field("v", 8, 3, 2)], 12, 24, 1, 2, buf, big=True)
    a = cloud_to_array(msg)
    assert a.shape == (2,) and a["x"].tolist() == [1.0, 5.0] and a["v"].tolist() == [[-3, 4], [7, 8]]
    rt = array_to_cloud(a, "lidar", 0)
    assert rt.is_bigendian and cloud_to_array(rt)["v"].tolist() == [[-3, 4], [7, 8]]


def test_cloud_bad_layouts_are_clear_errors() -> None:
    data = bytes(64)
    overrun = r"field 'intensity' \(float32 x1 at offset 12\) ends at byte 16, beyond point_step 14"
    with pytest.raises(CodecError, match=overrun):
        cloud_to_array(_raw_cloud([_field("x", 0, 7), _field("intensity", 12, 7)], 14, 28, 1, 2, data))
    with pytest.raises(CodecError, match="datatype 9"):
        cloud_to_array(_raw_cloud([_field("x", 0, 9)], 4, 8, 1, 2, data))
    with pytest.raises(CodecError, match=r"data has 64 bytes; 2x10 points with point_step 4 and row_step 40 need 80"):
        cloud_to_array(_raw_cloud([_field("x", 0, 7)], 4, 40, 2, 10, data))
    with pytest.raises(CodecError, match="row_step 4 < width 2"):
        cloud_to_array(_raw_cloud([_field("x", 0, 7)], 4, 4, 2, 2, data))
    with pytest.raises(CodecError, match="expected a structured array"):
        array_to_cloud(np.zeros((3, 3), np.float32), "f", 0)


def test_nan_points_and_empty_clouds() -> None:
    dt = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4")])
    a = np.zeros(3, dt)
    a["x"][1] = np.nan
    msg = array_to_cloud(a, "f", 0)
    assert not msg.is_dense
    assert cloud_xyz(cloud_to_array(msg)).shape == (2, 3)
    assert cloud_xyz(cloud_to_array(msg), finite=False).shape == (3, 3)
    assert cloud_to_array(array_to_cloud(np.zeros(0, dt), "f", 0)).shape == (0,)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["<f4", "<f8", "<u2", "<i1", "<u4", "<i2"]), min_size=1, max_size=5),
       st.integers(0, 6), st.integers(1, 4), st.integers(1, 6), st.integers(0, 2**31))
def test_cloud_round_trip_any_layout(types: list, pad: int, h: int, w: int, seed: int) -> None:
    names = [f"f{i}" for i in range(len(types))]
    offsets, off = [], 0
    for t in types:
        offsets.append(off)
        off += np.dtype(t).itemsize + pad
    dt = np.dtype({"names": names, "formats": types, "offsets": offsets, "itemsize": off})
    rng = np.random.default_rng(seed)
    a = np.zeros((h, w) if h > 1 else (w,), dt)
    for n, t in zip(names, types):
        a[n] = rng.integers(0, 100, a.shape).astype(t)
    raw = to_cdr(array_to_cloud(a, "f", 0))
    assert to_cdr(array_to_cloud(a, "f", 0)) == raw  # deterministic bytes (zeroed padding)
    b = cloud_to_array(from_cdr(raw, "sensor_msgs/msg/PointCloud2"))
    assert b.shape == a.shape and all((b[n] == a[n]).all() for n in names)


@pytest.mark.parametrize("enc,dtype,ch", [("rgb8", np.uint8, 3), ("bgr8", np.uint8, 3), ("mono8", np.uint8, 1),
                                          ("16UC1", np.uint16, 1)])
def test_image_round_trip(enc: str, dtype: type, ch: int) -> None:
    rng = np.random.default_rng(1)
    img = rng.integers(0, np.iinfo(dtype).max, (7, 5, ch)).astype(dtype)
    msg = from_cdr(to_cdr(array_to_image(img, enc, "cam", 3)), "sensor_msgs/msg/Image")
    back = image_to_array(msg)
    assert back.shape == (7, 5, ch) and back.dtype == dtype and (back == img).all()
    assert to_rgb(back, enc).shape == (7, 5, 3)


def test_image_with_row_padding_big_endian_and_bad_sizes() -> None:
    h, w, step = 3, 4, 12  # mono16 big-endian: 8 bytes of pixels + 4 padding per row
    rows = [struct.pack(">4H", *(100 * r + c for c in range(w))) + b"\xaa" * 4 for r in range(h)]
    img_cls = msg_class("sensor_msgs/msg/Image")
    msg = img_cls(header=header(0, "cam"), height=h, width=w, encoding="16UC1", is_bigendian=1, step=step,
                  data=np.frombuffer(b"".join(rows), np.uint8))
    a = image_to_array(msg)
    assert a[..., 0].tolist() == [[100 * r + c for c in range(w)] for r in range(h)]
    bad = img_cls(header=header(0, "cam"), height=4, width=4, encoding="rgb8", is_bigendian=0, step=12,
                  data=np.zeros(40, np.uint8))
    with pytest.raises(CodecError, match=r"data has 40 bytes; 4x4 rgb8 with step 12 needs 48"):
        image_to_array(bad, "/cam")
    with pytest.raises(CodecError, match="encoding 'yuv422' not supported"):
        image_to_array(img_cls(header=header(0, "c"), height=1, width=1, encoding="yuv422", is_bigendian=0, step=2,
                               data=np.zeros(2, np.uint8)))
    with pytest.raises(CodecError, match=r"rgb8 needs shape \(H, W, 3\)"):
        array_to_image(np.zeros((2, 2), np.uint8), "rgb8", "c", 0)


def test_compressed_png_is_exact_and_jpeg_close() -> None:
    pytest.importorskip("PIL")
    y, x = np.mgrid[0:48, 0:64]
    img = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1).astype(np.uint8)
    png = from_cdr(to_cdr(array_to_compressed(img, "cam", 0, "png")), "sensor_msgs/msg/CompressedImage")
    assert (compressed_to_array(png) == img).all()
    jpg = array_to_compressed(img, "cam", 0, "jpeg", quality=95)
    assert np.abs(compressed_to_array(jpg).astype(int) - img).mean() < 3
    grey = compressed_to_array(array_to_compressed(img[..., 0], "cam", 0, "png"))
    assert grey.shape == (48, 64, 1) and (grey[..., 0] == img[..., 0]).all()
    broken = msg_class("sensor_msgs/msg/CompressedImage")(header=header(0, "c"), format="jpeg",
                                                          data=np.frombuffer(b"\xff\xd8nope", np.uint8))
    with pytest.raises(CodecError, match="cannot decode 6 bytes of jpeg"):
        compressed_to_array(broken, "/cam/compressed")
