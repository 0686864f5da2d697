"""One self-contained HTML report of a trace: the tables of the text report and the plots, inline.

No external file, script or stylesheet: the plots are base64 PNGs inside ``<img>`` tags, so the
file can be mailed or attached to a ticket and opened anywhere.
"""
from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any, Iterable, Sequence

from .plots import figures, png_bytes
from .trace_report import TraceReport

REPORT_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}
tr.bad td{background:#fde8e8} .verdict{font-weight:bold} img{max-width:100%;margin:1em 0}
code{background:#f4f4f4;padding:0 3px}"""


def html_table(head: Sequence[str], rows: Iterable[Sequence[Any]], bad: Iterable[bool] | None = None) -> str:
    """An HTML table in the reports' look; rows flagged in ``bad`` are highlighted."""
    flags = list(bad) if bad is not None else None
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for i, row in enumerate(rows):
        cls = ' class="bad"' if flags is not None and flags[i] else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>")
    return "".join(out) + "</table>"


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1 else f"{v:.2f}"
    return str(v)


def render_html(rep: TraceReport, source: str = "") -> str:
    """The report as one HTML string."""
    doc = rep.to_json()
    tr = doc["trace"]
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>rt-runtime analyze {html.escape(source)}"
             f"</title><style>{REPORT_CSS}</style></head><body>",
             f"<h1>Trace analysis</h1><p><code>{html.escape(source)}</code>: {tr['events']} events, "
             f"{tr['start_ms']:.2f}..{tr['end_ms']:.2f} ms, policy {html.escape(str(tr['policy']))}, "
             f"{tr['workers']} worker(s), {html.escape(str(tr['clock']))} clock; config "
             f"{html.escape(str(tr['config']))}, bag {html.escape(str(tr['bag']))}</p>"]
    if rep.rta is not None:
        parts.append(f"<p class='verdict'>{html.escape(rep.rta['verdict'])}</p>")
    parts.append("<h2>Tasks</h2>")
    parts.append(html_table(
        ["task", "jobs", "misses", "ratio", "resp p50", "p90", "p99", "max", "exec p50", "p99", "max", "budget",
         "jitter", "min slack", "aborted", "overruns"],
        [[t["name"], t["jobs"], t["misses"], t["miss_ratio"], *t["response_ms"].values(), *t["exec_ms"].values(),
          t["budget_ms"], t["release_jitter_ms"], t["min_slack_ms"], t["aborted"], t["overruns"]]
         for t in doc["tasks"]], [t["misses"] > 0 or t["watchdog_aborted"] > 0 for t in doc["tasks"]]))
    parts.append("<p>Times in ms. Slack: the least of deadline minus response time over finished jobs.</p>")
    figs = {stem: base64.b64encode(png_bytes(fig)).decode() for stem, fig in figures(rep)}
    for stem in ("response_cdf", "exec_hist"):
        parts.append(f"<img alt='{stem}' src='data:image/png;base64,{figs.pop(stem)}'>")
    parts.append(f"<h2>Deadline misses ({len(rep.misses)})</h2>")
    if rep.misses:
        parts.append(html_table(
            ["job", "release", "deadline", "finish", "late by", "cause", "own", "interference", "blocking",
             "late start", "other", "what the time went to"],
            [[f"{a.task}#{a.job}", a.release_ns / 1e6, a.deadline_ns / 1e6,
              None if a.finish_ns is None else a.finish_ns / 1e6, a.late_by_ns / 1e6, "+".join(a.cause),
              a.own_ns / 1e6, a.interference_total_ns / 1e6, a.blocking_ns / 1e6, a.late_start_ns / 1e6,
              a.other_ns / 1e6, a.sentence()] for a in rep.misses[:500]]))
        if len(rep.misses) > 500:
            parts.append(f"<p>... and {len(rep.misses) - 500} more (see <code>--json</code>).</p>")
        for stem, b64 in figs.items():
            parts.append(f"<img alt='{stem}' src='data:image/png;base64,{b64}'>")
    else:
        parts.append("<p>No deadline missed.</p>")
    parts.append("<h2>Ops</h2>")
    parts.append(html_table(["task/op", "count", "p50", "p90", "p99", "max"],
                        [[f"{o['task']}/{o['op']}", o["count"], o["p50_ms"], o["p90_ms"], o["p99_ms"], o["max_ms"]]
                         for o in sorted(doc["ops"], key=lambda o: (o["task"], o["fallback"], o["index"]))]))
    worst = [[t["name"], ", ".join(f"{w['op']} {w['share'] * 100:.0f}% ({w['excess_ms']:+.2f} ms vs median)"
                                   for w in t["worst_case_ops"][:3])] for t in doc["tasks"] if t["worst_case_ops"]]
    if worst:
        parts.append("<h3>Ops in each task's worst jobs (execution time at or above its p99)</h3>")
        parts.append(html_table(["task", "ops (share of the time)"], worst))
    parts.append("<h2>Cause-effect chains</h2>")
    if doc["chains"]:
        rows, bad = [], []
        for c in doc["chains"]:
            vs = {v["measure"]: v for v in c.get("vs_bounds", [])}
            for k, key in enumerate(("latency", "reaction", "data_age", "finished")):
                p, v = c[f"{key}_ms"], vs.get(key) or {}
                rows.append([f"{c['name']} ({' → '.join(c['tasks'])}), {c['outputs']} outputs" if k == 0 else "",
                             key.replace("_", " "), p["p50"], p["p99"], p["max"], v.get("bound_ms"), v.get("bound"),
                             v.get("ratio"), v.get("per_hop_let_ms")])
                bad.append(v.get("ratio") is not None and v["ratio"] < 1)
        parts.append(html_table(["chain", "measure", "p50", "p99", "max", "bound (rt-runtime check)", "which bound",
                             "bound / max", "per-hop LET"], rows, bad))
    else:
        parts.append("<p>No chain: none configured, and no task wiring in the configuration.</p>")
    if rep.rta is not None and rep.rta.get("tasks"):
        parts.append("<h2>Schedulability: the analysis of rt-runtime check with the observed execution times</h2>")
        parts.append(html_table(["task", "worker", "released by", "budget", "observed max exec", "blocking", "response",
                             "deadline", "schedulable", "needs", "check: response", "check: schedulable"],
                            [[r["name"], r["worker"], r["released_by"], r["budget_ms"], r["observed_wcet_ms"],
                              r["blocking_ms"], r["response_time_ms"], r["deadline_ms"], r["schedulable"],
                              r["needs_ms"], r["configured_response_time_ms"], r["configured_schedulable"]]
                             for r in rep.rta["tasks"]],
                            [not r["schedulable"] for r in rep.rta["tasks"]]))
    for n in rep.notes:
        parts.append(f"<p>note: {html.escape(n)}</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(rep: TraceReport, path: str | Path, source: str = "") -> Path:
    """Write the report to ``path``; returns it."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(render_html(rep, source), encoding="utf-8")
    return p
