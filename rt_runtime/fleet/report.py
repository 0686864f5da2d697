"""What a batch tells: the ``--json`` document, the failure table, JUnit XML, and the fleet HTML.

Pure renderers over ``BagOutcome`` lists (rows as the store holds them); writing the files is
the command's job. The HTML is self-contained (plots as inline PNGs, no script or stylesheet
fetched), like ``rt-runtime analyze --html``.
"""
from __future__ import annotations

import base64
import html
import xml.etree.ElementTree as ET
from typing import Any, Sequence

import numpy as np

from .gates import format_failures
from .runner import BagOutcome

WORST = 10   # bags in the report's "worst bags" table


def bag_json(o: BagOutcome) -> dict[str, Any]:
    """One bag of ``batch --json``."""
    r = o.row
    return {"bag": o.bag, "output_digest": r.get("output_digest"), "deterministic": r.get("deterministic"),
            "misses": r.get("misses"), "passed": o.passed, "wall_s": _round(r.get("wall_s")),
            "error": r.get("error"), "resumed": o.resumed, "failures": o.failures}


def batch_json(outcomes: Sequence[BagOutcome], wall_s: float, cluster: dict[str, Any] | None) -> dict[str, Any]:
    """The document ``batch --json`` prints."""
    return {"bags": [bag_json(o) for o in outcomes], "wall_s": round(wall_s, 3), "cluster": cluster,
            "passed": sum(o.passed for o in outcomes), "failed": sum(not o.passed for o in outcomes)}


def failure_lines(outcomes: Sequence[BagOutcome]) -> list[str]:
    """The table of failed bags: one line per broken bound, and one per bag that could not be replayed."""
    rows = [(o.bag, o.failures) for o in outcomes if o.failures]
    rows += [(o.bag, [{"path": "(error)", "bound": "replays", "found": o.row["error"]}])
             for o in outcomes if o.row.get("error") is not None]
    return format_failures(rows)


def summary_lines(outcomes: Sequence[BagOutcome], wall_s: float, cluster: dict[str, Any] | None) -> list[str]:
    """The human summary: one line per bag, then the totals."""
    out = [f"{'bag':<40} {'result':<7} {'misses':>6} {'wall s':>7}  digest"]
    for o in outcomes:
        r = o.row
        result = "ERROR" if r.get("error") else ("pass" if o.passed else "FAIL")
        digest = (r.get("output_digest") or "")[:16]
        misses = "-" if r.get("misses") is None else str(r["misses"])
        wall = "resumed" if o.resumed else (f"{r['wall_s']:.2f}" if r.get("wall_s") is not None else "-")
        out.append(f"{_short(o.bag, 40):<40} {result:<7} {misses:>6} {wall:>7}  {digest}")
    n_pass = sum(o.passed for o in outcomes)
    where = "" if cluster is None else (f" on {cluster['workers']} worker(s) at {cluster['address']}"
                                        + (" (embedded)" if cluster["embedded"] else ""))
    out.append(f"{len(outcomes)} bag(s): {n_pass} passed, {len(outcomes) - n_pass} failed, "
               f"{sum(o.resumed for o in outcomes)} from the results store; {wall_s:.2f} s wall{where}")
    return out


def junit_xml(outcomes: Sequence[BagOutcome], wall_s: float, partial: str | None = None) -> str:
    """JUnit XML: one testcase per bag, a <failure> per broken bound, an <error> for a bag that did not replay.

    ``partial``: why the batch stopped early (its ``<testsuites>`` then says ``partial="true"``).
    """
    failures = sum(bool(o.failures) for o in outcomes)
    errors = sum(o.row.get("error") is not None for o in outcomes)
    counts = {"tests": str(len(outcomes)), "failures": str(failures), "errors": str(errors), "time": f"{wall_s:.3f}"}
    cut = {"partial": "true", "partial_reason": partial} if partial else {}
    root = ET.Element("testsuites", {"name": "rt-runtime batch", **counts, **cut})
    suite = ET.SubElement(root, "testsuite", {"name": "rt-runtime batch", "skipped": "0", **counts})
    for o in outcomes:
        case = ET.SubElement(suite, "testcase", {"classname": "rt-runtime.batch", "name": o.bag,
                                                 "time": f"{o.row.get('wall_s') or 0.0:.3f}"})
        for f in o.failures:
            found = "missing" if f["found"] is None else str(f["found"])
            el = ET.SubElement(case, "failure", {"type": "gate", "message": f"{f['path']} {f['bound']}, found {found}"})
            el.text = f"{f['path']}: expected {f['bound']}, found {found} ({f['why']})"
        if o.row.get("error") is not None:
            ET.SubElement(case, "error", {"type": "replay", "message": o.row["error"]}).text = o.row["error"]
        out = ET.SubElement(case, "system-out")
        out.text = (f"output_digest {o.row.get('output_digest')}; deterministic {o.row.get('deterministic')}; "
                    f"misses {o.row.get('misses')}" + ("; from the results store" if o.resumed else ""))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def fleet_cdf(outcomes: Sequence[BagOutcome]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per task, the fleet's response-time CDF (ms, fraction of jobs): each bag's quantiles weighted by its jobs."""
    parts: dict[str, list[tuple[np.ndarray, float]]] = {}
    for o in outcomes:
        for t in o.row.get("tasks") or []:
            q = np.asarray(t["quantiles_ms"] or [], dtype=np.float64)
            if len(q) and t["jobs"]:
                parts.setdefault(t["name"], []).append((q, t["jobs"] / len(q)))
    out = {}
    for name, qs in parts.items():
        v = np.concatenate([q for q, _ in qs])
        w = np.concatenate([np.full(len(q), wt) for q, wt in qs])
        order = np.argsort(v, kind="stable")
        out[name] = (v[order], np.cumsum(w[order]) / w.sum())
    return out


def worst(outcomes: Sequence[BagOutcome], n: int = WORST) -> list[BagOutcome]:
    """The bags that did worst: errors, then failed gates, then most misses, then the slowest p99."""
    def key(o: BagOutcome) -> tuple[Any, ...]:
        p99 = max((t["p99_ms"] for t in o.row.get("tasks") or []), default=0.0)
        return (o.row.get("error") is None, o.passed, -(o.row.get("misses") or 0), -p99)
    return sorted(outcomes, key=key)[:n]


def render_html(outcomes: Sequence[BagOutcome], wall_s: float, cluster: dict[str, Any] | None,
                partial: str | None = None) -> str:
    """The fleet report as one HTML string (``partial``: why the batch stopped early, shown first)."""
    from ..analysis.html import REPORT_CSS, html_table   # one look for every report this tool writes

    n_pass = sum(o.passed for o in outcomes)
    where = f" on {cluster['workers']} worker(s) at {html.escape(cluster['address'])}" if cluster else ""
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>rt-runtime batch: {len(outcomes)} bags"
             f"</title><style>{REPORT_CSS}</style></head><body><h1>Fleet replay</h1>",
             f"<p class='verdict'>PARTIAL: {html.escape(partial)}</p>" if partial else "",
             f"<p class='verdict'>{len(outcomes)} bag(s): {n_pass} passed, {len(outcomes) - n_pass} failed; "
             f"{wall_s:.2f} s wall{where}</p>"]
    cdf, misses = _cdf_png(outcomes), _misses_png(outcomes)
    parts.append("<h2>Response-time CDF per task, over the fleet</h2>" + (_img(cdf) if cdf else "<p>no jobs</p>"))
    parts.append("<h2>Misses per bag</h2>" + (_img(misses) if misses else "<p>no bag replayed</p>"))
    parts.append("<h2>Worst bags</h2>" + html_table(
        ["bag", "result", "misses", "worst p99 ms", "deterministic", "wall s", "digest"],
        [[o.bag, "error" if o.row.get("error") else ("pass" if o.passed else "fail"), o.row.get("misses"),
          max((t["p99_ms"] for t in o.row.get("tasks") or []), default=None), o.row.get("deterministic"),
          o.row.get("wall_s"), (o.row.get("output_digest") or "")[:16]] for o in worst(outcomes)],
        [not o.passed for o in worst(outcomes)]))
    gate = [[o.bag, f["path"], f["bound"], f["found"]] for o in outcomes for f in o.failures]
    parts.append("<h2>Gate failures</h2>" + (html_table(["bag", "path", "bound", "found"], gate, [True] * len(gate))
                                             if gate else "<p>none</p>"))
    errs = [[o.bag, o.row["error"]] for o in outcomes if o.row.get("error") is not None]
    parts.append("<h2>Bags that did not replay</h2>" + (html_table(["bag", "error"], errs, [True] * len(errs))
                                                         if errs else "<p>none</p>"))
    parts.append("</body></html>")
    return "".join(parts)


def _cdf_png(outcomes: Sequence[BagOutcome]) -> bytes | None:
    from ..analysis.plots import pyplot, png_bytes

    cdf = fleet_cdf(outcomes)
    if not cdf:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, (v, p) in cdf.items():
        ax.step(v, p, where="post", label=name)
    ax.set_xlabel("response time (ms)")
    ax.set_ylabel("fraction of jobs, all bags")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return png_bytes(fig)


def _misses_png(outcomes: Sequence[BagOutcome]) -> bytes | None:
    from ..analysis.plots import pyplot, png_bytes

    done = [o for o in outcomes if o.row.get("misses") is not None]
    if not done:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, max(2.0, 0.25 * len(done) + 1)))
    ax.barh([_short(o.bag, 50) for o in done], [o.row["misses"] for o in done],
            color=["#c0392b" if not o.passed else "#4a7bb7" for o in done])
    ax.invert_yaxis()
    ax.set_xlabel("deadline misses (red: bag failed)")
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    return png_bytes(fig)


def _img(png: bytes) -> str:
    return f"<img src='data:image/png;base64,{base64.b64encode(png).decode()}'>"


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else "…" + text[-(n - 1):]


def _round(v: Any) -> Any:
    return round(v, 3) if isinstance(v, float) else v

