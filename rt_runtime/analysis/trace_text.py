"""The human-readable ``rt-runtime analyze`` report: tables and one line per missed job."""
from __future__ import annotations

from .trace_report import TraceReport


def _f(v: float | None, w: int = 7, d: int = 2) -> str:
    return f"{'-':>{w}}" if v is None else f"{v:>{w}.{d}f}"


def task_table(rep: TraceReport) -> list[str]:
    """Per task: jobs, misses, response and execution times, budget, jitter, slack."""
    out = [f"{'task':<20} {'jobs':>6} {'miss':>5} {'ratio':>6} | {'resp p50':>8} {'p90':>7} {'p99':>7} {'max':>7} | "
           f"{'exec p50':>8} {'p99':>7} {'max':>7} {'budget':>7} | {'jitter':>6} {'slack':>7}"]
    for t in rep.tasks:
        j = t.to_json()
        r, e = j["response_ms"], j["exec_ms"]
        over = "!" if j["exec_over_budget"] else " "
        out.append(f"{t.name:<20} {t.jobs:>6} {t.misses:>5} {j['miss_ratio']:>6.3f} | {r['p50']:>8.2f} "
                   f"{r['p90']:>7.2f} {r['p99']:>7.2f} {r['max']:>7.2f} | {e['p50']:>8.2f} {e['p99']:>7.2f} "
                   f"{e['max']:>7.2f}{over}{_f(j['budget_ms'])} | {_f(j['release_jitter_ms'], 6)} "
                   f"{_f(j['min_slack_ms'])}")
        extra = [f"{n} {lbl}" for n, lbl in ((t.watchdog_aborted, "aborted by the watchdog before the deadline"),
                                             (t.aborted_after_miss, "aborted after their miss"),
                                             (t.failed, "failed (an op raised)"),
                                             (t.dropped, "released without input"), (t.overruns, "overruns"),
                                             (t.spec_hits, "committed from speculation (response 0)"),
                                             (t.spec_misses, "speculation misses"))
                 if n]
        if extra:
            out.append(f"{'':<20} " + ", ".join(extra))
    out.append("(ms; '!' = an execution time above the budget; slack = min(deadline - response))")
    return out


def op_lines(rep: TraceReport, top: int = 3) -> list[str]:
    """Per op execution times, and the ops that dominate each task's worst jobs."""
    out = [f"{'task/op':<40} {'n':>6} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7}"]
    for o in sorted(rep.ops, key=lambda o: (o["task"], o["fallback"], o["index"])):
        out.append(f"{o['task'] + '/' + o['op']:<40} {o['count']:>6} {o['p50_ms']:>7.2f} {o['p90_ms']:>7.2f} "
                   f"{o['p99_ms']:>7.2f} {o['max_ms']:>7.2f}")
    for t in rep.tasks:
        if t.worst_ops:
            out.append(f"worst jobs of {t.name}: " + ", ".join(
                f"{w['op']} {w['share'] * 100:.0f}% ({w['excess_ms']:+.2f} ms vs median)" for w in t.worst_ops[:top]))
    return out


def miss_lines(rep: TraceReport, limit: int = 20) -> list[str]:
    """One line per missed job (the first ``limit``), and a count of causes per task."""
    if not rep.misses:
        return ["no deadline missed"]
    out = []
    for a in rep.misses[:limit]:
        fin = f"finished {a.finish_ns / 1e6:.2f}" if a.finish_ns is not None else \
            ("aborted" if a.aborted else "never finished")
        why = "+".join(a.cause)
        who = ""
        if "interference" in a.cause and a.interference_ns:
            who = f" by {next(iter(a.interference_ns))}"
        elif "blocking" in a.cause and a.blocking_by:
            who = f" by {a.blocking_by[0][0]}/{a.blocking_by[0][1]}"
        elif "overrun" in a.cause and a.overrun_op:
            who = f" in {a.overrun_op[0]}"
        late = f", late by {a.late_by_ns / 1e6:.2f}" if a.missed else ""
        out.append(f"{a.task}#{a.job}: released {a.release_ns / 1e6:.2f}, deadline {a.deadline_ns / 1e6:.2f}, "
                   f"{fin}{late} -> {why}{who}")
        out.append(f"    {a.sentence()}")
    if len(rep.misses) > limit:
        out.append(f"... {len(rep.misses) - limit} more (see --json or --html)")
    for t in rep.tasks:
        if t.causes:
            counts = sorted(t.causes.items(), key=lambda kv: -kv[1])
            out.append(f"{t.name}: " + ", ".join(f"{n} x {c}" for c, n in counts))
    return out


_LABELS = {"latency": "latency", "reaction": "reaction", "data_age": "data age", "finished": "finished"}


def chain_lines(rep: TraceReport) -> list[str]:
    """Per chain: latency, reaction, data age and finish distributions beside the bounds `check` gives."""
    out = []
    for c in rep.chains:
        j = c.to_json(rep.chain_bounds.get(c.name))
        out.append(f"{c.name} ({' -> '.join(c.tasks)}): {j['outputs']} outputs" + (f"; {c.note}" if c.note else ""))
        vs = {v["measure"]: v for v in j.get("vs_bounds", [])}
        if vs:
            out.append(f"    {'ms':<9} {'p50':>8} {'p99':>8} {'max':>8} | {'bound':>8} {'(rt-runtime check)':<34} "
                       f"{'bound/max':>9}")
        for key, label in _LABELS.items():
            p = j[f"{key}_ms"]
            line = f"    {label:<9} {p['p50']:>8.2f} {p['p99']:>8.2f} {p['max']:>8.2f}"
            v = vs.get(key)
            if v is not None:
                what = v["bound"] + (f" (per-hop LET {v['per_hop_let_ms']:.2f})" if v.get("per_hop_let_ms") is not None
                                     and v["per_hop_let_ms"] != v["bound_ms"] else "")
                ratio = "" if v["ratio"] is None else f"{v['ratio']:.2f}" + (" past the bound!" if v["ratio"] < 1
                                                                              else "")
                line += f" | {_f(v['bound_ms'], 8)} {what:<34} {ratio:>9}"
            out.append(line)
        b = j.get("bounds")
        if b and b.get("note"):
            out.append(f"    ({b['note']})")
    if any(c.name in rep.chain_bounds for c in rep.chains):
        out.append("(from the first task's release; latency to the first output built from a sample, against "
                   "chain-LET: visible as configured; per-hop LET: every task its own LET interval; finished: "
                   "the last task done, against its response bound; '-': no bound, see the note)")
    return out or ["no chain (none configured, and no task wiring in the configuration)"]


def rta_lines(rta: dict) -> list[str]:
    """The rerun of `check`'s analysis with the observed times, per task, and both verdicts."""
    out = []
    if rta.get("tasks"):
        w = max(len("released by"), *(len(r["released_by"] or "-") for r in rta["tasks"]))
        n = max(len("task"), *(len(r["name"]) for r in rta["tasks"]))
        out.append(f"{'task':<{n}} {'worker':>6}  {'released by':<{w}} {'obs wcet':>8} {'budget':>7} {'blocking':>8} "
                   f"{'response':>8} {'deadline':>8} {'verdict':<7} | {'check':>8} verdict")
        for r in rta["tasks"]:
            verdict = "ok" if r["schedulable"] else "MISS"
            conf = "ok" if r["configured_schedulable"] else "MISS"
            out.append(f"{r['name']:<{n}} {'-' if r['worker'] is None else r['worker']:>6}  "
                       f"{r['released_by'] or '-':<{w}} {r['observed_wcet_ms']:>8.2f} {r['budget_ms']:>7.2f} "
                       f"{r['blocking_ms']:>8.2f} {_f(r['response_time_ms'], 8)} {r['deadline_ms']:>8.2f} "
                       f"{verdict:<7} | {_f(r['configured_response_time_ms'], 8)} {conf}")
        out.append("(ms; response: worst case with the observed times; check: the same analysis with the budgets)")
    out.append(rta["verdict"])
    chk = rta.get("check")
    if chk is not None:
        out.append("with the configured budgets (rt-runtime check): " + (
            "schedulable" if chk["schedulable"] else f"not schedulable; can miss: {', '.join(chk['can_miss'])}"))
    return out


def graph_lines(graphs: dict[str, dict[str, int]], device: str) -> list[str]:
    """Per task, how its graph ran on the device: runs (warm-up included), CUDA graph captures, replays, eager fallbacks."""
    out = [f"graphs on {device} (captured: recorded once at set-up and replayed; fallback: a job run eagerly "
           "although a capture was wanted)",
           f"{'task':<20} {'runs':>7} {'captures':>8} {'replays':>8} {'fallbacks':>9} {'arena KiB':>10}"]
    for name, g in graphs.items():
        out.append(f"{name:<20} {g.get('jobs', 0):>7} {g.get('captures', 0):>8} {g.get('replays', 0):>8} "
                   f"{g.get('fallbacks', 0):>9} {g.get('arena_bytes', 0) / 1024:>10.0f}")
    return out


def format_report(rep: TraceReport, source: str = "", limit: int = 20) -> str:
    """The whole text report."""
    tr = rep.trace
    m = tr.meta
    head = (f"trace {source}: {len(tr.cols)} events, {tr.span_ns[0] / 1e6:.2f}..{tr.span_ns[1] / 1e6:.2f} ms, "
            f"policy {rep.policy}, {m.get('workers', '?')} worker(s), {m.get('clock', '?')} clock"
            + (f", {m['timing']} timing" if m.get("timing") else "")
            + (f", config {m['config']}" if m.get("config") else "") + (f", bag {m['bag']}" if m.get("bag") else ""))
    lines = [head, "", *task_table(rep), "", "ops (execution time, ms)", *op_lines(rep), "",
             f"deadline misses ({len(rep.misses)})", *miss_lines(rep, limit), "", "chains", *chain_lines(rep)]
    if rep.hardware is not None:
        from .hardware import format_hardware
        lines += ["", "the logical timeline above takes each op's budget; the hardware timeline beside it:",
                  *format_hardware({**rep.hardware, "missed": rep.hardware["missed"][:limit]})]
    if rep.rta is not None:
        lines += ["", "schedulability (the analysis of rt-runtime check, rerun with the observed times)",
                  *rta_lines(rep.rta)]
    if m.get("graphs"):
        lines += ["", *graph_lines(m["graphs"], str(m.get("device") or "cpu"))]
    if rep.notes:
        lines += ["", *("note: " + n for n in rep.notes)]
    return "\n".join(lines)
