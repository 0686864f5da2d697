"""`rt-runtime check`'s analysis of a whole system: the holistic fixed point (``cpa.holistic``) as a
``SchedulabilityReport``, and each chain's end-to-end latency from its head's release to its last output.

Three latencies per chain, hop by hop (a hop is a task, or a run-time chain inside the chain as one
LET interval), each hop adding its deadline D_k and, from the second on, how long its head waits
after the hop before it published:

* ``chain_let``: as configured (chain-LET where the config has run-time chains): a run-time chain
  alone is exactly its deadline;
* ``per_hop_let``: every task its own LET interval, with its own deadline (the config without chains);
* ``response``: as ``chain_let``, but the last hop's deadline replaced by its worst-case response time:
  when the last task has finished (what a stamp taken inside its op sees, before the LET publish).

The wait of hop k: 0 when its head is released by what hop k-1 publishes (plus, for a join, the wait
for its other inputs); its period when it is periodic (it may just have missed the publish, Dürr et
al. 2019); and when both are pinned to the runtime's clock (``cpa``), the exact longest time from a
publish of hop k-1 to the next release of hop k over the hyperperiod, offsets included. A head
released by something else has no bounded wait: no bound.
"""
from __future__ import annotations

import dataclasses
from typing import Collection, Mapping, Sequence

import numpy as np

from ..core.chain import Chain, apply_chains
from ..core.task import Task
from .chains import chain_bounds
from .cpa import Activation, HolisticResult, TaskTiming, runtime_order, holistic
from .schedulability import SchedulabilityReport


def _hops(chain: Chain, declared: Mapping[str, Task], run_chains: Sequence[Chain],
          per_task: bool) -> list[tuple[tuple[str, ...], int]]:
    """(members, deadline) per hop; run-time chains inside ``chain`` are one hop unless ``per_task``."""
    names, hops, i = list(chain.tasks), [], 0
    inner = [] if per_task else [c for c in run_chains if c.deadline_ns is not None]
    while i < len(names):
        seg = next((c for c in inner if tuple(names[i:i + len(c.tasks)]) == c.tasks), None)
        if seg is not None:
            hops.append((seg.tasks, int(seg.deadline_ns)))   # type: ignore[arg-type]
            i += len(seg.tasks)
        else:
            hops.append(((names[i],), declared[names[i]].deadline))
            i += 1
    return hops


def _wait(prev: tuple[tuple[str, ...], int], head: str, acts: Mapping[str, Activation],
          timings: Mapping[str, TaskTiming], declared: Mapping[str, Task], exact: bool) -> int | None:
    """How long ``head`` can wait after the hop ``prev`` published (module docstring); None: unbounded."""
    members, d = prev
    act = acts.get(head) or Activation("ingress" if declared[head].is_triggered else "periodic")
    fed = act.kind in ("trigger", "all") and members[-1] in act.writers
    if not fed and act.kind != "periodic":
        return None
    src, dst = timings.get(members[0]), timings.get(head)
    if exact and src is not None and dst is not None and src.release.times is not None \
            and dst.release.times is not None and dst.release.times.size:
        rel = dst.release.times
        pub = src.release.times + d
        # The instants are derived over four hyperperiods: the middle two are past the start-up and
        # every publish there has a next release.
        pub = pub[(pub >= rel[-1] // 4) & (pub < 3 * (rel[-1] // 4))]
        idx = np.searchsorted(rel, pub, side="left")
        if pub.size and np.all(idx < rel.size):
            return int((rel[idx] - pub).max())
    if not fed:
        return declared[head].period_ns
    others = [timings[w].release.model for w in act.writers if w != members[-1] and w in timings]
    return max((m.period_ns + m.jitter_ns for m in others), default=0)


def chain_latency(chain: Chain, declared: Mapping[str, Task], run_chains: Sequence[Chain],
                  acts: Mapping[str, Activation], timings: Mapping[str, TaskTiming],
                  policy: str) -> tuple[int | None, int | None, int | None, str]:
    """(chain_let, per_hop_let, response, note) in ns from the head's release (module docstring)."""
    out: list[int | None] = []
    note = ""
    members = {n for c in run_chains if c.deadline_ns is not None for n in c.tasks}
    for per_task in (False, True):
        hops = _hops(chain, declared, run_chains, per_task)
        total: int | None = hops[0][1]
        for k in range(1, len(hops)):
            # Per hop, a task that runs inside a run-time chain would be released otherwise: no exact wait.
            exact = not per_task or not any(n in members for n in (*hops[k - 1][0], hops[k][0][0]))
            w = _wait(hops[k - 1], hops[k][0][0], acts, timings, declared, exact)
            if w is None:
                note = note or f"task '{hops[k][0][0]}' is not released by '{hops[k - 1][0][-1]}' nor periodic: " \
                               f"its wait is unbounded"
                total = None
                break
            total = None if total is None else total + w + hops[k][1]
        out.append(total)
        if not per_task:
            last_members, last_d = hops[-1]
            late = [n for n in chain.tasks if not timings[n].schedulable]
            rs = [timings[n].response_ns for n in last_members]
            if late or total is None or any(r is None for r in rs):
                out.append(None)
                note = note or (f"task '{late[0]}' may miss its deadline, so no bound holds" if late else note)
            else:
                # Under edf every member of a run-time chain is due at the head's release + D: the instance's
                # last job finishes by the largest bound among them; under fixed priorities the last member's
                # bound already carries the jitter its predecessors' finishing put on its release.
                r = max(rs) if policy == "edf" else rs[-1]   # type: ignore[type-var]
                out.append(total - last_d + int(r))   # type: ignore[arg-type]
    return out[0], out[2], out[1], note


def analyze_system(tasks: Sequence[Task], policy: str, chains: Sequence[Chain] = (),
                   activations: Mapping[str, Activation] | None = None, on_finish: Mapping[str, bool] | None = None,
                   partition: Mapping[str, int] | None = None, longest_op: Mapping[str, int] | None = None,
                   writes: Mapping[str, Collection[str]] | None = None, steal: bool = False) -> SchedulabilityReport:
    """The holistic analysis of the task set (``cpa.holistic``) as one report: per task its derived release
    model (period, propagated jitter), worker, response time and verdict; per chain the LET bounds of
    ``chain_bounds`` and the three latencies above; per worker the tests that decided."""
    h: HolisticResult = holistic(tasks, policy, chains, activations, on_finish, partition, longest_op, steal)
    acts = dict(activations or {})
    by_worker = {r.name: (w, r) for w in h.workers for r in w.report.tasks}   # type: ignore[attr-defined]
    rank = {} if policy == "edf" else \
        {n: k + 1 for k, n in enumerate(runtime_order(apply_chains(tasks, chains, policy), policy))}   # the runtime's order
    results = []
    for t in h.timings:
        r = by_worker[t.name][1]
        offsets = next(x.offsets for x in h.workers if x.worker == t.worker)
        note = "" if t.schedulable else (r.note or "can miss its deadline") if offsets is None else \
            "with the release offsets, a window that ends at one of its deadlines needs more than its length"
        if t.schedulable and r.response_ns != t.response_ns:
            note = "bounded by its deadline: the demand test with the release offsets passes"
        results.append(dataclasses.replace(r, response_ns=t.response_ns, schedulable=t.schedulable, note=note,
                                           priority_rank=rank.get(t.name),
                                           released_by=t.release.how, worker=t.worker))
    declared = {t.name: t for t in tasks}
    timings = {t.name: t for t in h.timings}
    run_chains = [c for c in chains if c.deadline_ns is not None]
    resp = {t.name: t.response_ns for t in h.timings}
    ok = {t.name: t.schedulable for t in h.timings}
    bounds_out = []
    for c in chains:
        b = chain_bounds(c, declared, resp, ok, chains, writes)
        let, hop, r, why = chain_latency(c, declared, run_chains, acts, timings, policy)
        note = "; ".join(x for x in (b.note, why) if x and not (x is why and "may miss" in b.note))
        bounds_out.append(dataclasses.replace(b, chain_let_ns=let, per_hop_let_ns=hop, response_ns=r, note=note))
    info: dict[str, dict[str, object]] = {}
    for w in h.workers:
        rep = w.report   # type: ignore[attr-defined]
        entry: dict[str, object] = {"utilization": rep.utilization, "tasks": [r.name for r in rep.tasks],
                                    **{k: v for k, v in rep.bounds.items()}}
        if w.offsets is not None:
            entry["edf_offsets"] = {"passes": w.offsets.schedulable, "failed_at_ms": None if w.offsets.failed_at_ns
                                    is None else w.offsets.failed_at_ns / 1e6, "note": w.offsets.note}
        info[f"worker{w.worker}"] = entry
    notes = list(h.notes)
    if policy != "fp" and any(t.priority is not None for t in tasks):
        notes.append(f"'priority' is ignored under policy {policy}")
    if any(t.offset_ns for t in tasks):
        notes.append("release offsets are used: periodic tasks, and what their LET publishes release, are analysed at "
                     "their real release instants (docs/ANALYSIS.md)" if any(x.release.times is not None
                                                                             for x in h.timings) else
                     "offsets are ignored (the hyperperiod is too long to follow): the analysis assumes the worst "
                     "phasing, which covers any offsets")
    u = sum(r.utilization for r in results)   # with the derived rates, over all workers
    return SchedulabilityReport(policy, u, h.schedulable, tuple(results), tuple(bounds_out), info, tuple(notes))

