"""Task chains with one end-to-end deadline (system-level LET), and their deadline decomposition.

A chain (τ1, ..., τn) with deadline D runs as one logical-execution-time interval: a job of the
head τ1 released at r opens an *instance*; τk (k > 1) is released the instant τ(k-1)'s job of that
instance finishes (precedence at zero logical delay) and reads the outputs of the earlier members
of the instance directly; every member's outputs become visible to the rest of the system at
r + D, together (docs/CYCLE.md, "Chains"). Latency along the chain is then D, not the sum of one
deadline per hop.

Under EDF every member's job carries the chain's absolute deadline r + D: a hop does not restart
the deadline, so a late hop does not queue behind older, less urgent jobs. As exactly one member
of an instance is ready at any time from r until the chain is done, the instance is, to EDF, one
job of the members' summed budgets due at r + D; the analysis sees each member as a sporadic task
of the head's period with deadline D (their demand together is that job's).

Under fixed priorities (rm, dm, fp) each member k keeps its priority and gets a hop deadline: a
share D_k of D in proportion to its budget (``wcet``), the rounding remainder to the last member,
so that sum(D_k) = D. For the analysis member k is released with a jitter of D_1 + ... + D_(k-1)
after the chain's release and due D_1 + ... + D_k after it (``deadline_ns`` counts from the
chain's release, as the analysis counts deadlines from the arrival): if every member meets its hop
deadline, the chain meets D.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from .task import Task, TaskError


@dataclass(frozen=True)
class Chain:
    """A cause-effect chain: task names in data-flow order; with a deadline (ns), run as one LET interval."""

    name: str
    tasks: tuple[str, ...]
    deadline_ns: int | None = None   # None: a chain the analysis measures and bounds, tasks run as usual


def hop_deadlines(budgets_ns: Sequence[int], deadline_ns: int) -> list[int]:
    """Local deadlines D_k: shares of ``deadline_ns`` in proportion to the budgets, summing to it exactly."""
    total = sum(budgets_ns)
    out = [max(1, deadline_ns * b // total) for b in budgets_ns[:-1]]
    return out + [max(1, deadline_ns - sum(out))]


def decompose(tasks: Sequence[Task], chain: Chain, policy: str = "edf") -> list[Task]:
    """The chain's members as the scheduler and the analysis see them (module docstring): the head's
    period; under EDF the chain's deadline, else a hop deadline and the jitter of the hops before.

    TaskError when the chain cannot be run: a member missing, or a deadline longer than the head's
    period (instances would overlap). Budgets that add up to more than the deadline are the
    analysis's verdict (not schedulable), not an error.
    """
    if chain.deadline_ns is None or chain.deadline_ns <= 0 or len(chain.tasks) < 2:
        raise TaskError(chain.tasks[0] if chain.tasks else "?", "chain", f"chain '{chain.name}': a run-time chain "
                        f"needs two or more tasks and a positive deadline")
    if len(set(chain.tasks)) < len(chain.tasks):
        raise TaskError(chain.tasks[0], "chain", f"chain '{chain.name}': a task appears twice; chains are acyclic")
    by_name = {t.name: t for t in tasks}
    missing = [n for n in chain.tasks if n not in by_name]
    if missing:
        raise TaskError(missing[0], "chain", f"chain '{chain.name}': no task named {missing[0]!r}")
    members = [by_name[n] for n in chain.tasks]
    head = members[0]
    if chain.deadline_ns > head.period_ns:
        raise TaskError(head.name, "chain", f"chain '{chain.name}': deadline {chain.deadline_ns / 1e6:g} ms is "
                        f"longer than its head's {'minimum inter-arrival' if head.is_triggered else 'period'} "
                        f"({head.period_ns / 1e6:g} ms): instances would overlap")
    local = hop_deadlines([t.wcet_ns for t in members], chain.deadline_ns)
    out, before = [], 0
    for k, (t, d) in enumerate(zip(members, local)):
        edf = policy == "edf"
        out.append(dataclasses.replace(t, period_ns=head.period_ns, deadline_ns=chain.deadline_ns if edf else before + d,
                                       jitter_ns=0 if edf else before, trigger=head.trigger if k == 0 else None,
                                       offset_ns=head.offset_ns))
        before += d
    return out


def apply_chains(tasks: Sequence[Task], chains: Sequence[Chain], policy: str = "edf") -> list[Task]:
    """The task set with every run-time chain's members decomposed (``decompose``); other tasks unchanged."""
    chains = [c for c in chains if c.deadline_ns is not None]
    seen: dict[str, str] = {}
    for c in chains:
        for n in c.tasks:
            if n in seen:
                raise TaskError(n, "chain", f"task '{n}' is in two chains with deadlines ('{seen[n]}' and "
                                            f"'{c.name}'); a task belongs to at most one")
            seen[n] = c.name
    repl = {t.name: t for c in chains for t in decompose(tasks, c, policy)}
    return [repl.get(t.name, t) for t in tasks]
