"""`rt-runtime inspect BAG [--config-out FILE] [--json]`: what a bag holds and a stack config that replays it."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rt_runtime.cli import UsageError


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register the subcommand."""
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("bag", help="rosbag2 folder, .mcap or .db3")
    p.add_argument("--config-out", metavar="FILE", help="write a stack configuration for this bag's sensors (new file)")
    p.add_argument("--reference", metavar="FILE", help="the stack to fit to the bag (default: config/stack.yaml)")
    p.add_argument("--deskew", action="store_true", help="with --config-out: motion-compensate the LiDAR with the "
                   "odometry (codec lidar_points_deskewed) when the cloud has per-point times")
    p.add_argument("--force", action="store_true", help="replace an existing --config-out file (never an input)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON document")
    return p


def _calibration_lines(s: Any) -> list[str]:
    from ..bag.calibration import camera_pose

    cal = s.calibration
    out = []
    for topic, c in sorted(cal.cameras.items()):
        dist = f", {c.distortion_model} distortion {list(c.d)}" if c.distorted else ", no distortion"
        out.append(f"camera intrinsics: {topic}: {c.width}x{c.height} fx={c.fx:g} fy={c.fy:g} cx={c.cx:g} "
                   f"cy={c.cy:g}{dist}")
    for topic, frame in sorted(cal.frames.items()):
        pose = cal.poses.get(frame)
        if pose is None:
            out.append(f"mount: {topic} (frame {frame!r}): no pose in base_link (no /tf_static link)")
            continue
        camera = s.topics[topic].role == "camera"   # an optical frame: the camera body's pose (REP 103)
        p = camera_pose(pose) if camera else dict(zip(("roll", "pitch", "yaw"), pose.rpy()))
        out.append(f"mount: {topic} (frame {frame!r}{', camera body' if camera else ''}): x={pose.translation[0]:.3f} "
                   f"y={pose.translation[1]:.3f} z={pose.translation[2]:.3f} roll={p['roll']:.4f} "
                   f"pitch={p['pitch']:.4f} yaw={p['yaw']:.4f} rad (from {cal.sources.get(frame)})")
    return out or ["no CameraInfo, /tf_static or /tf in the bag: mounts and intrinsics must come from the config"]


def as_json(s: Any, notes: list[str], config_out: str | None) -> dict[str, Any]:
    """The documented JSON shape of `inspect --json`."""
    cal = s.calibration
    return {
        "bag": s.path, "storage": s.storage, "start_ns": s.start_ns, "duration_s": round(s.duration_ns / 1e9, 6),
        "topics": [{"topic": t.topic, "type": t.msgtype, "count": t.count, "rate_hz": round(t.rate_hz, 3),
                    "mean_bytes": round(t.mean_bytes) if t.mean_bytes is not None else None, "codecs": list(t.codecs),
                    "role": t.role, "detail": t.detail} for t in s.topics.values()],
        "calibration": {
            "cameras": {k: {"frame_id": c.frame_id, "width": c.width, "height": c.height, "fx": c.fx, "fy": c.fy,
                            "cx": c.cx, "cy": c.cy, "distortion_model": c.distortion_model, "d": list(c.d)}
                        for k, c in sorted(cal.cameras.items())},
            "mounts": {t: {"frame_id": f, "source": cal.sources.get(f),
                           "xyz": list(cal.poses[f].translation) if f in cal.poses else None,
                           "rpy": list(cal.poses[f].rpy()) if f in cal.poses else None}
                       for t, f in sorted(cal.frames.items())}},
        "config": {"path": config_out, "notes": notes},
    }


def print_text(s: Any, notes: list[str], config_out: str | None, out: Any = None) -> None:
    """The human-readable summary (on sys.stdout as it is when called, not when imported)."""
    out = sys.stdout if out is None else out
    print(f"{s.path} ({s.storage}): {s.duration_ns / 1e9:.3f} s from {s.start_ns / 1e9:.3f} s, "
          f"{sum(t.count for t in s.topics.values())} messages", file=out)
    rows = [("topic", "type", "count", "Hz", "bytes", "codec", "what")]
    for t in s.topics.values():
        size = f"{t.mean_bytes:,.0f}" if t.mean_bytes is not None else "-"
        rows.append((t.topic, t.msgtype.replace("/msg/", "/"), str(t.count), f"{t.rate_hz:.1f}", size,
                     ", ".join(t.codecs) or "-", (t.role or "") + (f": {t.detail}" if t.detail else "")))
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[6], file=out)
    print("calibration:", file=out)
    for line in _calibration_lines(s):
        print(f"  {line}", file=out)
    if config_out:
        print(f"wrote {config_out}:", file=out)
        for n in notes:
            print(f"  {n}", file=out)
        print(f"replay it: rt-runtime replay {s.path} --config {config_out}", file=out)


def run(args: argparse.Namespace) -> int:
    """Survey the bag; with --config-out write the fitted stack config (atomically, never over an input)."""
    from ..bag import BagError, open_bag
    from ..bag.survey import survey
    from ..config import ConfigError
    from ..config.generate import NoSensorsError, render, stack_for_bag
    from ..config.yamlfile import load_yaml
    from ..outpaths import OutputPathError, bag_extent, check_output, write_atomic
    from ..replay.defaults import default_config

    try:
        inputs = {"bag": bag_extent(args.bag)}
        reference = args.reference or default_config()
        if args.config_out:
            check_output(args.config_out, "--config-out", {**inputs, "--reference": reference}, force=args.force)
        with open_bag(args.bag) as reader:
            s = survey(reader)
        notes: list[str] = []
        if args.config_out:
            doc, notes = stack_for_bag(s, load_yaml(reference), deskew=args.deskew)
            header = [f"Written by `rt-runtime inspect {args.bag} --config-out {args.config_out}` from {reference}",
                      "(its graphs, budgets and deadlines), fitted to the sensors this bag has:", ""] + \
                [f"- {n}" for n in notes] + \
                ["", "Sensor mounts and camera intrinsics are not written here: replay takes them from the bag's",
                 "/tf_static and CameraInfo (a camera without one: the stated default for its frame size, written",
                 "above); a value written into a task's args overrides the bag's.", ""]
            write_atomic(args.config_out, render(doc, header))
    except (BagError, ConfigError, NoSensorsError, OutputPathError, FileNotFoundError) as e:
        raise UsageError(str(e)) from None
    if args.json:
        print(json.dumps(as_json(s, notes, args.config_out)))
    else:
        print_text(s, notes, args.config_out)
    return 0
