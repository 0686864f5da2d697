"""End-to-end latency bounds of cause-effect chains (task τ1 writes what τ2 reads, and so on).

Three bounds, each for a chain (τ1, ..., τn) of periodic tasks on one processor:

* Davare et al., "Period optimization for hard real-time distributed automotive systems"
  (DAC 2007), implicit communication (read at start, write at finish):
  ``sum_i (T_i + R_i)``: each hop may just miss a sample (up to T_i) and then take up to R_i.

* Dürr, von der Brüggen, Chen & Chen, "End-to-end timing analysis of sporadic cause-effect
  chains in distributed systems" (EMSOFT / ACM TECS 2019), the logical-execution-time (LET)
  variants, with the LET interval of a job released at r being [r, r + D] as this runtime
  implements it (read at release, publish at the deadline; writes at an instant come before
  reads at that instant):

  - maximum reaction time (button to action: from an external event until the first chain
    output that reflects it): ``sum_i (T_i + D_i)``. The event can just miss a read of τ1
    (wait up to T1), τ1 publishes D1 later, τ2's next release follows within T2, and so on.
  - maximum data age (at the actuation, how old is the sample it is based on; the immediate
    backward job chain from the read of τ1's job to the publication of τn's job):
    ``sum_i (T_i + D_i) - T_n``: the output of τ_i that τ_{i+1} reads was published at most
    T_i before that read.

  Under LET these do not depend on response times, only on every job meeting its deadline, so
  they are given only when every task of the chain is schedulable.

An event-triggered first task is released by the very message that starts the chain, so its
wait term in the reaction time and Davare's bound is 0; it has no maximum inter-arrival time,
though, so the data age (where T_1 is how long its output stays current) is not bounded. An
event-triggered task further down has no bounded sampling wait, so no bound is given.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

from ..core.chain import Chain
from ..core.task import Task



@dataclass(frozen=True)
class ChainBounds:
    """Latency bounds of one chain in ns; None where a bound does not apply (``note`` says why)."""

    name: str
    tasks: tuple[str, ...]
    davare_ns: int | None
    let_reaction_ns: int | None
    let_data_age_ns: int | None
    note: str = ""
    # From the head's release to the chain's last output (``e2e.chain_latency``): visible under LET as
    # configured (a run-time chain, or one inside this one, as one interval: chain-LET), visible if
    # every task were its own LET interval (per-hop LET), and the last task finished (response times).
    chain_let_ns: int | None = None
    per_hop_let_ns: int | None = None
    response_ns: int | None = None

    def to_json(self) -> dict[str, object]:
        """JSON-ready dict, durations in ms."""
        ms = lambda ns: None if ns is None else ns / 1e6  # noqa: E731
        return {"name": self.name, "tasks": list(self.tasks), "davare_ms": ms(self.davare_ns),
                "let_reaction_ms": ms(self.let_reaction_ns), "let_data_age_ms": ms(self.let_data_age_ns),
                "chain_let_ms": ms(self.chain_let_ns), "per_hop_let_ms": ms(self.per_hop_let_ns),
                "response_ms": ms(self.response_ns), "note": self.note}


def _waits(tasks: Sequence[Task]) -> list[int]:
    """Sampling wait per hop: the period, or 0 for an event-triggered first task."""
    return [0 if (k == 0 and t.is_triggered) else t.period_ns for k, t in enumerate(tasks)]


def davare_bound(tasks: Sequence[Task], response_ns: Sequence[int]) -> int:
    """sum (T_i + R_i): Davare et al. 2007, implicit communication."""
    return sum(w + r for w, r in zip(_waits(tasks), response_ns))


def let_reaction_time(tasks: Sequence[Task]) -> int:
    """sum (T_i + D_i): Dürr et al. 2019, maximum reaction time under LET."""
    return sum(w + t.deadline for w, t in zip(_waits(tasks), tasks))


def let_data_age(tasks: Sequence[Task]) -> int | None:
    """sum (T_i + D_i) - T_n: Dürr et al. 2019, maximum data age under LET (at the actuation).

    Here T_i is how long a writer's output can stay current, so an event-triggered writer (no
    maximum inter-arrival) leaves the age unbounded: None.
    """
    if any(t.is_triggered for t in tasks[:-1]):
        return None
    return sum(t.period_ns + t.deadline for t in tasks) - tasks[-1].period_ns if tasks else 0


def chain_bounds(chain: Chain, tasks: Mapping[str, Task], response_ns: Mapping[str, int | None],
                 schedulable: Mapping[str, bool], runtime_chains: Sequence[Chain] = (),
                 writes: Mapping[str, Collection[str]] | None = None) -> ChainBounds:
    """All three bounds of one chain, given each task's response time and verdict.

    ``runtime_chains``: chains run as one LET interval; one that lies inside ``chain`` is one hop of
    it. ``writes``: task -> channels it writes (the config's wiring); with it, a task triggered by
    what the task before it writes waits for nothing (it is released by that very publish)."""
    members = [tasks[n] for n in chain.tasks]
    if chain.deadline_ns is not None:
        return _runtime_chain_bounds(chain, members, schedulable)
    inner = [c for c in runtime_chains if c.deadline_ns is not None and _inside(c.tasks, chain.tasks)]
    if inner or writes:
        return _hop_bounds(chain, tasks, schedulable, inner, writes or {})
    late_triggered = [t.name for t in members[1:] if t.is_triggered]
    if late_triggered:
        return ChainBounds(chain.name, chain.tasks, None, None, None,
                           f"task '{late_triggered[0]}' is event-triggered: without a maximum inter-arrival "
                           f"time its wait is unbounded")
    missing = [n for n in chain.tasks if response_ns.get(n) is None or not schedulable.get(n, False)]
    if missing:
        return ChainBounds(chain.name, chain.tasks, None, None, None,
                           f"task '{missing[0]}' may miss its deadline, so no bound holds")
    responses = [response_ns[n] for n in chain.tasks]
    age = let_data_age(members)
    note = "" if age is not None else \
        f"data age: task '{members[0].name}' is event-triggered, so its output can stay current indefinitely"
    return ChainBounds(chain.name, chain.tasks, davare_bound(members, responses),  # type: ignore[arg-type]
                       let_reaction_time(members), age, note)


def _runtime_chain_bounds(chain: Chain, members: Sequence[Task], schedulable: Mapping[str, bool]) -> ChainBounds:
    """A chain run as one LET interval (``core.chain``): its outputs appear exactly its deadline after the
    head's release, so the data age is the deadline and the reaction adds the head's sampling wait."""
    missing = [t.name for t in members if not schedulable.get(t.name, False)]
    if missing:
        return ChainBounds(chain.name, chain.tasks, None, None, None,
                           f"task '{missing[0]}' may miss its share of the chain's deadline, so no bound holds")
    d = int(chain.deadline_ns)   # type: ignore[arg-type]
    head = members[0]
    return ChainBounds(chain.name, chain.tasks, None, (0 if head.is_triggered else head.period_ns) + d, d,
                       f"run as one LET interval of {d / 1e6:g} ms (chain-LET)")


def _inside(part: Sequence[str], whole: Sequence[str]) -> bool:
    n = len(part)
    return any(tuple(whole[i:i + n]) == tuple(part) for i in range(len(whole) - n + 1))


def _hop_bounds(chain: Chain, tasks: Mapping[str, Task], schedulable: Mapping[str, bool], inner: Sequence[Chain],
                writes: Mapping[str, Collection[str]]) -> ChainBounds:
    """LET bounds hop by hop, where a hop is a task or a whole run-time chain (its deadline, its head's
    period and trigger), and a hop triggered by what the hop before it writes waits for nothing:
    reaction = sum(wait_k + D_k); data age = sum(D_k) + the time each hop's input stays current
    before the next reads it (the writer's period; 0 when the reader is released by its publish)."""
    hops: list[tuple[list[str], int, Task]] = []   # (task names, deadline, head task)
    i, names = 0, list(chain.tasks)
    while i < len(names):
        seg = next((c for c in inner if tuple(names[i:i + len(c.tasks)]) == tuple(c.tasks)), None)
        if seg is not None:
            hops.append((list(seg.tasks), int(seg.deadline_ns), tasks[seg.tasks[0]]))   # type: ignore[arg-type]
            i += len(seg.tasks)
        else:
            hops.append(([names[i]], tasks[names[i]].deadline, tasks[names[i]]))
            i += 1
    missing = [n for n in chain.tasks if not schedulable.get(n, False)]
    if missing:
        return ChainBounds(chain.name, chain.tasks, None, None, None,
                           f"task '{missing[0]}' may miss its deadline, so no bound holds")
    reaction, age = 0, 0
    age_note = ""
    for k, (members, d, head) in enumerate(hops):
        if k == 0:
            wait = 0 if head.is_triggered else head.period_ns
            current = 0
        else:
            prev_members, _, prev_head = hops[k - 1]
            fed = head.is_triggered and head.trigger in writes.get(prev_members[-1], ())
            if head.is_triggered and not fed and str(head.trigger).startswith(("all(", "any(")):
                return ChainBounds(chain.name, chain.tasks, None, None, None,
                                   f"task '{head.name}' is released by a join, which these formulas do not cover "
                                   f"(the chain-LET and per-hop columns do)")
            if head.is_triggered and not fed:
                return ChainBounds(chain.name, chain.tasks, None, None, None,
                                   f"task '{head.name}' is event-triggered by something other than "
                                   f"'{prev_members[-1]}': without a maximum inter-arrival time its wait is unbounded")
            wait = 0 if fed else head.period_ns
            current = 0 if fed else prev_head.period_ns
            if not fed and prev_head.is_triggered and not age_note:
                age_note = f"data age: task '{prev_head.name}' is event-triggered, so its output can stay current " \
                           f"indefinitely"
        reaction += wait + d
        age += current + d
    segs = ", ".join(f"{'+'.join(m)} as one LET interval of {d / 1e6:g} ms" for m, d, _ in hops if len(m) > 1)
    note = "; ".join(x for x in (segs, age_note) if x)
    return ChainBounds(chain.name, chain.tasks, None, reaction, None if age_note else age, note)
