"""`rt-runtime check FILE [--json]`: schedulability analysis of a task set, as it runs.

``rt-runtime check --trace RUN.rttrace [--executor CFG]``: the same analysis of a DeadlineExecutor run's
callbacks with the execution times its trace observed (``analysis.executor_check``, docs/ROS.md).

Reads a full configuration or a file with only ``policy:``, ``tasks:`` (and ``chains:``), derives each
task's releases from what triggers it and analyses each worker (``analysis.e2e``, docs/ANALYSIS.md),
prints utilization, each task's release model, worst-case response time, deadline, slack and
verdict (with ``steal: true``, each blocking term covers one op of a job taken from another worker),
the degraded mode (every fallback on, the periodic ones reserved: ``analysis.modes``), the
overall verdict and the chains' end-to-end latency bounds (chain-LET, per-hop LET, response). Exit
status: 0 schedulable (both modes), 1 not, 2 invalid input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from ..analysis import SchedulabilityReport
    from ..analysis.modes import ModeReport

POLICY_NAMES = {"rm": "rate monotonic", "dm": "deadline monotonic", "fp": "fixed priorities",
                "edf": "earliest deadline first"}


def add_parser(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register `check` with its arguments."""
    p = subparsers.add_parser(
        name, help=help_text, description="Schedulability analysis of the task set in FILE, "
        "with each task's releases derived from what triggers it (holistic analysis: jitter propagated along "
        "chains, release offsets, the runtime's workers): response-time analysis under rm/dm/fp, processor "
        "demand and Spuri's response times under edf; chain latency bounds under chain-LET and per-hop LET. "
        "With steal: true every task may also wait for one op of a job its worker took from another "
        "(docs/ANALYSIS.md, 'Work-conserving dispatch'). "
        "Exit status 0 when schedulable, 1 when not, 2 on invalid input.")
    p.add_argument("file", metavar="FILE", nargs="?", help="YAML with policy: and tasks: (a full config also works)")
    p.add_argument("--trace", metavar="RUN.rttrace", help="instead of FILE: the node graph of a DeadlineExecutor "
                   "run, its callbacks with the execution times the trace observed (docs/ROS.md)")
    p.add_argument("--executor", metavar="CFG", help="with --trace: the DeadlineExecutor's YAML file whose timing "
                   "and policy replace the run's (default: the run's own)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    return p


def run(args: argparse.Namespace) -> int:
    """Analyse the file; print the table or JSON; 0 schedulable, 1 not, 2 invalid input."""
    from ..config import ConfigError
    from ..core.task import TaskError

    if args.trace is not None or args.executor is not None:
        if args.file is not None or args.trace is None:
            return _usage_error("give FILE (a stack file) or --trace RUN.rttrace [--executor CFG] (a DeadlineExecutor "
                                "run), not both" if args.file is not None else "--executor needs --trace RUN.rttrace "
                                "(the run whose observed times are analysed)")
        return run_executor(args)
    if args.file is None:
        return _usage_error("FILE is missing: a stack file, or --trace RUN.rttrace for a DeadlineExecutor run")
    try:
        check_runtime_keys(args.file)
        report = analyse_file(args.file)
        mode = degraded_mode(args.file)
    except ConfigError as e:
        return _usage_error(str(e))
    except (TaskError, ValueError) as e:  # what the analysis itself refuses, e.g. an unsupported deadline
        return _usage_error(f"{args.file}: {e}")
    except (OverflowError, RecursionError) as e:   # numbers the analysis cannot carry: bad input, not a verdict
        return _usage_error(f"{args.file}: the analysis cannot handle this task set's magnitudes "
                            f"({type(e).__name__}: {str(e)[:120]}); check the periods and budgets")
    if args.json:
        doc = {"file": str(args.file), **report.to_json(),
               "degraded_mode": mode.to_json() if mode is not None else None}
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        print(render(report, str(args.file), mode))
    return 0 if report.schedulable and (mode is None or mode.schedulable) else 1


def run_executor(args: argparse.Namespace) -> int:
    """``--trace RUN.rttrace [--executor CFG]``: the callbacks of a DeadlineExecutor run through the analysis with
    their observed times (``analysis.executor_check``); 0 schedulable, 1 not, 2 invalid input."""
    from ..analysis.e2e import analyze_system
    from ..analysis.executor_check import NotExecutorTrace, executor_taskset, observed_times
    from ..analysis.trace_rta import observed_rta, observed_taskset
    from ..config.yamlfile import ConfigError
    from ..core.task import TaskError
    from ..ros.deadline.config import load_config
    from ..trace import TraceFileError, load_trace

    try:
        cols, meta = load_trace(args.trace)
    except TraceFileError as e:
        return _usage_error(str(e))
    try:
        cfg = load_config(args.executor) if args.executor else None
        policy, tasks, notes = executor_taskset(meta, cfg)
    except ConfigError as e:
        return _usage_error(str(e))
    except NotExecutorTrace as e:
        return _usage_error(f"{args.trace}: {e}")
    except (KeyError, TypeError, ValueError) as e:   # TaskError too: a metadata value the analysis cannot take
        return _usage_error(f"{args.trace}: its tasks_config cannot be analysed ({type(e).__name__}: {e})")
    if not tasks:
        return _usage_error(f"{args.trace}: the run booked no callbacks (nothing to analyse)")
    exec_max = observed_times(cols, meta, [t.name for t in tasks])
    rta = observed_rta(tasks, exec_max, exec_max, policy)
    if rta["schedulable"] is None:
        return _usage_error(f"{args.trace}: {rta['error']}")
    source = f"{args.trace} (DeadlineExecutor callbacks, observed worst cases" + \
        (f", timing from {args.executor})" if args.executor else ")")
    if args.json:
        print(json.dumps({"trace": str(args.trace), "executor": args.executor, **rta, "notes": rta["notes"] + notes},
                         indent=2, allow_nan=False))
    else:
        try:
            report = analyze_system(observed_taskset(tasks, exec_max, exec_max, policy), policy, [], None, None,
                                    None, exec_max)
        except (TaskError, ValueError) as e:
            return _usage_error(f"{args.trace}: {e}")
        budgets = rta["check"]
        lines = [render(report, source), *(f"note: {n}" for n in notes),
                 f"with the budgets instead: {'SCHEDULABLE' if budgets['schedulable'] else 'NOT SCHEDULABLE'}"
                 + (f" (can miss: {', '.join(budgets['can_miss'])})" if budgets["can_miss"] else ""), rta["verdict"]]
        print("\n".join(lines))
    return 0 if rta["schedulable"] else 1


def check_runtime_keys(path: str) -> None:
    """A full stack file (a task with a ``graph:``) is read as replay and the live node read it, so a value only
    they use (``on_miss: explode``, ``compile: jitt``) is refused here too, not after the analysis passed it."""
    from ..config.stack import load_stack
    from ..config.taskset import load_yaml

    doc = load_yaml(path)
    tasks = doc.get("tasks") if isinstance(doc, dict) else None
    if isinstance(tasks, list) and any(isinstance(t, dict) and "graph" in t for t in tasks):
        load_stack(path)


def analyse_file(path: str) -> SchedulabilityReport:
    """The file's task set through the holistic analysis (``analysis.e2e``): releases derived from what
    triggers each task, the workers partitioned as the runtime partitions them (chains kept together)."""
    from ..analysis.e2e import analyze_system
    from ..config import load_taskset
    from ..config.taskset import load_yaml, task_releases, task_writes
    from ..core.chain import apply_chains
    from ..sched.policy import partition

    policy, tasks, chains = load_taskset(path)
    acts, on_finish, explicit, workers = task_releases(path)
    where = partition(apply_chains(tasks, chains, policy), workers, explicit,
                      together=[c.tasks for c in chains if c.deadline_ns is not None]) if workers > 1 else None
    return analyze_system(tasks, policy, chains, acts, on_finish, where, None, task_writes(path),
                          steal=where is not None and load_yaml(path).get("steal") is True)


def degraded_mode(path: str | Path) -> ModeReport | None:
    """The file's degraded mode (``analysis.modes``), partitioned as the runtime partitions it; None
    when no task has a fallback."""
    from ..analysis.modes import analyse_degraded
    from ..config import load_taskset
    from ..config.taskset import fallback_budgets, task_releases, task_writes

    policy, tasks, chains = load_taskset(path)
    fallbacks = fallback_budgets(path, tasks)
    if not fallbacks:
        return None
    acts, on_finish, explicit, workers = task_releases(path)
    where = None
    if workers > 1:
        from ..analysis.modes import degraded_taskset
        from ..core.chain import apply_chains
        from ..sched.policy import partition

        mode_tasks, mode_chains, _ = degraded_taskset(tasks, policy, chains, fallbacks)
        where = partition(apply_chains(mode_tasks, mode_chains, policy), workers, explicit,
                          together=[c.tasks for c in mode_chains if c.deadline_ns is not None])
    return analyse_degraded(tasks, policy, chains, fallbacks, acts, on_finish, where, task_writes(path))


def _render_mode(mode: ModeReport) -> list[str]:
    """The degraded mode's lines: each reserved fallback, then the others' test with the reservation."""
    out = ["", "degraded mode (every fallback on; a periodic task's reserved: its own period, ahead of every other "
               "job, docs/ANALYSIS.md):"]
    rows = [[r.name, str(r.worker), _ms(r.period_ns), _ms(r.wcet_ns), _ms(r.deadline_ns), _ms(r.response_ns),
             "ok" if r.schedulable else "MISS"] for r in mode.reserved]
    out += _table(["reserved", "worker", "period ms", "fallback wcet ms", "deadline ms", "response ms", "verdict"],
                  rows)
    policy = mode.others.policy
    if policy == "edf":
        until = "" if mode.checked_until_ns is None else f", deadlines up to {mode.checked_until_ns / 1e6:.3f} ms"
        out.append(f"the other tasks' processor demand plus the reserved budgets (worst phasing{until}): "
                   f"{'passes' if mode.demand_passes else 'fails'}")
    else:
        late = [n for n, r in mode.responses.items() if r is None]
        out.append("the other tasks' response times with the reserved budgets above them: "
                   + ("all within their deadlines" if not late else f"can miss: {', '.join(late)}"))
    if mode.chains:
        out.append("chains in this mode: " + "; ".join(" -> ".join(c) for c in mode.chains))
    out += [f"note: {n}" for n in mode.notes]
    out.append(f"degraded mode: {'SCHEDULABLE' if mode.schedulable else 'NOT SCHEDULABLE'}")
    return out


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


def render(report: SchedulabilityReport, source: str, mode: ModeReport | None = None) -> str:
    """The human-readable report: task table, bounds, the degraded mode, verdict, chains."""
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
    released = [[t.name, str(t.worker), t.released_by] for t in report.tasks if t.released_by]
    if any(r[2] != "periodic" for r in released):
        out += ["", "releases (derived from what triggers each task; period and jitter above are these models'):"]
        out += _table(["task", "worker", "released by"], released, left=3)
    workers = {k: v for k, v in report.bounds.items() if k.startswith("worker")}
    how = ""
    for key, b in (workers or {"": report.bounds}).items():
        out.append("")
        u = b.get("utilization", report.utilization)
        if len(workers) > 1:
            out.append(f"{key.replace('worker', 'worker ')}: {len(b['tasks'])} tasks, utilization {u:.3f}")
        how = _render_tests(out, b, u)
    for n in report.notes:
        out.append(f"note: {n}")
    if mode is not None:
        out += _render_mode(mode)
    missed = [t.name for t in report.tasks if not t.schedulable]
    out.append(f"verdict: {'SCHEDULABLE' if report.schedulable else 'NOT SCHEDULABLE'} ({how}"
               + (f"; can miss: {', '.join(missed)}" if missed else "") + ")")
    if report.chains:
        out += ["", "cause-effect chains (end-to-end latency bounds):"]
        rows = [[c.name, " -> ".join(c.tasks), _ms(c.chain_let_ns), _ms(c.per_hop_let_ns), _ms(c.response_ns),
                 _ms(c.davare_ns), _ms(c.let_reaction_ns), _ms(c.let_data_age_ns)] for c in report.chains]
        out += _table(["chain", "tasks", "chain-LET ms", "per-hop LET ms", "response ms", "Davare ms",
                       "LET reaction ms", "LET data age ms"], rows, left=2)
        for c in report.chains:
            if c.note:
                out.append(f"  {c.name}: {c.note}")
        out.append("from the first task's release: chain-LET = last output visible as configured (a chain with a "
                   "deadline is one LET interval), per-hop LET = every task its own LET interval, response = last "
                   "task finished (docs/ANALYSIS.md); Davare: sum(T + R); LET (Dürr et al. 2019): reaction "
                   "sum(T + D), data age sum(T + D) - T_last")
    return "\n".join(out)


def _render_tests(out: list[str], b: dict, u: float) -> str:
    """The lines of the tests that decided (one worker's, or the whole set's); returns the method's name."""
    if "liu_layland" in b:
        ll, hb = b["liu_layland"], b["hyperbolic"]
        tag = "" if ll["applies"] else "  (not applicable: needs rate-monotonic order, implicit deadlines, no " \
                                       "jitter and no blocking)"
        out.append(f"Liu & Layland bound: U {u:.3f} <= {ll['bound']:.3f}: {'passes' if ll['passes'] else 'fails'}{tag}")
        out.append(f"hyperbolic bound: prod(U_i + 1) {hb['product']:.3f} <= 2: "
                   f"{'passes' if hb['passes'] else 'fails'}{tag}")
        return "response-time analysis"
    d = b["edf_demand"]
    out.append(f"EDF utilization test: U {u:.3f} <= 1: {'passes' if b['edf_utilization']['passes'] else 'fails'}"
               + ("" if b["edf_utilization"]["applies"] else "  (necessary only: constrained deadlines, "
                                                             "jitter or blocking)"))
    until = "" if d["checked_until_ms"] is None else f", deadlines up to {d['checked_until_ms']:.3f} ms"
    out.append(f"processor demand, worst phasing (QPA{until}): {'passes' if d['passes'] else 'fails'}"
               + (f" ({d['note']})" if d["note"] else ""))
    if "edf_offsets" in b:
        o = b["edf_offsets"]
        out.append(f"processor demand, release offsets: {'passes' if o['passes'] else 'fails'} ({o['note']})")
        return "processor demand with release offsets, Spuri's response times"
    return "processor demand (QPA) and Spuri's response times"
