"""A picture of what ``config/foxglove_layout.json`` shows, drawn from a ``--foxglove-mcap`` recording.

Not a Foxglove app screenshot (the app does not run on the machines this project is built on): the layout's
panels drawn one by one with matplotlib, where the layout's tree puts them, from the messages the layout's
own paths select in the MCAP file (read with the ``mcap`` package):

* ``Plot``: every path's values (an array sliced with ``[:]`` gives one point per element) at the message's
  log time (``timestampMethod: receiveTime``), in s from the run's start; ``isSynced`` panels share one x axis;
* ``StateTransitions``: every path's value held from its message to the next, a row per path;
* ``3D``: top-down (x/y in the fixed frame, ``followTf``) of its topics at the end of the recording: the
  trajectory (``foxglove.PosesInFrame``, the layout's line gradient) and the objects' cubes and texts
  (``foxglove.SceneUpdate``), earlier messages faint (the ego's path, the objects' centres), the grid layer;
* ``Table``: its topic path's last value (an array of objects: a row each); ``RawMessages``: its last message.

A path whose channel is not in the file (no message was ever logged on it: no safety change, no speculation)
is said so in its panel, as the app would show it empty.

Run (from the repository root; records the built-in scenario's first 6 s, ``replay --until 6
--foxglove-mcap``, then draws ``docs/live_view.png``)::

    .venv/bin/python bench/render_live_view.py
    .venv/bin/python bench/render_live_view.py run.mcap            # an existing recording instead
    .venv/bin/python bench/render_live_view.py -- --speculate      # more replay options after --

Not a benchmark: ``make bench`` runs ``bench/bench_*.py`` only.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SUPTITLE = ("rt_runtime live view, config/foxglove_layout.json's panels drawn from a --foxglove-mcap recording "
            "by bench/render_live_view.py (not a Foxglove app screenshot)")
REPLAY = ["replay", "--until", "6"]
# Foxglove's default series colours
COLORS = ["#4e98e2", "#f5774d", "#f7df71", "#61cbff", "#a395e2", "#3fd1a0", "#f767a1", "#b8d54b"]
# why a channel of the live view may carry no message (rt_runtime/live/channels.py: one message per ...)
WHY_ABSENT = {"/rt/safety": " (sent on a change of the safety level only)",
              "/rt/degraded": " (sent when a task switches to or from its fallback only)",
              "/rt/speculation": " (sent per speculation verdict; off unless --speculate)"}
STATE_COLORS = {"nominal": "#3fd1a0", "degraded": "#f7df71", "minimal_risk": "#f5774d", "primary": "#3fd1a0",
                "fallback": "#f5774d", "True": "#3fd1a0", "False": "#f5774d"}


# ---------------------------------------------------------------------------------------------------- recording

def record(path: Path, extra: list[str]) -> str:
    """Replay the built-in scenario with the live view writing ``path``; the replay's command line."""
    env = dict(os.environ)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("ROS_DOMAIN_ID", "121")
    cmd = [sys.executable, "-m", "rt_runtime", *REPLAY, "--foxglove-mcap", str(path), *extra]
    done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"render_live_view: the replay failed (exit {done.returncode}): {' '.join(cmd)}")
    for line in done.stdout.splitlines()[-6:]:
        print("  replay:", line)
    return " ".join(["rt-runtime", *REPLAY, "--foxglove-mcap", "FILE", *extra])


def read(path: Path) -> tuple[dict[str, str], dict[str, list[tuple[int, Any]]], dict[str, dict[str, str]]]:
    """The file's channels (topic -> schema name), per topic its messages (log time ns, decoded: a dict for
    JSON, a protobuf message for protobuf, from the descriptor set the channel's schema carries), in log time
    order, and its metadata records."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from mcap.reader import make_reader

    def decoder(encoding: str, name: str, data: bytes) -> Any:
        if encoding == "json":
            return json.loads
        pool = descriptor_pool.DescriptorPool()
        for f in descriptor_pb2.FileDescriptorSet.FromString(data).file:
            pool.Add(f)
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(name)).FromString

    with open(path, "rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        channels = {c.topic: summary.schemas[c.schema_id].name for c in summary.channels.values()}
        decode = {c.id: decoder(c.message_encoding, summary.schemas[c.schema_id].name,
                                summary.schemas[c.schema_id].data) for c in summary.channels.values()}
        got: dict[str, list[tuple[int, Any]]] = {}
        for _, ch, msg in reader.iter_messages(log_time_order=True):
            got.setdefault(ch.topic, []).append((msg.log_time, decode[ch.id](msg.data)))
        meta = {m.name: dict(m.metadata) for m in reader.iter_metadata()}
    return channels, got, meta


# ---------------------------------------------------------------------------------------------- message paths

PATH = re.compile(r"(/[^.{\[]*)((?:\{[^}]*\})*)((?:\.\w+|\[[^\]]*\])*)")
FILTER = re.compile(r"\{\s*(\w+)\s*==\s*(.+?)\s*\}")
STEP = re.compile(r"\.(\w+)|\[([^\]]*)\]")


def literal(text: str) -> Any:
    if text[:1] in "\"'":
        return text[1:-1]
    return {"true": True, "false": False}.get(text, float(text) if re.fullmatch(r"-?[\d.]+", text) else text)


class MessagePath:
    """A Foxglove message path as the layout writes them: ``/topic{key=="v"}.field.array[:].field``."""

    def __init__(self, text: str) -> None:
        m = PATH.fullmatch(text)
        if not m:
            raise ValueError(f"not a message path this script reads: {text}")
        self.text, self.topic = text, m.group(1)
        self.filters = [(k, literal(v)) for k, v in FILTER.findall(m.group(2))]
        self.steps = [(f, s) for f, s in STEP.findall(m.group(3))]
        self.missing = 0   # messages without one of its fields

    def values(self, msg: Any) -> list[Any] | None:
        """Its values in one message (none: filtered out)."""
        for key, want in self.filters:
            if field(msg, key) != want:
                return None
        vals = [msg]
        for name, index in self.steps:
            out: list[Any] = []
            for v in vals:
                if name:
                    got = field(v, name)
                    if got is _MISSING:
                        self.missing += 1
                        continue
                    out.append(got)
                elif index.strip() == ":":
                    out.extend(list(v))
                else:
                    out.append(list(v)[int(index)])
            vals = out
        return vals

    def series(self, msgs: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
        """(log time, value) for every value of every message of its topic."""
        return [(t, v) for t, msg in msgs for v in (self.values(msg) or ())]


_MISSING = object()


def field(v: Any, name: str) -> Any:
    if isinstance(v, dict):
        return v.get(name, _MISSING)
    return getattr(v, name, _MISSING)


# ------------------------------------------------------------------------------------------------- the layout

def rects(node: Any, x: float, y: float, w: float, h: float, out: dict[str, tuple[float, float, float, float]]
          ) -> dict[str, tuple[float, float, float, float]]:
    """Each panel's rectangle (x, y from the top left, w, h in 0..1) from the layout's split tree: ``row``
    splits side by side, ``column`` one above the other, ``splitPercentage`` to the first."""
    if isinstance(node, str):
        out[node] = (x, y, w, h)
        return out
    f = node.get("splitPercentage", 50.0) / 100
    if node.get("direction", "row") == "row":
        rects(node["first"], x, y, w * f, h, out)
        rects(node["second"], x + w * f, y, w * (1 - f), h, out)
    else:
        rects(node["first"], x, y, w, h * f, out)
        rects(node["second"], x, y + h * f, w, h * (1 - f), out)
    return out


class View:
    """The recording, its time origin and end, and what was found missing on the way (for the report)."""

    def __init__(self, channels: dict[str, str], got: dict[str, list[tuple[int, Any]]]) -> None:
        self.channels, self.got = channels, got
        self.notes: list[str] = []
        # the run's logical time 0: a message's log time minus its own t_ms (the runtime's ms)
        starts = [t - int(round(m["t_ms"] * 1e6)) for msgs in got.values() for t, m in msgs[:1]
                  if isinstance(m, dict) and "t_ms" in m]
        self.t0 = min(starts) if starts else min(t for msgs in got.values() for t, _ in msgs if t > 0)
        self.early = [f"{topic}: {n} of {len(msgs)} messages have a log time before the run's start "
                      f"(log time {min(t for t, _ in msgs)} ns), left out of the time axes"
                      for topic, msgs in got.items() if (n := sum(1 for t, _ in msgs if t < self.t0))]
        self.notes += self.early
        self.end = max(t for msgs in got.values() for t, _ in msgs)

    def s(self, t: int) -> float:
        return (t - self.t0) / 1e9

    def msgs(self, topic: str) -> list[tuple[int, Any]]:
        return [(t, m) for t, m in self.got.get(topic, ()) if t >= self.t0]

    def absent(self, path: MessagePath) -> str | None:
        if path.topic not in self.channels:
            note = f"{path.text}: channel {path.topic} not in the recording (no message logged on it)"
            self.notes.append(note)
            return f"{path.topic}: not in the file, no message logged on it{WHY_ABSENT.get(path.topic, '')}"
        return None


def short(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def plot_panel(ax: Any, cfg: dict[str, Any], view: View) -> None:
    empty = []
    for k, p in enumerate(q for q in cfg.get("paths", ()) if q.get("enabled", True)):
        path = MessagePath(p["value"])
        label = p.get("label") or p["value"]
        why = view.absent(path)
        if why:
            empty.append(f"{label}: {why}")
            continue
        pts = [(view.s(t), v) for t, v in path.series(view.msgs(path.topic)) if isinstance(v, (int, float))]
        if not pts:
            empty.append(f"{label}: no value at {p['value']}")
            view.notes.append(f"{p['value']}: no numeric value in {len(view.msgs(path.topic))} messages")
            continue
        xs, ys = zip(*pts)
        # each later series a little wider and under the earlier ones: equal values stay visible
        ax.plot(xs, ys, color=COLORS[k % len(COLORS)], lw=1.0 + 0.9 * k, marker="o", ms=1.6 + 0.9 * k,
                label=label, zorder=5 - k)
    top = max((y for ln in ax.lines for y in ln.get_ydata()), default=1.0)
    ax.set_ylim(0, top * 1.3 or 1.0)   # from 0, room above the data for the legend
    if cfg.get("showLegend", True) and ax.lines:
        ax.legend(loc="upper left", fontsize=6.5, framealpha=0.6, ncol=len(ax.lines), handlelength=1.2,
                  borderpad=0.2, columnspacing=0.8)
    if empty:
        ax.text(0.5, 0.5, "\n".join(empty), transform=ax.transAxes, ha="center", va="center", fontsize=7,
                color="0.35")
    ax.grid(True, lw=0.3, alpha=0.5)


def state_panel(ax: Any, cfg: dict[str, Any], view: View) -> None:
    paths = cfg.get("paths", ())
    end = view.s(view.end)
    labels = []
    for row, p in enumerate(paths):
        path = MessagePath(p["value"])
        labels.append(p.get("label") or p["value"])
        y = len(paths) - 1 - row
        why = view.absent(path)
        pts = [] if why else [(view.s(t), vals[0]) for t, m in view.msgs(path.topic)
                              if (vals := path.values(m))]
        if not pts:
            ax.text(0.01 * end, y, textwrap.fill(why or f"no message matches {p['value']}", 80), va="center",
                    fontsize=6.5, color="0.35")
            continue
        changes = [(x, v) for i, (x, v) in enumerate(pts) if i == 0 or pts[i - 1][1] != v]
        for (x, v), nxt in zip(changes, [q[0] for q in changes[1:]] + [end]):   # a value held until the next
            c = STATE_COLORS.get(str(v), COLORS[sum(map(ord, str(v))) % len(COLORS)])
            ax.broken_barh([(x, max(nxt - x, 1e-3))], (y - 0.3, 0.6), color=c, alpha=0.85)
        for x, v in changes[:12]:
            ax.text(x, y, f" {v}", va="center", fontsize=6.5)
        ax.plot([x for x, _ in pts], [y + 0.3] * len(pts), "|", color="k", ms=3, lw=0)   # each message
    ax.set_yticks(range(len(paths)), labels[::-1], fontsize=7)
    ax.set_ylim(-0.6, len(paths) - 0.4)
    ax.grid(True, axis="x", lw=0.3, alpha=0.5)


def yaw(q: Any) -> float:
    return math.atan2(2 * (q.w * q.z + q.x * q.y), 1 - 2 * (q.y * q.y + q.z * q.z))


def scene_panel(ax: Any, cfg: dict[str, Any], view: View) -> str:
    import matplotlib.colors as mcolors
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Polygon

    frame = cfg.get("followTf", "map")
    last_t: list[int] = []
    now: list[tuple[float, float]] = []   # what the last messages draw: the view is cropped around it
    for topic, tcfg in cfg.get("topics", {}).items():
        if not tcfg.get("visible", True):
            continue
        if topic not in view.channels:
            ax.text(0.5, 0.5, f"{topic}: no message in this recording", transform=ax.transAxes, ha="center")
            view.notes.append(f"3D topic {topic} not in the recording")
            continue
        msgs, schema = view.msgs(topic), view.channels[topic]
        frames = {m.frame_id for _, m in msgs if hasattr(m, "frame_id")} | \
            {e.frame_id for _, m in msgs for e in getattr(m, "entities", ())}
        if frames - {frame}:
            view.notes.append(f"3D topic {topic}: frames {sorted(frames - {frame})} besides the fixed frame {frame}")
        if not msgs:
            continue
        t, m = msgs[-1]
        last_t.append(t)
        if schema == "foxglove.PosesInFrame":
            xs = [p.position.x for _, mm in msgs for p in mm.poses[:1]]
            ys = [p.position.y for _, mm in msgs for p in mm.poses[:1]]
            ax.plot(xs, ys, color="0.6", lw=0.8, ls=":", label="trajectory start, every message")
            pts = [(p.position.x, p.position.y) for p in m.poses]
            now += pts
            segs = [[a, b] for a, b in zip(pts, pts[1:])]
            grad = tcfg.get("gradient", ["#2b8cbeff", "#f03b20ff"])
            cmap = mcolors.LinearSegmentedColormap.from_list("g", [mcolors.to_rgba("#" + g[1:7]) for g in grad])
            lc = LineCollection(segs, cmap=cmap, lw=2.2, label=f"{topic} (last)")
            lc.set_array(list(range(len(segs))))
            ax.add_collection(lc)
        elif schema == "foxglove.SceneUpdate":
            cx = [c.pose.position.x for _, mm in msgs for e in mm.entities for c in e.cubes]
            cy = [c.pose.position.y for _, mm in msgs for e in mm.entities for c in e.cubes]
            ax.scatter(cx, cy, s=1.5, color="0.7", label="object centres, every message")
            for e in m.entities:
                for c in e.cubes:
                    a, (hx, hy) = yaw(c.pose.orientation), (c.size.x / 2, c.size.y / 2)
                    ca, sa = math.cos(a), math.sin(a)
                    corners = [(c.pose.position.x + dx * ca - dy * sa, c.pose.position.y + dx * sa + dy * ca)
                               for dx, dy in ((hx, hy), (-hx, hy), (-hx, -hy), (hx, -hy))]
                    now += corners
                    ax.add_patch(Polygon(corners, closed=True, fc=(c.color.r, c.color.g, c.color.b, c.color.a),
                                         ec="k", lw=0.4))
                for x in e.texts:
                    ax.text(x.pose.position.x, x.pose.position.y + 1.2, x.text, fontsize=6, ha="center")
        else:
            view.notes.append(f"3D topic {topic}: schema {schema} not drawn by this script")
    grid = next((g for g in cfg.get("layers", {}).values() if g.get("layerId") == "foxglove.Grid"), None)
    if grid:   # the grid layer's spacing (size / divisions), its colour
        from matplotlib.ticker import MultipleLocator

        step = grid["size"] / grid["divisions"]
        ax.xaxis.set_minor_locator(MultipleLocator(step))
        ax.yaxis.set_minor_locator(MultipleLocator(step))
        ax.grid(True, which="both", color=mcolors.to_rgba("#" + grid["color"][1:7], 0.35), lw=0.4)
    if now:
        xs, ys = [p[0] for p in now], [p[1] for p in now]
        ax.set_xlim(min(xs) - 15, max(xs) + 15)
        ax.set_ylim(min(ys) - 4, max(ys) + 4)
    else:
        ax.autoscale_view()
    ax.set_xlabel(f"x (m, frame {frame}; y stretched, not to scale with x; grey: earlier messages)", fontsize=7)
    ax.set_ylabel("y (m)", fontsize=7)
    ax.legend(loc="lower left", fontsize=6, framealpha=0.6)
    return f", at t = {view.s(max(last_t)):.2f} s" if last_t else ""


def table_panel(ax: Any, cfg: dict[str, Any], view: View) -> str:
    path = MessagePath(cfg["topicPath"])
    ax.axis("off")
    why = view.absent(path)
    msgs = [] if why else view.msgs(path.topic)
    if not msgs:
        ax.text(0.5, 0.5, why or "no message", ha="center", va="center", fontsize=8, color="0.35")
        return ""
    t, m = msgs[-1]
    vals = path.values(m) or []
    rows = vals[0] if len(vals) == 1 and isinstance(vals[0], list) else vals
    if rows and all(isinstance(r, dict) for r in rows):
        cols = list(dict.fromkeys(k for r in rows for k in r))
        cells = [[short(r.get(k)) for k in cols] for r in rows]
    else:
        cols, cells = ["value"], [[short(r)] for r in rows]
    if cells:
        tab = ax.table(cellText=cells, colLabels=cols, loc="upper center", cellLoc="center")
        tab.auto_set_font_size(False)
        tab.set_fontsize(7)
        tab.scale(1, 1.3)
    else:
        ax.text(0.5, 0.5, f"{path.text}: empty in the last message", ha="center", fontsize=8)
    return f", its last message (t = {view.s(t):.2f} s)"


def raw_panel(ax: Any, cfg: dict[str, Any], view: View) -> str:
    topic = cfg["topicPath"]
    ax.axis("off")
    msgs = view.msgs(topic)
    if topic not in view.channels or not msgs:
        ax.text(0.5, 0.5, f"{topic}: no message in this recording", ha="center", va="center", fontsize=8)
        return ""
    t, m = msgs[-1]
    text = json.dumps(m, indent=2) if isinstance(m, dict) else str(m)
    ax.text(0.02, 0.95, text, transform=ax.transAxes, va="top", family="monospace", fontsize=7.5)
    return f", its last message (t = {view.s(t):.2f} s)"


def draw(layout: dict[str, Any], view: View, out: Path, dpi: int, foot: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(20, 12.5))
    fig.suptitle(SUPTITLE, fontsize=11.5, y=0.995)
    fig.text(0.5, 0.003, foot, ha="center", va="bottom", fontsize=7.5, color="0.3")
    top, bottom = 0.035, 0.045   # margins (fraction of the figure) for the titles
    area = 1 - top - bottom
    panels = rects(layout["layout"], 0, 0, 1, 1, {})
    configs = layout["configById"]
    end = view.s(view.end)
    for pid, (x, y, w, h) in panels.items():
        cfg = configs.get(pid, {})
        kind = pid.split("!")[0]
        time_axis = kind in ("Plot", "StateTransitions")
        left_pad = 0.055 if kind == "StateTransitions" else 0.03 if time_axis or kind == "3D" else 0.006
        rect = [x + left_pad, bottom + (1 - y - h) * area + (0.03 if time_axis or kind == "3D" else 0.004),
                w - left_pad - 0.008, h * area - (0.058 if time_axis or kind == "3D" else 0.03)]
        ax = fig.add_axes(rect)
        ax.tick_params(labelsize=7)
        title = cfg.get("title") or {"3D": "3D", "Table": "Table", "RawMessages": "Raw Messages"}.get(kind, kind)
        extra = ""
        if kind == "Plot":
            plot_panel(ax, cfg, view)
        elif kind == "StateTransitions":
            state_panel(ax, cfg, view)
        elif kind == "3D":
            extra = scene_panel(ax, cfg, view) + f", top-down, frame {cfg.get('followTf', 'map')}"
        elif kind == "Table":
            extra = table_panel(ax, cfg, view)
            title += f": {cfg['topicPath']}"
        elif kind == "RawMessages":
            extra = raw_panel(ax, cfg, view)
            title += f": {cfg['topicPath']}"
        else:
            ax.axis("off")
            ax.text(0.5, 0.5, f"panel type {kind}: not drawn", ha="center")
            view.notes.append(f"panel {pid}: type {kind} not drawn by this script")
        if time_axis:
            ax.set_xlim(0, end)   # one axis for all (the layout's panels are isSynced)
            ax.set_xlabel("s (log time from the run's start)", fontsize=6.5, labelpad=1)
        ax.set_title(f"{pid}  |  {title}{extra}", fontsize=8.5, loc="left", pad=3)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mcap", nargs="?", type=Path, help="an existing --foxglove-mcap recording (default: record "
                    "one: rt-runtime replay --until 6 --foxglove-mcap, the built-in scenario)")
    ap.add_argument("--layout", type=Path, default=ROOT / "config" / "foxglove_layout.json")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "live_view.png")
    ap.add_argument("--dpi", type=int, default=80)
    ap.add_argument("--keep", type=Path, help="keep the recording made here at this path")
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []   # after --: more options for the replay
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if extra and args.mcap is not None:
        ap.error("replay options after -- record a new MCAP: give no MCAP path with them")
    layout = json.loads(args.layout.read_text())
    with tempfile.TemporaryDirectory(prefix="render_live_view.") as tmp:
        if args.mcap is None:
            path = args.keep or Path(tmp) / "live.mcap"
            how = record(path, extra)
        else:
            path, how = args.mcap, str(args.mcap)
        channels, got, meta = read(path)
    view = View(channels, got)
    rel = meta.get("rt_runtime", {})
    shown = args.layout.relative_to(ROOT) if args.layout.is_relative_to(ROOT) else args.layout
    foot = (f"recording: {how}  |  {sum(map(len, got.values()))} messages on {len(channels)} channels, "
            f"{view.s(view.end):.1f} s; metadata partial={rel.get('partial', '?')}, "
            f"dropped={rel.get('dropped', '?')}  |  layout: {shown}")
    if view.early:
        foot += "\nin the file: " + "; ".join(view.early)
    draw(layout, view, args.out, args.dpi, foot)
    print(f"{args.out}: {args.out.stat().st_size / 1024:.0f} KiB")
    for note in dict.fromkeys(view.notes):
        print("  note:", note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
