"""Time redundancy: a job runs its graph on two or three copies, compares the outputs, and votes.

``RedundantExecutor`` has the interface the scheduler uses of a ``GraphExecutor`` (``steps``
yielding at every op boundary, ``outputs``, ``graph.ops``, ``stats()``), so dispatch, limited
preemption, the watchdog and the cost models need no special case. Each copy is a full
``GraphExecutor``: its own arenas (a fault in one copy's memory cannot reach another's) and its
own stream where the device has streams.

One job, ``dual``: copy 0, copy 1, compare. Equal: publish copy 0 (``COMPARE_MATCH``). Not equal,
or a copy raised: run copy 2 and vote; a copy that agrees with another wins (``COMPARE_VOTED``).
No majority (``COMPARE_NO_MAJORITY``): the task's fallback graph runs in the same job and its
outputs are published (for planning, the minimal-risk stop), so the deadline still sees a valid
output; without a fallback the job fails like an op error. ``triple`` runs all three copies
first. Every comparison is a ``COMPARE`` trace event (``a`` = verdict, ``b`` = copies run).

``invariants`` runs one copy and checks its outputs against the task's declared invariants
(``safety/invariants.py``): they hold, publish (``COMPARE_MATCH``); they do not, or the copy
raised, re-run the job on copy 1 (its own arenas) and check again: publish it (``COMPARE_VOTED``:
detected and masked) or, failing again, the fallback as above (``COMPARE_NO_MAJORITY``). Under
``dual``/``triple`` declared checks apply to the voted outputs. Each check is one step of the
job, booked as the op ``invariants`` (declared cost 0: the spec's ``cost`` is in the task's budget).

Inputs are checked once against their contracts, before any copy runs: a bad input is the same
for every copy (a common-mode fault), so it fails the job rather than a vote.
"""
from __future__ import annotations

from typing import Any, Callable, Generator, Iterator, Mapping, Sequence

from ..core.graph import Graph
from ..core.op import Op
from ..device.base import Device
from ..exec.executor import GraphExecutor
from ..sched.events import COMPARE_MATCH, COMPARE_NO_MAJORITY, COMPARE_VOTED
from .compare import outputs_equal, vote
from .invariants import referenced, referenced_inputs, violation
from .screen import Screen
from .spec import RedundancySpec


def _no_op() -> None:
    """The check step's op does nothing itself: the executor checks between steps."""


class RedundancyFault(RuntimeError):
    """The copies of a redundant job had no majority and the task has no fallback graph."""


class StepOps(Sequence[Op]):
    """``graph.ops`` as the scheduler sees it: step i of the current job is the op that step ran.

    Its length is the most steps a job can take (three copies and the fallback), so the scheduler's
    last-op index is never reached early; a job that needs fewer steps simply ends.
    """

    def __init__(self, ex: "RedundantExecutor", primary: Graph) -> None:
        self.ex, self.primary = ex, primary.ops

    def __len__(self) -> int:
        return self.ex.capacity

    def __getitem__(self, i: int) -> Op:  # type: ignore[override]
        trace = self.ex.trace
        if 0 <= i < len(trace):
            return trace[i]
        return self.primary[i % len(self.primary)]   # a step not run (yet): its nominal op


class StepGraph:
    """What the scheduler and warm-up read of ``executor.graph``: name, contracts, per-step ops."""

    def __init__(self, ex: "RedundantExecutor", graph: Graph) -> None:
        self.name = graph.name
        self.inputs = graph.inputs
        self.outputs = graph.outputs
        self.capturable = False
        self.ops = StepOps(ex, graph)
        self.primary = graph


class RedundantExecutor:
    """Runs each job on ``spec.copies`` copies (a third to vote under ``dual``), each in its own arenas."""

    def __init__(self, graph: Graph, spec: RedundancySpec, fallback: Graph | None = None,
                 device: Device | None = None, *, owner: str | None = None, check_inputs: bool = True,
                 capture: bool = False, urgency: float = 0.0) -> None:
        if spec.compare == "exact" and spec.mode != "invariants":
            loose = [o.name for o in graph.ops if not o.deterministic]
            if loose:
                raise ValueError(f"graph '{graph.name}': exact comparison needs deterministic ops; {loose} are "
                                 "not (use compare: tolerance with atol/rtol)")
        names = {s.name for s in graph.outputs}
        missing = sorted((referenced(spec.checks) - names) | (referenced_inputs(spec.checks) - names
                                                                - {s.name for s in graph.inputs}))
        if missing:
            raise ValueError(f"graph '{graph.name}': checks name {missing}, which are not outputs of the graph "
                             f"(its outputs: {sorted(s.name for s in graph.outputs)})")
        self.spec = spec
        self.owner = owner or graph.name
        self.check_inputs = check_inputs
        runs = spec.worst_case_factor
        self.copies = [GraphExecutor(graph, device, owner=f"{self.owner}/copy{k}", check_inputs=False,
                                     capture=capture, urgency=urgency) for k in range(runs)]
        self.device = self.copies[0].device
        self.fallback = GraphExecutor(fallback, self.device, owner=f"{self.owner}/vote_fallback",
                                      check_inputs=False, urgency=urgency) if fallback is not None else None
        # Declared cost 0: the checks' CPU time is in the task's budget (wcet + cost), which budget timing
        # spreads over the graph's ops; measured and calibrated timing book what the step really took.
        self.check_op = Op("invariants", _no_op, (), (), cost_us=0.0)
        checks = runs if spec.mode == "invariants" else 1 if spec.checks else 0
        self.capacity = runs * len(graph.ops) + checks + (len(fallback.ops) if fallback is not None else 0)
        self._host: list[dict[str, Any] | None] = [None] * runs   # per copy: its outputs as numpy views
        self._read = sorted(referenced_inputs(spec.checks) - names)   # inputs the checks compare with
        # The checks compiled once into fused passes; the checks themselves run only when it flags
        # something (they give the verdict and its message).
        self.screen = Screen(spec.checks)
        self._inputs: Mapping[str, Any] = {}
        self.last_violation = ""
        self.graph = StepGraph(self, graph)
        self.outputs: Mapping[str, Any] = self.copies[0].outputs
        self.trace: list[Op] = []            # the op each step of the current job ran
        self.last_verdict = COMPARE_MATCH
        self.last_failed: list[int] = []     # copies that raised in the last job
        self.c = dict.fromkeys(("jobs", "matches", "voted", "no_majority", "copy_errors", "fallback_outputs",
                                "violations"), 0)
        self._task: str = self.owner
        self.on_compare: Callable[[int, int], None] | None = None   # the compare hook (attach)

    def attach(self, task: str, on_compare: Callable[[int, int], None]) -> None:
        """Declare where each job's comparison goes: ``on_compare(verdict, copies)``, called once per job
        where the verdict is known (the Runtime traces it as the job's COMPARE event; parallel commit
        records it for its settle point)."""
        self._task, self.on_compare = task, on_compare

    def booked_ops(self) -> list[Op]:
        """The steps one job takes when all is well (its nominal runs and its check step): what a schedule
        booked ahead of running books for it, whatever its results then ask for (sched.parallel)."""
        ops = list(self.graph.primary.ops) * self.spec.nominal_factor
        if self.spec.mode == "invariants" or self.spec.checks:
            ops.append(self.check_op)
        return ops

    # ---- one job ----------------------------------------------------------------------------
    def wait_events(self, events: list[Any]) -> None:
        """Every copy's (and the vote fallback's) stream waits on ``events`` before its next ops."""
        for ex in self._executors():
            ex.wait_events(events)

    def in_flight(self) -> list[Any]:
        """Events after what each copy launched so far."""
        return [e for ex in self._executors() for e in ex.in_flight()]

    def _executors(self) -> list[GraphExecutor]:
        return self.copies + ([self.fallback] if self.fallback is not None else [])

    def steps(self, inputs: Mapping[str, Any]) -> Iterator[int]:
        """Run one job: the copies, the comparison, a vote if needed; yields a step index per op."""
        if self.check_inputs:
            g = self.graph.primary
            for spec in g.inputs:
                spec.check(inputs.get(spec.name), op="<bind>", graph=g.name)
        self.trace.clear()
        self.last_failed = []
        self._inputs = inputs
        done: list[int] = []
        if self.spec.mode == "invariants":
            winner, verdict = yield from self._checked(inputs, done)
        else:
            winner, verdict = yield from self._voted(inputs, done)
        self.last_verdict = verdict
        self.c["jobs"] += 1
        self.c[("matches", "voted", "no_majority")[verdict]] += 1
        if self.on_compare is not None:
            self.on_compare(verdict, len(self.last_failed) + len(done))
        if winner is not None:
            self.outputs = self.copies[winner].outputs
            return
        if self.fallback is None:
            if self.spec.mode == "invariants":
                raise RedundancyFault(f"task '{self._task}': its outputs broke a declared invariant in the run "
                                      f"and in the re-run ({self.last_violation or 'a copy raised'})")
            raise RedundancyFault(f"task '{self._task}': no two of {len(done)} completed copies agree "
                                  f"({len(self.last_failed)} raised)")
        yield from self._run_fallback(inputs)
        self.outputs = self.fallback.outputs
        self.c["fallback_outputs"] += 1

    def _voted(self, inputs: Mapping[str, Any], done: list[int]) -> Generator[int, None, tuple[int | None, int]]:
        """dual / triple: the copies, compared, a vote if needed; then the declared checks on the winner."""
        first = self.spec.copies
        for k in range(first):
            yield from self._run(k, inputs, done)
        agree = self._agree
        if first == 2 and done == [0, 1] and agree(0, 1):
            winner: int | None = 0
            verdict = COMPARE_MATCH
        else:
            if first == 2:
                yield from self._run(2, inputs, done)
            winner = vote(done, agree)
            unanimous = len(done) == 3 and winner is not None and agree(0, 2) and agree(1, 2)
            verdict = COMPARE_MATCH if unanimous else COMPARE_VOTED if winner is not None else COMPARE_NO_MAJORITY
        if winner is not None and self.spec.checks:
            bad = self._violation(winner)
            yield self._check_step()
            if bad:   # the majority agrees on something impossible: a common-mode fault, not a vote
                winner, verdict = None, COMPARE_NO_MAJORITY
        return winner, verdict

    def _checked(self, inputs: Mapping[str, Any], done: list[int]) -> Generator[int, None, tuple[int | None, int]]:
        """invariants: one copy, checked; a violation (or a raise) re-runs the job once on copy 1."""
        for k in (0, 1):
            yield from self._run(k, inputs, done)
            bad = self._violation(k) if k in done else "the copy raised"
            yield self._check_step()
            if not bad:
                return k, COMPARE_MATCH if k == 0 else COMPARE_VOTED
            self.last_violation = bad
        return None, COMPARE_NO_MAJORITY

    def _violation(self, k: int) -> str:
        """What of copy ``k``'s outputs breaks a declared invariant ('' when they all hold)."""
        host = self._host[k]
        if host is None or self.device.kind != "cpu":
            host = {n: _numpy(x) for n, x in self.copies[k].outputs.items()}
            if self.device.kind == "cpu":   # arena views: the same memory every job
                self._host[k] = host
        if self._read:
            host = {**host, **{n: _numpy(self._inputs[n]) for n in self._read}}
        if self.screen.holds(host):
            return ""
        why = violation(host, self.spec.checks)
        if why is not None:
            self.c["violations"] += 1
            self.last_violation = why
        return why or ""

    def _check_step(self) -> int:
        self.trace.append(self.check_op)
        return len(self.trace) - 1

    def _run(self, k: int, inputs: Mapping[str, Any], done: list[int]) -> Iterator[int]:
        """Copy ``k``, op by op; an op that raises marks the copy failed (a replica fault), not the job."""
        ex = self.copies[k]
        ops = ex.graph.ops
        trace = self.trace
        gen = ex.steps(inputs)
        ran = 0
        try:
            for i in gen:
                ran = i + 1
                trace.append(ops[i])
                yield len(trace) - 1
        except Exception:  # noqa: BLE001 - the vote decides; the fault is counted and traced
            self.c["copy_errors"] += 1
            self.last_failed.append(k)
            trace.append(ops[min(ran, len(ops) - 1)])   # the op that raised ran: book it
            yield len(trace) - 1
            return
        finally:
            gen.close()
        done.append(k)

    def _run_fallback(self, inputs: Mapping[str, Any]) -> Iterator[int]:
        ex = self.fallback
        assert ex is not None
        ops = ex.graph.ops
        for i in ex.steps({s.name: inputs[s.name] for s in ex.graph.inputs}):
            self.trace.append(ops[i])
            yield len(self.trace) - 1

    def _agree(self, i: int, j: int) -> bool:
        return outputs_equal(self.copies[i].outputs, self.copies[j].outputs, self.spec)

    def run(self, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
        """Run one job to completion; returns the published output views (valid until the next job)."""
        for _ in self.steps(inputs):
            pass
        return self.outputs

    # ---- facts ------------------------------------------------------------------------------
    @property
    def executors(self) -> list[GraphExecutor]:
        """Every executor this one owns (copies, then the in-job fallback)."""
        return self.copies + ([self.fallback] if self.fallback is not None else [])

    @property
    def arena_bytes(self) -> int:
        """Bytes reserved in all copies' arenas."""
        return sum(e.arena_bytes for e in self.executors)

    def stats(self) -> dict[str, int]:
        """Comparison counters plus the copies' executor counters, summed."""
        out = dict(self.c)
        for e in self.executors:
            for k, v in e.stats().items():
                if k != "jobs":
                    out[k] = out.get(k, 0) + v
        return out

    def __repr__(self) -> str:
        return f"RedundantExecutor({self.graph.name!r}, {self.spec.mode}, {self.spec.compare}, " \
               f"{self.arena_bytes} B in arenas)"


def _numpy(x: Any) -> Any:
    """A host numpy view (CPU tensors and arrays) or copy (device tensors) of one output."""
    if hasattr(x, "detach"):
        if x.device.type == "cpu" and not x.requires_grad:
            return x.numpy()   # one call: each torch call costs tens of us with the caches cold after a job
        return x.detach().cpu().numpy()
    return x


class Redundant:
    """A ``TaskBinding.executor`` factory: the Runtime calls it to build a task's redundant executor."""

    def __init__(self, spec: RedundancySpec) -> None:
        self.spec = spec

    def __call__(self, binding: Any, device: Device | None, *, owner: str, check_inputs: bool = True,
                 capture: bool = False, urgency: float = 0.0) -> RedundantExecutor:
        return RedundantExecutor(binding.graph, self.spec, binding.fallback, device, owner=owner,
                                 check_inputs=check_inputs, capture=capture, urgency=urgency)

    def __repr__(self) -> str:
        return f"Redundant({self.spec.mode}, {self.spec.compare})"
