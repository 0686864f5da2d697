"""Bad sensor data is not accepted as good (docs/SENSORS.md, "Bad sensor data"): NaN/Inf inputs are
rejected and degrade the stack, header stamps running backwards or far from the log time are
counted, and a chunk whose CRC does not match its records is counted bad, one line, no traceback."""
from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
from replay_fixtures import short_bag  # noqa: F401 - a fixture

from rt_runtime.bag import BagWarning, BagWriter, array_to_cloud, open_bag, stamp
from rt_runtime.bag.types import stamp_ns
from rt_runtime.config.stack import load_stack
from rt_runtime.io import INGRESS_CODECS, IngressError, NonFiniteError
from rt_runtime.io.ingress import decode
from rt_runtime.replay import replay

ROOT = Path(__file__).resolve().parents[1]
ODOM, LIDAR, ROUTE = "/localization/odometry", "/sensing/lidar/points", "/planning/route"
S = 1_000_000_000
XYZI = np.dtype([("x", "f4"), ("y", "f4"), ("z", "f4"), ("intensity", "f4")])


def _copy(src: Path, dst: Path, until_ns: int, edit=None) -> int:
    """``src``'s first ``until_ns`` into ``dst``, message by message; ``edit(msg, reader, t)`` may
    return a replacement message object. Returns how many messages ``edit`` replaced."""
    edited = 0
    with open_bag(src) as r, BagWriter(dst, "mcap") as w:
        for topic, msgtype in r.topics.items():
            w.add_topic(topic, msgtype)
        for m in r.messages():
            t = m.t_ns - r.start_ns
            if t > until_ns:
                break
            new = edit(m, r, t) if edit is not None else None
            edited += new is not None
            w.write(m.topic, m.t_ns, m.raw_cdr if new is None else new)
    return edited


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "warning" in line]


def test_non_finite_odometry_is_rejected_and_degrades_the_stack(short_bag, tmp_path, capsys):  # noqa: F811
    def nan_pose(m, r, t):
        if m.topic == ODOM and S <= t < 1.5 * S:
            msg = r.decode(m)
            msg.pose.pose.position.x = math.nan
            msg.pose.pose.orientation.z = math.inf   # alone, it would still give a finite yaw
            return msg
        return None

    bag = tmp_path / "nan_odom"
    n = _copy(short_bag, bag, 2 * S, nan_pose)
    assert n == 25   # 0.5 s at 50 Hz
    result = replay(bag, load_stack(ROOT / "config" / "stack.yaml"))
    assert result.bad_messages == {ODOM: {"nonfinite": n}}
    hist = result.extra["safety"]["history"]
    assert hist and (hist[0]["from"], hist[0]["to"], hist[0]["reason"]) == ("nominal", "degraded", "sensor_bad")
    assert S <= hist[0]["t_s"] * S < 1.1 * S
    lines = _warnings(capsys.readouterr().err)
    assert len(lines) == 1 and ODOM in lines[0] and "position.x, pose.orientation.z" in lines[0], lines


def test_stamps_backwards_or_far_from_the_log_time_are_counted_and_the_messages_used(short_bag, tmp_path,  # noqa: F811
                                                                                       capsys):
    sweeps = {"n": 0}

    def odd_stamps(m, r, t):
        if m.topic == LIDAR:
            sweeps["n"] += 1
            if sweeps["n"] >= 6 and sweeps["n"] % 2 == 0:   # 150 ms earlier: 50 ms before the sweep before
                msg = r.decode(m)
                msg.header.stamp = stamp(stamp_ns(msg.header.stamp) - 150_000_000)
                return msg
        if m.topic == ROUTE:   # 5 s ahead of its log time (another clock)
            msg = r.decode(m)
            msg.header.stamp = stamp(stamp_ns(msg.header.stamp) + 5 * S)
            return msg
        return None

    bag = tmp_path / "odd_stamps"
    _copy(short_bag, bag, 2 * S, odd_stamps)
    cfg = load_stack(ROOT / "config" / "stack.yaml")
    with open_bag(bag) as r:
        ingress = {x.topic for x in cfg.ingress}
        expected_inputs = sum(1 for m in r.messages() if m.topic in ingress)
        backwards = sum(1 for m in r.messages([LIDAR]) if m.seq >= 5 and m.seq % 2 == 1)
        routes = r.counts[ROUTE]
    result = replay(bag, cfg)
    assert result.bad_messages == {LIDAR: {"stamp_backwards": backwards}, ROUTE: {"stamp_far": routes}}
    assert backwards >= 3 and routes >= 1
    assert result.inputs == expected_inputs   # counted, and still used
    lines = _warnings(capsys.readouterr().err)
    assert len(lines) == 2, lines
    assert any(LIDAR in x and "goes back" in x and "stamp_backwards" in x for x in lines)
    assert any(ROUTE in x and "from the log time" in x and "stamp_far" in x for x in lines)


def _chunks(mcap: Path) -> list[tuple[int, int, int, int, int, int]]:
    """(record offset, start ns, end ns, CRC field offset, data offset, data length) of each chunk."""
    data = mcap.read_bytes()
    pos, out = 8, []
    while pos + 9 <= len(data):
        op, n = data[pos], struct.unpack_from("<Q", data, pos + 1)[0]
        if op == 0x06:   # Chunk: start, end, uncompressed size, crc, compression, compressed size, records
            start, end = struct.unpack_from("<QQ", data, pos + 9)
            clen = struct.unpack_from("<I", data, pos + 9 + 28)[0]
            size = struct.unpack_from("<Q", data, pos + 9 + 32 + clen)[0]
            out.append((pos, start, end, pos + 9 + 24, pos + 9 + 40 + clen, size))
        if op == 0x02:   # Footer
            break
        pos += 9 + n
    return out


def _with_crcs(bag: Path) -> tuple[Path, list]:
    """Write each (uncompressed) chunk's CRC, as `ros2 bag record` does (rosbags writes 0: none)."""
    mcap = next(bag.glob("*.mcap"))
    chunks = _chunks(mcap)
    data = bytearray(mcap.read_bytes())
    for _, _, _, crc_at, at, size in chunks:
        struct.pack_into("<I", data, crc_at, zlib.crc32(data[at:at + size]))
    mcap.write_bytes(bytes(data))
    return mcap, chunks


def _raw(bag: Path, **kw) -> list:
    with open_bag(bag) as r:
        return [(m.topic, m.t_ns, m.seq, bytes(m.raw_cdr), m.damage) for m in r.messages(**kw)]


def test_a_chunk_failing_its_crc_is_counted_bad_in_one_line_without_a_traceback(short_bag, tmp_path):  # noqa: F811
    bag = tmp_path / "crc"
    _copy(short_bag, bag, int(1.2 * S))
    clean = _raw(bag)
    mcap, chunks = _with_crcs(bag)
    assert _raw(bag) == clean   # CRCs that match: read as before
    at, start, end, _, data_at, size = chunks[4]
    data = bytearray(mcap.read_bytes())
    for k in range(4):   # a few bytes in the middle of the chunk's records
        data[data_at + size // 2 + 7 * k] ^= 0x5A
    mcap.write_bytes(bytes(data))

    cfg = load_stack(ROOT / "config" / "stack.yaml")
    ingress = {x.topic for x in cfg.ingress}
    expected: dict[str, int] = {}
    for topic, t, *_ in clean:
        if start <= t <= end and topic in ingress:
            expected[topic] = expected.get(topic, 0) + 1
    assert len(expected) >= 2

    # The reader: the chunk's messages are skipped with one warning, or yielded as damaged.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept = _raw(bag)
    said = [str(w.message) for w in caught if issubclass(w.category, BagWarning)]
    assert len(said) == 1 and f"chunk at byte {at}" in said[0] and "CRC" in said[0], said
    assert kept == [m for m in clean if not start <= m[1] <= end]
    marked = [m for m in _raw(bag, damaged=True) if m[4] is not None]
    assert {m[4][0] for m in marked} == {"crc"} and len(marked) == sum(1 for m in clean if start <= m[1] <= end)

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "rt_runtime.cli", "replay", str(bag), "--json"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["bad_messages"] == {t: {"crc": n} for t, n in expected.items()}
    lines = [x for x in proc.stderr.splitlines() if "note:" not in x]   # nothing else: no Python warning either
    assert len(lines) == 1 and str(bag) in lines[0] and f"chunk at byte {at}" in lines[0] and "CRC" in lines[0], lines


def test_codecs_reject_non_finite_values_but_tolerate_lidar_no_returns():
    pts = np.zeros(10, XYZI)
    pts["x"] = np.arange(10)
    pts["x"][:4] = np.nan   # 40 % no-return: a normal sweep
    out = decode(INGRESS_CODECS["lidar_points"], array_to_cloud(pts, "lidar", 0), "/l")["value"]
    assert out.shape == (6, 4) and np.isfinite(out).all()
    pts["x"][:6] = np.nan   # 60 %: rejected
    with pytest.raises(NonFiniteError, match=r"/l: .*6 of 10 points"):
        decode(INGRESS_CODECS["lidar_points"], array_to_cloud(pts, "lidar", 0), "/l")
    pts["x"][:] = 1
    pts["intensity"][3] = np.inf
    with pytest.raises(NonFiniteError, match="intensity"):
        decode(INGRESS_CODECS["lidar_points"], array_to_cloud(pts, "lidar", 0), "/l")
    radar = np.zeros(5, [("x", "f4"), ("y", "f4"), ("z", "f4"), ("doppler", "f4"), ("rcs", "f4")])
    radar["doppler"][2] = np.nan
    with pytest.raises(NonFiniteError, match="doppler") as e:
        decode(INGRESS_CODECS["radar_points"], array_to_cloud(radar, "radar", 0), "/r")
    assert isinstance(e.value, IngressError) and e.value.kind == "nonfinite"
