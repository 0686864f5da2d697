"""Plots of a trace report (matplotlib, Agg backend: no display needed).

* response-time CDF per task, each with its deadline;
* execution-time histogram per task, with its budget;
* a timeline (Gantt) around each of the worst misses: every op that ran near the missed job, one
  row per task, the job's release and deadline marked and its cause in the title.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from .trace_causes import MissAccount
from .trace_report import TraceReport

WORST_MISSES = 3   # timelines drawn: the misses that were latest


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, imported on first use."""
    import matplotlib

    matplotlib.use("Agg", force=True)   # never a display: this runs on CI machines and servers
    import matplotlib.pyplot as plt

    return plt


def response_cdf(rep: TraceReport) -> Any:
    """One figure: the empirical CDF of each task's response times, deadlines dotted."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, t in enumerate(rep.tasks):
        if not len(t.response_ns):
            continue
        v = np.sort(t.response_ns) / 1e6
        (line,) = ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=t.name)
        if t.deadline_ns:
            ax.axvline(t.deadline_ns / 1e6, color=line.get_color(), linestyle=":", linewidth=1)
    ax.set_xlabel("response time (ms); dotted: deadline")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("Response-time CDF per task")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def exec_histograms(rep: TraceReport) -> Any:
    """One panel per task: histogram of execution times, the budget as a red line."""
    plt = pyplot()
    tasks = [t for t in rep.tasks if len(t.exec_ns)] or rep.tasks[:1]
    cols = min(3, len(tasks)) or 1
    rows = -(-len(tasks) // cols) or 1
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), squeeze=False)
    for ax, t in zip(axes.flat, tasks):
        v = t.exec_ns / 1e6
        if len(v):
            ax.hist(v, bins=min(50, max(5, len(v) // 4)), color="tab:blue", alpha=0.8)
        if t.budget_ns:
            ax.axvline(t.budget_ns / 1e6, color="tab:red", label="budget")
            ax.legend(fontsize=7)
        ax.set_title(t.name, fontsize=9)
        ax.set_xlabel("execution time (ms)", fontsize=8)
    for ax in list(axes.flat)[len(tasks):]:
        ax.set_visible(False)
    fig.suptitle("Execution-time histograms")
    fig.tight_layout()
    return fig


def timeline(rep: TraceReport, miss: MissAccount) -> Any:
    """Gantt chart of every op that ran around one missed job."""
    plt = pyplot()
    tr = rep.trace
    d = max(miss.deadline_ns - miss.release_ns, 1)
    lo = miss.release_ns - d // 4
    hi = max(miss.end_ns, miss.deadline_ns) + d // 4
    ops = tr.ops
    m = (ops.t1 > lo) & (ops.t0 < hi)
    names = tr.tasks
    row_of = {n: i for i, n in enumerate(names)}
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(names) + 1.8))
    cmap = plt.get_cmap("tab10")
    target = tr.jobs.names.index(miss.task)
    for t0, t1, tid, job in zip(ops.t0[m].tolist(), ops.t1[m].tolist(), ops.task[m].tolist(),
                                tr.jobs.job[ops.row[m]].tolist()):
        name = tr.jobs.names[tid]
        mine = tid == target and job == miss.job
        ax.broken_barh([((t0 - lo) / 1e6, (t1 - t0) / 1e6)], (row_of.get(name, 0) - 0.4, 0.8),
                       facecolors="tab:red" if mine else cmap(row_of.get(name, 0) % 10),
                       edgecolor="black", linewidth=0.3, alpha=0.9 if mine else 0.6)
    y = row_of.get(miss.task, 0)
    for t, style, label in ((miss.release_ns, "-", "release"), (miss.deadline_ns, "--", "deadline")):
        ax.axvline((t - lo) / 1e6, color="black", linestyle=style, linewidth=1)
        ax.annotate(label, ((t - lo) / 1e6, y + 0.45), fontsize=7)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_xlim(0, (hi - lo) / 1e6)
    ax.set_xlabel(f"ms after {lo / 1e6:.2f} ms")
    ax.set_title(f"{miss.task}#{miss.job} missed: {'+'.join(miss.cause)} (red: its ops)", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def worst_misses(rep: TraceReport, n: int = WORST_MISSES) -> list[MissAccount]:
    """The ``n`` misses that were latest (ties: earliest first)."""
    return sorted(rep.misses, key=lambda a: (-a.late_by_ns, a.release_ns))[:n]


def figures(rep: TraceReport) -> list[tuple[str, Any]]:
    """(file stem, figure) of every plot of the report."""
    out = [("response_cdf", response_cdf(rep)), ("exec_hist", exec_histograms(rep))]
    for a in worst_misses(rep):
        stem = "timeline_" + "".join(c if c.isalnum() or c in "-_" else "_" for c in a.task) + f"_{a.job}"
        out.append((stem, timeline(rep, a)))
    return out


def png_bytes(fig: Any) -> bytes:
    """The figure as PNG bytes; the figure is closed (matplotlib keeps every open figure alive)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    pyplot().close(fig)
    return buf.getvalue()


def write_plots(rep: TraceReport, out_dir: str | Path) -> list[Path]:
    """Write every plot as ``DIR/<name>.png``; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem, fig in figures(rep):
        p = out / f"{stem}.png"
        p.write_bytes(png_bytes(fig))
        paths.append(p)
    return paths
