"""Bag reading/writing: round trips in both storage formats, ordering, damaged and missing bags."""
from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from rosbags.rosbag2 import Writer
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from rt_runtime.bag import (BagError, BagWarning, BagWriter, CodecError, Objects, array_to_cloud, array_to_image,
                            cloud_to_array, from_cdr, image_to_array, msg_class, msg_to_objects, objects_to_msg,
                            open_bag, to_cdr)
from rt_runtime.bag.types import GROUND_TRUTH_OBJECTS

FORMATS = ["mcap", "sqlite3"]
STRING = "std_msgs/msg/String"


def _string(text: str) -> object:
    return msg_class(STRING)(data=text)


def _storage(bag: Path) -> Path:
    return next(p for p in bag.iterdir() if p.suffix in (".mcap", ".db3"))


def _cloud() -> object:
    dt = np.dtype({"names": ["x", "y", "z", "intensity"], "formats": ["<f4"] * 4, "offsets": [0, 4, 8, 16],
                   "itemsize": 20})
    pts = np.zeros((4, 5), dt)
    pts["x"] = np.arange(20).reshape(4, 5)
    pts["intensity"] = 7
    return array_to_cloud(pts, "lidar", 5)


def _objects() -> Objects:
    return Objects(5, "map", np.array([3, 9], np.uint32), np.array([1, 4], np.uint8),
                   np.arange(14, dtype=np.float64).reshape(2, 7), np.ones((2, 3)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_every_codec(tmp_path: Path, fmt: str) -> None:
    img = np.arange(6 * 4 * 3, dtype=np.uint8).reshape(6, 4, 3)
    msgs = {
        "/img": ("sensor_msgs/msg/Image", array_to_image(img, "rgb8", "cam", 1)),
        "/cloud": ("sensor_msgs/msg/PointCloud2", _cloud()),
        "/gt": (GROUND_TRUTH_OBJECTS, objects_to_msg(_objects())),
        "/s": (STRING, _string("hello")),
    }
    bag = tmp_path / "b"
    with BagWriter(bag, fmt) as w:
        for topic, (typ, msg) in msgs.items():
            w.add_topic(topic, typ)
            w.write(topic, 10, msg)
        w.write("/s", 20, to_cdr(_string("raw")))  # raw CDR is written as given
        w.set_metadata("k", "v")
    with open_bag(bag) as r:
        assert r.storage == fmt and r.metadata == {"k": "v"}
        assert r.topics == {t: typ for t, (typ, _) in msgs.items()}
        assert (r.start_ns, r.duration_ns, r.message_count) == (10, 10, 5)
        got = list(r.messages())
        by_topic = {m.topic: m for m in got if m.t_ns == 10}
        for topic, (typ, msg) in msgs.items():
            assert by_topic[topic].raw_cdr == to_cdr(msg, typ)  # identical bytes
        assert (image_to_array(r.decode(by_topic["/img"])) == img).all()
        assert (cloud_to_array(r.decode(by_topic["/cloud"])) == cloud_to_array(msgs["/cloud"][1])).all()
        gt = msg_to_objects(r.decode(by_topic["/gt"]))
        ref = _objects()
        assert (gt.ids == ref.ids).all() and (gt.classes == ref.classes).all()
        assert np.array_equal(gt.boxes, ref.boxes) and np.array_equal(gt.velocities, ref.velocities)
        assert r.decode(got[-1]).data == "raw"


@pytest.mark.parametrize("fmt", FORMATS)
def test_order_is_time_then_topic_then_sequence(tmp_path: Path, fmt: str) -> None:
    bag = tmp_path / "b"
    with BagWriter(bag, fmt) as w:
        for t in ("/b", "/a", "/c"):
            w.add_topic(t, STRING)
        # written deliberately out of topic order, with ties and one earlier stamp at the end
        for i, (topic, t) in enumerate([("/c", 5), ("/b", 5), ("/a", 5), ("/b", 5), ("/a", 7), ("/c", 3)]):
            w.write(topic, t, _string(str(i)))
    with open_bag(bag) as r:
        got = [(m.t_ns, m.topic, m.seq, r.decode(m).data) for m in r.messages()]
        assert got == [(3, "/c", 0, "5"), (5, "/a", 0, "2"), (5, "/b", 0, "1"), (5, "/b", 1, "3"),
                       (5, "/c", 1, "0"), (7, "/a", 1, "4")]
        assert [m.topic for m in r.messages(["/b"])] == ["/b", "/b"]
        with pytest.raises(BagError, match="no topic /nope"):
            list(r.messages(["/nope"]))


def test_custom_type_readable_without_this_package(tmp_path: Path) -> None:
    """The bag carries the GroundTruthObjects definition: plain rosbags can decode it."""
    bag = tmp_path / "b"
    with BagWriter(bag, "mcap") as w:
        w.add_topic("/gt", GROUND_TRUTH_OBJECTS)
        w.write("/gt", 1, objects_to_msg(_objects()))
    from rosbags.rosbag2 import Reader
    store = get_typestore(Stores.ROS2_KILTED)
    with Reader(bag) as r:
        conn = r.connections[0]
        store.register(get_types_from_msg(conn.msgdef.data, conn.msgtype))
        _, _, raw = next(r.messages())
        msg = store.deserialize_cdr(raw, conn.msgtype)
    assert [o.id for o in msg.objects] == [3, 9] and msg.objects[1].label == 4


def test_missing_and_not_a_bag(tmp_path: Path) -> None:
    with pytest.raises(BagError, match="no such file"):
        open_bag(tmp_path / "absent")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(BagError, match="expected a rosbag2 directory"):
        open_bag(tmp_path / "x.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BagError, match="found 0 storage files"):
        open_bag(tmp_path / "empty")
    with pytest.raises(BagError, match="exists already"):
        BagWriter(tmp_path / "empty")
    with pytest.raises(BagError, match="unknown storage format"):
        BagWriter(tmp_path / "new", "zip")


def _big_bag(tmp_path: Path, fmt: str, n: int = 400) -> Path:
    bag = tmp_path / f"big_{fmt}"
    with BagWriter(bag, fmt) as w:
        w.add_topic("/s", STRING)
        w.add_topic("/t", STRING)
        for i in range(n):
            w.write("/s", i * 1000, _string("x" * 3000 + str(i)))
            w.write("/t", i * 1000, _string(str(i)))
    return bag


@pytest.mark.parametrize("fmt", FORMATS)
def test_truncated_bag_yields_what_is_readable(tmp_path: Path, fmt: str) -> None:
    bag = _big_bag(tmp_path, fmt)
    f = _storage(bag)
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.warns(BagWarning, match=r"truncated or damaged: read \d+ of 800 messages; .*stopped at byte"):
        r = open_bag(bag)
    with r:
        assert r.truncated and f.name in r.truncated
        got = list(r.messages())
        assert 100 < len(got) < 800
        ts = [m.t_ns for m in got]
        assert ts == sorted(ts)
        for m in got:  # every message handed out is whole
            assert r.decode(m).data.endswith(str(m.t_ns // 1000))


@pytest.mark.parametrize("fmt", FORMATS)
def test_corrupt_or_empty_storage_file_is_a_clear_error(tmp_path: Path, fmt: str) -> None:
    bag = _big_bag(tmp_path, fmt, 20)
    f = _storage(bag)
    data = bytearray(f.read_bytes())
    data[:16] = b"garbage-garbage!"
    f.write_bytes(bytes(data))
    with pytest.raises(BagError, match=rf"bag .*: cannot read {f.name}: not an? (MCAP|SQLite) file: expected magic"):
        open_bag(bag)
    f.write_bytes(b"")
    with pytest.raises(BagError, match=f.name):
        open_bag(bag)


def test_unknown_message_type_and_undecodable_messages_warn_with_a_count(tmp_path: Path) -> None:
    bag = tmp_path / "b"
    w = Writer(bag, version=9)
    w.open()
    conn = w.add_connection("/mystery", "foo_msgs/msg/Bar", msgdef="", rihs01="RIHS01_" + "0" * 64)
    w.write(conn, 1, b"\x00\x01\x00\x00abcd")
    store = get_typestore(Stores.ROS2_KILTED)
    conn2 = w.add_connection("/s", STRING, typestore=store)
    w.write(conn2, 2, bytes(store.serialize_cdr(_string("ok"), STRING)))
    w.write(conn2, 3, b"\x00\x01\x00\x00\xff\xff")  # a broken message
    w.close()
    with open_bag(bag) as r:
        m = next(r.messages(["/mystery"]))
        with pytest.raises(CodecError, match="topic /mystery: unknown message type 'foo_msgs/msg/Bar'"):
            r.decode(m)
        with pytest.warns(BagWarning, match=r"skipped 1 undecodable message\(s\) on /s"):
            ok = [msg.data for _, msg in r.decoded(["/s"])]
        assert ok == ["ok"] and r.skipped["/s"] == 1


def test_bare_storage_file_and_lost_metadata(tmp_path: Path) -> None:
    bag = _big_bag(tmp_path, "mcap", 3)
    f = _storage(bag)
    with open_bag(f) as r:
        assert r.message_count == 6
    os.remove(bag / "metadata.yaml")
    with open_bag(bag) as r:
        assert [m.topic for m in r.messages()] == ["/s", "/t"] * 3


def test_writer_abort_removes_partial_bag(tmp_path: Path) -> None:
    bag = tmp_path / "b"
    with pytest.raises(RuntimeError):
        with BagWriter(bag, "mcap") as w:
            w.add_topic("/s", STRING)
            w.write("/s", 1, _string("a"))
            raise RuntimeError("boom")
    assert not bag.exists()
    with BagWriter(bag, "mcap") as w:
        with pytest.raises(BagError, match="was not added"):
            w.write("/nope", 1, _string("a"))
        with pytest.raises(BagError, match="unknown message type"):
            w.add_topic("/x", "nope_msgs/msg/X")
    shutil.rmtree(bag)


def test_from_cdr_is_zero_copy_and_checks_type() -> None:
    raw = to_cdr(_cloud())
    cloud = cloud_to_array(from_cdr(raw, "sensor_msgs/msg/PointCloud2"))
    assert np.shares_memory(cloud, np.frombuffer(raw, np.uint8))
    with pytest.raises(CodecError, match="unknown message type"):
        from_cdr(raw, "nope/msg/X")
    with pytest.raises(CodecError, match="cannot decode"):
        from_cdr(raw[:40], "sensor_msgs/msg/PointCloud2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert from_cdr(to_cdr(_string("a")), STRING).data == "a"


@pytest.mark.parametrize("fmt", FORMATS)
def test_bytes_corrupted_inside_the_file_never_escape_as_tracebacks(tmp_path: Path, fmt: str) -> None:
    clean = _big_bag(tmp_path, fmt, 60)
    size = _storage(clean).stat().st_size
    for i, frac in enumerate((0.2, 0.5, 0.8)):
        bag = tmp_path / f"c{i}"
        shutil.copytree(clean, bag)
        f = _storage(bag)
        data = bytearray(f.read_bytes())
        pos = int(size * frac)
        data[pos:pos + 64] = bytes(range(64))
        f.write_bytes(bytes(data))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", BagWarning)
                with open_bag(bag) as r:
                    for _ in r.decoded():
                        pass
        except BagError as e:  # the only way out: a one-line error that names the bag
            assert str(bag) in str(e) and "\n" not in str(e)
