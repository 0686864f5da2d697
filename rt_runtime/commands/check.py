"""`rt-runtime check FILE [--json]`: schedulability analysis of a task set.

Reads a full configuration or a file with only ``policy:``, ``tasks:`` (and ``chains:``), prints
utilization, each task's worst-case response time, deadline, slack and verdict, the overall
verdict and the chain latency bounds. Exit status: 0 schedulable, 1 not, 2 invalid input.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from ..analysis import SchedulabilityReport

POLICY_NAMES = {"rm": "rate monotonic", "dm": "deadline monotonic", "fp": "fixed priorities",
                "edf": "earliest deadline first"}


def add_parser(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register `check` with its arguments."""
    p = subparsers.add_parser(
        name, help=help_text, description="Schedulability analysis of the task set in FILE: exact response-time "
        "analysis under rm/dm/fp, processor demand (QPA) and Spuri's response times under edf. Exit status 0 "
        "when schedulable, 1 when not, 2 on invalid input.")
    p.add_argument("file", metavar="FILE", help="YAML with policy: and tasks: (a full config also works)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    return p


def run(args: argparse.Namespace) -> int:
    """Analyse the file; print the table or JSON; 0 schedulable, 1 not, 2 invalid input."""
    from ..analysis import analyze_taskset
    from ..config import ConfigError, load_taskset
    from ..config.taskset import task_writes
    from ..core.task import TaskError

    try:
        policy, tasks, chains = load_taskset(args.file)
        report = analyze_taskset(tasks, policy, chains, task_writes(args.file))
    except ConfigError as e:
        return _usage_error(str(e))
    except (TaskError, ValueError) as e:  # what the analysis itself refuses, e.g. an unsupported deadline
        return _usage_error(f"{args.file}: {e}")
    except (OverflowError, RecursionError) as e:   # numbers the analysis cannot carry: bad input, not a verdict
        return _usage_error(f"{args.file}: the analysis cannot handle this task set's magnitudes "
                            f"({type(e).__name__}: {str(e)[:120]}); check the periods and budgets")
    if args.json:
        doc = {"file": str(args.file), **report.to_json()}
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        print(render(report, str(args.file)))
    return 0 if report.schedulable else 1


def _usage_error(message: str) -> int:
    # Same one-line format as rt_runtime.cli.main gives a UsageError, also when run() is called directly.
    print(f"rt-runtime check: error: {message}", file=sys.stderr)
    return 2


def _ms(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """Aligned columns: the first ``left`` columns left-aligned, the rest right-aligned."""
    widths = [max(len(r[c]) for r in [headers, *rows]) for c in range(len(headers))]
    lines = []
    for r in [headers, *rows]:
        cells = [cell.ljust(w) if c < left else cell.rjust(w) for c, (cell, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
    return lines


def render(report: SchedulabilityReport, source: str) -> str:
    """The human-readable report: task table, bounds, verdict, chains."""
    fixed = report.policy != "edf"
    out = [f"{source}: policy {report.policy} ({POLICY_NAMES[report.policy]}), {len(report.tasks)} tasks, "
           f"utilization {report.utilization:.3f} ({report.utilization * 100:.1f}%)", ""]
    headers = ["task", *(["prio"] if fixed else []), "period ms", "wcet ms", "deadline ms", "jitter ms",
               "blocking ms", "util", "response ms", "slack ms", "verdict"]
    rows = []
    for t in report.tasks:
        verdict = "ok" if t.schedulable else ("MISS" if not t.note.startswith("inconclusive") else "UNKNOWN")
        rows.append([t.name, *([str(t.priority_rank)] if fixed else []), _ms(t.period_ns), _ms(t.wcet_ns),
                     _ms(t.deadline_ns), _ms(t.jitter_ns), _ms(t.blocking_ns), f"{t.utilization:.3f}",
                     _ms(t.response_ns), _ms(t.slack_ns), verdict])
    out += _table(headers, rows)
    for t in report.tasks:
        if t.note and (not t.schedulable or t.response_ns is None):
            out.append(f"  {t.name}: {t.note}")
    out.append("")
    b = report.bounds
    if "liu_layland" in b:
        ll, hb = b["liu_layland"], b["hyperbolic"]
        tag = "" if ll["applies"] else "  (not applicable: needs rate-monotonic order, implicit deadlines, no " \
                                       "jitter and no blocking)"
        out.append(f"Liu & Layland bound: U {report.utilization:.3f} <= {ll['bound']:.3f}: "
                   f"{'passes' if ll['passes'] else 'fails'}{tag}")
        out.append(f"hyperbolic bound: prod(U_i + 1) {hb['product']:.3f} <= 2: "
                   f"{'passes' if hb['passes'] else 'fails'}{tag}")
        how = "response-time analysis"
    else:
        d = b["edf_demand"]
        out.append(f"EDF utilization test: U {report.utilization:.3f} <= 1: "
                   f"{'passes' if b['edf_utilization']['passes'] else 'fails'}"
                   + ("" if b["edf_utilization"]["applies"] else "  (necessary only: constrained deadlines, "
                                                                 "jitter or blocking)"))
        until = "" if d["checked_until_ms"] is None else f", deadlines up to {d['checked_until_ms']:.3f} ms"
        out.append(f"processor demand (QPA{until}): {'passes' if d['passes'] else 'fails'}"
                   + (f" ({d['note']})" if d["note"] else ""))
        how = "processor demand (QPA) and Spuri's response times"
    for n in report.notes:
        out.append(f"note: {n}")
    missed = [t.name for t in report.tasks if not t.schedulable]
    out.append(f"verdict: {'SCHEDULABLE' if report.schedulable else 'NOT SCHEDULABLE'} ({how}"
               + (f"; can miss: {', '.join(missed)}" if missed else "") + ")")
    if report.chains:
        out += ["", "cause-effect chains (end-to-end latency bounds):"]
        rows = [[c.name, " -> ".join(c.tasks), _ms(c.davare_ns), _ms(c.let_reaction_ns), _ms(c.let_data_age_ns)]
                for c in report.chains]
        out += _table(["chain", "tasks", "Davare ms", "LET reaction ms", "LET data age ms"], rows, left=2)
        for c in report.chains:
            if c.note:
                out.append(f"  {c.name}: {c.note}")
        out.append("Davare: sum(T + R), implicit communication; LET (Dürr et al. 2019): reaction sum(T + D), "
                   "data age sum(T + D) - T_last")
    return "\n".join(out)
