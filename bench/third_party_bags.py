"""Bags from recordings this project did not make, and the documented flow run on each of them.

The recordings (tests/data/third_party/README.md names source and licence):

* LiDAR: one revolution of a real Velodyne VLP-16 (16 beams, 10 Hz), 75 raw UDP data packets as MRPT
  stores them (``test_velodyne_VLP16.rawlog``, Debian ``mrpt-common``). ``vlp16_packets`` finds the
  packets, ``decode_vlp16`` turns them into points the way ros-drivers/velodyne does (VLP-16 laser
  angles, azimuth interpolated per firing, 2 mm range units, the driver's ROS axes).
* Camera: a 768x576 street video at 10 fps, OpenCV's ``samples/data/vtest.avi`` (Debian ``opencv-doc``);
  40 of its frames are committed as JPEG (``vtest/``), or ``--video`` reads the whole AVI (needs OpenCV).

Each bag holds one LiDAR topic in a driver's layout and one camera topic, and nothing else (no
radar, odometry, tf or CameraInfo), as a user's first recording often is:

* ``velodyne``: ``/velodyne_points``, ros-drivers/velodyne's XYZIRT (point_step 22), unorganized (the
  ROS 2 driver's default), no-return points dropped, ranges 0.9-130 m (its defaults), the stamp at
  the last packet (its default) so ``time`` runs from about -0.1 s to 0;
* ``ouster``: ``/ouster/points``, ouster-ros' 48-byte point, organized 16 beams (row 0 the top
  beam) x 1800 columns, a missing return all zeros (as ouster-ros sends it), ``t`` in ns since the
  stamp (the first column); the VLP-16's reflectivity fills ``reflectivity`` and ``intensity``;
* camera ``bgr8``: ``/camera/image_raw`` as ``sensor_msgs/Image`` bgr8; ``jpeg``:
  ``/camera/image_raw/compressed``, image_transport's ``"bgr8; jpeg compressed bgr8"``.

The one revolution is every sweep (a parked vehicle's view), 10 Hz; the video frames follow at the
video's own 10 fps, 33 ms after the sweeps (not synchronized). Log times are the stamp plus a
driver's delivery delay.

    python bench/third_party_bags.py OUT_DIR [--seconds 4] [--formats mcap,sqlite3] [--video vtest.avi]
        [--build-only]

builds ``OUT_DIR/<lidar>_<camera>_<format>`` for each combination and then, per bag, runs
``rt-runtime inspect BAG --config-out BAG.yaml`` and ``rt-runtime replay BAG --config BAG.yaml --json``
(``--out``, ``--trace`` beside the bag) and prints a table: jobs, aborted, errors, invariant alarms
(redundancy verdicts VOTED and NO_MAJORITY in the trace), /perception/objects messages and the
objects in them, and each distinct error line (docs/BENCHMARKS.md, "Third-party recordings").
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rt_runtime.bag import BagWriter, array_to_cloud, array_to_image, header, msg_class, open_bag  # noqa: E402

FIXTURES = ROOT / "tests" / "data" / "third_party"
VLP16_RAWLOG = FIXTURES / "test_velodyne_VLP16.rawlog"
VTEST_FRAMES = FIXTURES / "vtest"
T0_NS = 1_700_000_000_000_000_000
LIDAR_PERIOD_NS = 100_000_000          # 600 rpm
VIDEO_PERIOD_NS = 100_000_000          # vtest.avi: 10 fps (its AVI header)
CAMERA_OFFSET_NS = 33_000_000          # free-running: the camera is not triggered by the LiDAR
CAMERA_DELAY_NS = 20_000_000           # stamp -> log time: exposure, transport
LIDAR_DELAY_NS = 5_000_000             # after the sweep's last packet
LIDARS = ("velodyne", "ouster")
CAMERAS = ("bgr8", "jpeg")
FORMATS = {"mcap": "mcap", "sqlite3": "db3"}

# VLP-16 (Velodyne's VLP-16 user manual; ros-drivers/velodyne rawdata.cc unpack_vlp16, VLP16db.yaml)
PACKET_BYTES, BLOCKS, LASERS, FIRINGS = 1206, 12, 16, 2
BLOCK_FLAG = b"\xff\xee"
VLP16_MODEL = 0x22
ELEVATION_DEG = np.array([-15, 1, -13, 3, -11, 5, -9, 7, -7, 9, -5, 11, -3, 13, -1, 15], np.float64)
RING = np.argsort(np.argsort(ELEVATION_DEG))   # the driver's ring: 0 = lowest beam
DSR_US, FIRING_US = 2.304, 55.296              # laser-to-laser and firing-sequence periods
DISTANCE_M = 0.002
MIN_RANGE_M, MAX_RANGE_M = 0.9, 130.0          # velodyne_pointcloud's defaults

VELODYNE_DTYPE = np.dtype({"names": ["x", "y", "z", "intensity", "ring", "time"],
                           "formats": ["<f4", "<f4", "<f4", "<f4", "<u2", "<f4"],
                           "offsets": [0, 4, 8, 12, 16, 18], "itemsize": 22})
OUSTER_DTYPE = np.dtype({"names": ["x", "y", "z", "intensity", "t", "reflectivity", "ring", "ambient", "range"],
                         "formats": ["<f4", "<f4", "<f4", "<f4", "<u4", "<u2", "<u2", "<u2", "<u4"],
                         "offsets": [0, 4, 8, 16, 20, 24, 26, 28, 32], "itemsize": 48})


@dataclass(frozen=True)
class Sweep:
    """One revolution decoded, firing by firing: arrays of shape (firings, 16 lasers)."""

    xyz: np.ndarray          # float32 (F, 16, 3), metres, ROS axes (x forward, y left, z up)
    distance: np.ndarray     # float64 (F, 16), metres, 0 where there was no return
    reflectivity: np.ndarray  # uint8 (F, 16)
    time_s: np.ndarray       # float64 (F, 16), seconds since the first packet's first firing
    duration_s: float        # first firing to the last packet's end


def vlp16_packets(path: Path) -> np.ndarray:
    """The VLP-16 data packets in a file (an MRPT rawlog, gzipped or not, or bare packets): (N, 1206) uint8."""
    raw = path.read_bytes()
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    start = next((m.start() for m in re.finditer(re.escape(BLOCK_FLAG), data)
                  if all(data[m.start() + 100 * b:m.start() + 100 * b + 2] == BLOCK_FLAG for b in range(BLOCKS))),
                 None)
    if start is None:
        raise SystemExit(f"{path}: no VLP-16 data packet (12 blocks flagged 0xFFEE, 100 bytes apart) found")
    packets = []
    for off in range(start, len(data) - PACKET_BYTES + 1, PACKET_BYTES):
        p = data[off:off + PACKET_BYTES]
        if any(p[100 * b:100 * b + 2] != BLOCK_FLAG for b in range(BLOCKS)) or p[1205] != VLP16_MODEL:
            break
        packets.append(np.frombuffer(p, np.uint8))
    return np.stack(packets)


def decode_vlp16(packets: np.ndarray) -> Sweep:
    """Points of VLP-16 packets as ros-drivers/velodyne computes them (no calibration offsets: VLP16db.yaml)."""
    n = packets.shape[0]
    blocks = packets[:, :BLOCKS * 100].reshape(n, BLOCKS, 100)
    azimuth = blocks[:, :, 2].astype(np.int64) | blocks[:, :, 3].astype(np.int64) << 8   # 0.01 deg
    rec = blocks[:, :, 4:].reshape(n, BLOCKS, FIRINGS, LASERS, 3)
    dist = (rec[..., 0].astype(np.int64) | rec[..., 1].astype(np.int64) << 8) * DISTANCE_M
    refl = rec[..., 2]
    # the azimuth gap to the next block, within the packet; the last block repeats the one before it
    gap = np.empty_like(azimuth)
    gap[:, :-1] = (azimuth[:, 1:] - azimuth[:, :-1]) % 36000
    gap[:, -1] = gap[:, -2]
    offset_us = (np.arange(FIRINGS)[:, None] * FIRING_US + np.arange(LASERS)[None, :] * DSR_US)   # (2, 16)
    az = np.rint(azimuth[..., None, None] + gap[..., None, None] * offset_us / (FIRINGS * FIRING_US)) % 36000
    alpha = np.radians(az / 100.0)
    omega = np.radians(ELEVATION_DEG)[None, None, None, :]
    xy = dist * np.cos(omega)
    xyz = np.stack([xy * np.cos(alpha), -xy * np.sin(alpha), dist * np.sin(omega)], axis=-1)
    gps_us = packets[:, 1200:1204].copy().view("<u4")[:, 0].astype(np.float64)
    t_us = ((gps_us - gps_us[0])[:, None, None, None] + np.arange(BLOCKS)[None, :, None, None] * FIRINGS * FIRING_US
            + offset_us[None, None])
    f = n * BLOCKS * FIRINGS
    return Sweep(xyz.reshape(f, LASERS, 3).astype(np.float32), dist.reshape(f, LASERS),
                 refl.reshape(f, LASERS), t_us.reshape(f, LASERS) * 1e-6,
                 float(gps_us[-1] - gps_us[0] + BLOCKS * FIRINGS * FIRING_US) * 1e-6)


def velodyne_points(sweep: Sweep) -> tuple[np.ndarray, float]:
    """ros-drivers/velodyne's unorganized XYZIRT cloud, and where its stamp lies (s after the first firing).

    The driver stamps a scan with its last packet's time (timestamp_first_packet: false), and ``time``
    is each point's time since that stamp, so it is negative but for the last packet's points.
    """
    keep = (sweep.distance >= MIN_RANGE_M) & (sweep.distance <= MAX_RANGE_M)
    stamp_s = sweep.duration_s - BLOCKS * FIRINGS * FIRING_US * 1e-6
    out = np.zeros(int(keep.sum()), VELODYNE_DTYPE)
    for i, c in enumerate("xyz"):
        out[c] = sweep.xyz[..., i][keep]
    out["intensity"] = sweep.reflectivity[keep]
    out["ring"] = np.broadcast_to(RING, keep.shape)[keep]
    out["time"] = (sweep.time_s - stamp_s)[keep]
    return out, stamp_s


def ouster_points(sweep: Sweep) -> np.ndarray:
    """ouster-ros' organized 48-byte cloud (16 beams, top first, x columns); a missing return is all zeros."""
    order = np.argsort(-ELEVATION_DEG)                  # row 0: the top beam, as ouster-ros orders them
    ok = (sweep.distance > 0)[:, order].T               # (16, F)
    out = np.zeros(ok.shape, OUSTER_DTYPE)
    for i, c in enumerate("xyz"):
        out[c] = np.where(ok, sweep.xyz[:, order, i].T, 0.0)
    refl = sweep.reflectivity[:, order].T
    out["intensity"] = np.where(ok, refl, 0)
    out["reflectivity"] = np.where(ok, refl, 0)
    out["t"] = np.rint(np.broadcast_to(sweep.time_s[:, :1].T, ok.shape) * 1e9)   # a column's time, ns since the stamp
    out["ring"] = np.arange(LASERS)[:, None]
    out["range"] = np.where(ok, np.rint(sweep.distance[:, order].T * 1000), 0)   # mm
    return out


def fixture_frames() -> list[bytes]:
    """The committed JPEG frames of vtest.avi, in order."""
    paths = sorted(VTEST_FRAMES.glob("vtest_*.jpg"))
    if not paths:
        raise SystemExit(f"{VTEST_FRAMES}: no vtest_*.jpg frames")
    return [p.read_bytes() for p in paths]


def video_frames(path: Path, count: int, quality: int = 80) -> list[bytes]:
    """Up to ``count`` frames of a video file as JPEG (needs OpenCV to read the AVI's DivX stream)."""
    try:
        import cv2
    except ImportError:
        raise SystemExit(f"--video {path}: reading a video needs OpenCV (pip install opencv-python-headless)") from None
    import simplejpeg
    cap = cv2.VideoCapture(str(path))
    out = []
    while len(out) < count:
        ok, frame = cap.read()
        if not ok:
            break
        out.append(simplejpeg.encode_jpeg(np.ascontiguousarray(frame), quality=quality, colorspace="BGR",
                                          colorsubsampling="420"))
    cap.release()
    if not out:
        raise SystemExit(f"--video {path}: no frame could be read")
    return out


def write_bag(out: Path, storage: str, lidar: str, camera: str, sweep: Sweep, frames: list[bytes],
              seconds: float) -> Path:
    """One bag: ``lidar`` (velodyne|ouster) at 10 Hz and ``camera`` (bgr8|jpeg) at the video's rate, ``seconds`` long."""
    import simplejpeg
    sweeps = int(round(seconds * 1e9 / LIDAR_PERIOD_NS))
    n_frames = int(round(seconds * 1e9 / VIDEO_PERIOD_NS))
    if lidar == "velodyne":
        lidar_topic, frame_id = "/velodyne_points", "velodyne"
        points, stamp_s = velodyne_points(sweep)
    else:
        lidar_topic, frame_id = "/ouster/points", "os_sensor"
        points, stamp_s = ouster_points(sweep), 0.0
    sweep_end_s = sweep.duration_s
    cam_topic = "/camera/image_raw" if camera == "bgr8" else "/camera/image_raw/compressed"
    cam_type = "sensor_msgs/msg/Image" if camera == "bgr8" else "sensor_msgs/msg/CompressedImage"
    compressed = msg_class("sensor_msgs/msg/CompressedImage")
    with BagWriter(out, storage) as bag:
        bag.add_topic(lidar_topic, "sensor_msgs/msg/PointCloud2")
        bag.add_topic(cam_topic, cam_type)
        timeline = [(T0_NS + k * LIDAR_PERIOD_NS + int(sweep_end_s * 1e9) + LIDAR_DELAY_NS, "lidar", k)
                    for k in range(sweeps)]
        timeline += [(T0_NS + CAMERA_OFFSET_NS + i * VIDEO_PERIOD_NS + CAMERA_DELAY_NS, "camera", i)
                     for i in range(n_frames)]
        for t_log, kind, i in sorted(timeline):
            if kind == "lidar":
                # is_dense true, as both drivers send these clouds (no NaN: dropped, or zeros)
                bag.write(lidar_topic, t_log, array_to_cloud(points, frame_id, T0_NS + i * LIDAR_PERIOD_NS
                                                             + int(round(stamp_s * 1e9))))
                continue
            t_ns = T0_NS + CAMERA_OFFSET_NS + i * VIDEO_PERIOD_NS
            if camera == "bgr8":
                bgr = simplejpeg.decode_jpeg(frames[i], colorspace="BGR")
                bag.write(cam_topic, t_log, array_to_image(bgr, "bgr8", "camera", t_ns))
            else:
                bag.write(cam_topic, t_log, compressed(header=header(t_ns, "camera"),
                                                       format="bgr8; jpeg compressed bgr8",
                                                       data=np.frombuffer(frames[i], np.uint8)))
    return out


def build_bags(out_dir: Path, seconds: float, formats: tuple[str, ...], video: Path | None = None,
               lidars: tuple[str, ...] = LIDARS, cameras: tuple[str, ...] = CAMERAS) -> list[Path]:
    """Every lidar x camera x storage combination under ``out_dir`` (which must not hold them yet)."""
    sweep = decode_vlp16(vlp16_packets(VLP16_RAWLOG))
    wanted = int(round(seconds * 1e9 / VIDEO_PERIOD_NS))
    frames = video_frames(video, wanted) if video else fixture_frames()
    if len(frames) < wanted:   # a camera that stops before the LiDAR would be a silent sensor, not a recording
        raise SystemExit(f"--seconds {seconds:g}: {video or VTEST_FRAMES} holds {len(frames)} frames "
                         f"({len(frames) * VIDEO_PERIOD_NS / 1e9:g} s at 10 fps); expected {wanted}"
                         + ("" if video else " (--video vtest.avi for longer)"))
    out_dir.mkdir(parents=True, exist_ok=True)
    taken = [d for d in (out_dir / f"{lidar}_{camera}_{FORMATS[fmt]}" for fmt in formats for lidar in lidars
                         for camera in cameras) if d.exists()]
    if taken:
        raise SystemExit(f"{taken[0]}: exists already; give a new OUT_DIR")
    return [write_bag(out_dir / f"{lidar}_{camera}_{FORMATS[fmt]}", fmt, lidar, camera, sweep, frames, seconds)
            for fmt in formats for lidar in lidars for camera in cameras]


def _rt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rt_runtime", *args], capture_output=True, text=True, cwd=ROOT)


def flow(bag: Path) -> dict:
    """The documented flow on one bag: inspect --config-out, then replay --config --json; what came out."""
    config, trace, out = (bag.with_name(bag.name + ext) for ext in (".yaml", ".trace", ".out"))
    ins = _rt("inspect", str(bag), "--config-out", str(config), "--force")
    row: dict = {"bag": bag.name, "inspect_rc": ins.returncode, "config": str(config)}
    if ins.returncode != 0:
        row["error_lines"] = (ins.stderr.strip().splitlines() or ["(no output)"])[-3:]
        return row
    rep = _rt("replay", str(bag), "--config", str(config), "--json", "--trace", str(trace), "--out", str(out),
              "--force")
    row["replay_rc"] = rep.returncode
    try:
        doc = json.loads(rep.stdout)
    except json.JSONDecodeError:
        row["error_lines"] = (rep.stderr.strip().splitlines() or ["(no output)"])[-3:]
        return row
    row.update(summarize(doc, trace, rep.stderr), tracks=tracks(out))
    return row


def tracks(out: Path) -> list[int]:
    """The objects (markers added) in each /perception/objects message of a replay's output bag."""
    with open_bag(out) as bag:
        if "/perception/objects" not in bag.topics:
            return []
        return [sum(1 for m in bag.decode(msg).markers if m.action == 0)
                for msg in bag.messages(["/perception/objects"])]


def summarize(doc: dict, trace: Path, stderr: str = "") -> dict:
    """Per task jobs, errors, aborted and invariant alarms (from the trace); objects published; error lines."""
    from rt_runtime.sched.events import COMPARE_NO_MAJORITY, COMPARE_VOTED, EventKind
    from rt_runtime.trace.file import load_trace
    cols, _ = load_trace(trace)
    per_task = {}
    for t in doc.get("tasks", []):
        tid = cols.tasks.index(t["name"]) if t["name"] in cols.tasks else -1
        mine = cols.task == tid
        alarm = mine & (cols.kind == EventKind.COMPARE) & np.isin(cols.a, (COMPARE_VOTED, COMPARE_NO_MAJORITY))
        per_task[t["name"]] = {"jobs": int(t["jobs"]), "errors": int(t["errors"]),
                               "aborted": int((mine & (cols.kind == EventKind.ABORT)).sum()),
                               "alarms": int(alarm.sum())}
    lines = sorted({ln.strip() for ln in stderr.splitlines()
                    if re.search(r"Error|Fault|aborted|Traceback", ln) and "note:" not in ln})
    return {"tasks": per_task, **{k: sum(v[k] for v in per_task.values()) for k in ("aborted", "errors", "alarms")},
            "objects": int(doc.get("outputs", {}).get("/perception/objects", 0)), "faults": doc.get("faults", {}),
            "digest": doc.get("output_digest", ""), "error_lines": lines[:8]}


def table(rows: list[dict]) -> str:
    """A markdown table of the flow's rows."""
    out = ["| bag | jobs (aborted) per task | aborted | errors | invariant alarms | /perception/objects "
           "messages | objects per message (median, max) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "tasks" not in r:
            out.append(f"| {r['bag']} | flow failed: {' / '.join(r.get('error_lines', []))} | | | | | |")
            continue
        jobs = ", ".join(f"{t} {v['jobs']} ({v['aborted']})" for t, v in sorted(r["tasks"].items()))
        n = r.get("tracks") or [0]
        out.append(f"| {r['bag']} | {jobs} | {r['aborted']} | {r['errors']} | {r['alarms']} | {r['objects']} "
                   f"| {int(np.median(n))}, {max(n)} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Build the bags, run the flow on each, print the table (and the error lines)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--seconds", type=float, default=4.0, help="bag length (the committed frames last 4 s)")
    ap.add_argument("--formats", default="mcap,sqlite3", help="storage formats, comma separated")
    ap.add_argument("--video", type=Path, help="read the camera from this video (e.g. vtest.avi) instead")
    ap.add_argument("--build-only", action="store_true", help="build the bags, run nothing")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = ap.parse_args(argv)
    formats = tuple(f.strip() for f in a.formats.split(","))
    bad = [f for f in formats if f not in FORMATS]
    if bad or a.seconds <= 0:
        ap.error(f"--formats: expected some of {sorted(FORMATS)}, found {bad}" if bad
                 else f"--seconds: expected > 0, found {a.seconds}")
    bags = build_bags(a.out_dir, a.seconds, formats, a.video)
    print("\n".join(str(b) for b in bags), file=sys.stderr)
    if a.build_only:
        return 0
    rows = [flow(b) for b in bags]
    print(json.dumps(rows, indent=1) if a.json else table(rows))
    if not a.json:
        for r in rows:
            for ln in r.get("error_lines", []):
                print(f"{r['bag']}: {ln}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
