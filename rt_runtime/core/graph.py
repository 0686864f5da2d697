"""Graph: a validated DAG of ops with a fixed execution order.

Everything that can be wrong with a graph is found when it is built, never mid-job: cycles (the
error names the cycle), dangling inputs, producer/consumer spec mismatches, unused outputs. The
execution order is a topological order fixed once, with ties broken by declaration order, so two
builds of the same graph run their ops in the same order.

``pad`` is a graph's promise about a symbolic-size input: rows filled with that value (NaN, say)
are ignored by its ops, so a job's outputs are the same whether the input has its own rows or is
padded to its bound. A graph that promises it for every symbolic input is ``static``: one CUDA graph
captured at the bounds replays every job (``exec.executor``), and the CPU twin checks the promise.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from .op import Op
from .tensor import ContractError, Dim, TensorSpec


class GraphError(ContractError):
    """A graph that cannot be run as declared."""

    def __init__(self, graph: str, message: str) -> None:
        ValueError.__init__(self, f"graph '{graph}': {message}")
        self.graph, self.op, self.tensor = graph, None, "-"
        self.field, self.expected, self.found = "graph", "", message


@dataclass(frozen=True)
class CriticalPath:
    """The longest chain of ops by estimated cost."""

    ops: tuple[str, ...]
    cost_us: float


class Graph:
    """A DAG of ops, the unit of work one job of a task runs."""

    def __init__(self, name: str, ops: Sequence[Op], inputs: Iterable[TensorSpec],
                 outputs: Iterable[str | TensorSpec], pad: Mapping[str, float] | None = None) -> None:
        self.name = name
        self.inputs: tuple[TensorSpec, ...] = tuple(inputs)
        out_names = [o.name if isinstance(o, TensorSpec) else o for o in outputs]
        ops = tuple(ops)
        if not ops:
            raise GraphError(name, "has no ops")
        seen: set[str] = set()
        for o in ops:
            if not isinstance(o, Op):
                raise GraphError(name, f"expected Op objects, found {type(o).__name__}")
            if o.name in seen:
                raise GraphError(name, f"two ops are named '{o.name}'")
            seen.add(o.name)

        # Who produces each tensor, and with which contract.
        self.specs: dict[str, TensorSpec] = {}
        self.producer: dict[str, str] = {}
        for s in self.inputs:
            if s.name in self.specs:
                raise GraphError(name, f"graph input '{s.name}' declared twice")
            self.specs[s.name] = s
        for o in ops:
            for s in o.outputs:
                if s.name in self.producer:
                    raise GraphError(name, f"tensor '{s.name}' is written by both op '{self.producer[s.name]}' "
                                           f"and op '{o.name}'")
                if s.name in self.specs:
                    raise GraphError(name, f"op '{o.name}' writes '{s.name}', which is a graph input")
                self.producer[s.name] = o.name
                self.specs[s.name] = s

        # Every input is produced somewhere, with the contract its consumer expects.
        consumers: dict[str, list[str]] = {t: [] for t in self.specs}
        for o in ops:
            for s in o.inputs:
                have = self.specs.get(s.name)
                if have is None:
                    raise GraphError(name, f"op '{o.name}' reads '{s.name}', which no op produces and which is "
                                           f"not a graph input (dangling input)")
                bad = have.compatible(s)
                if bad is not None:
                    src = f"op '{self.producer[s.name]}'" if s.name in self.producer else "the graph input"
                    raise ContractError(bad, f"{getattr(s, bad)} (as op '{o.name}' reads it)",
                                        f"{getattr(have, bad)} (as {src} declares it)",
                                        tensor=s.name, op=o.name, graph=name)
                consumers[s.name].append(o.name)
        for t in out_names:
            if t not in self.producer:
                raise GraphError(name, f"graph output '{t}' is produced by no op")
        self.outputs: tuple[TensorSpec, ...] = tuple(self.specs[t] for t in out_names)
        for t, users in consumers.items():
            if not users and t in self.producer and t not in out_names:
                raise GraphError(name, f"op '{self.producer[t]}' writes '{t}', which no op reads and which is "
                                       f"not a graph output (unused output)")
        self.consumers = consumers

        self.ops: tuple[Op, ...] = self._topological(ops)
        self.op_index = {o.name: i for i, o in enumerate(self.ops)}
        self.pad: dict[str, float] = self._check_pad(dict(pad or {}))

    def _check_pad(self, pad: dict[str, float]) -> dict[str, float]:
        """``pad``: per graph input whose first dim is symbolic, the value of rows the ops ignore."""
        for t, v in pad.items():
            spec = self.specs.get(t)
            if spec is None or t in self.producer:
                raise GraphError(self.name, f"pad names '{t}', which is not a graph input")
            if not spec.shape or not isinstance(spec.shape[0], Dim):
                raise GraphError(self.name, f"pad names '{t}', whose first dim is not symbolic "
                                            f"(shape {spec.shape_str()}): there is nothing to pad")
            if not isinstance(v, (int, float)):
                raise GraphError(self.name, f"pad of '{t}': expected a number, found {v!r}")
        return pad

    def _topological(self, ops: tuple[Op, ...]) -> tuple[Op, ...]:
        """Kahn's algorithm, ties broken by declaration order; a leftover means a cycle."""
        position = {o.name: i for i, o in enumerate(ops)}
        deps = {o.name: {self.producer[s.name] for s in o.inputs if s.name in self.producer} for o in ops}
        users: dict[str, list[str]] = {o.name: [] for o in ops}
        for o, ds in deps.items():
            for d in ds:
                users[d].append(o)
        indegree = {o: len(ds) for o, ds in deps.items()}
        ready = [position[o] for o, n in indegree.items() if n == 0]
        heapq.heapify(ready)
        order: list[Op] = []
        while ready:
            o = ops[heapq.heappop(ready)]
            order.append(o)
            for u in users[o.name]:
                indegree[u] -= 1
                if indegree[u] == 0:
                    heapq.heappush(ready, position[u])
        if len(order) < len(ops):
            left = {o for o, n in indegree.items() if n > 0}
            raise GraphError(self.name, "has a cycle: " + " -> ".join(self._find_cycle(left, deps)))
        return tuple(order)

    @staticmethod
    def _find_cycle(left: set[str], deps: dict[str, set[str]]) -> list[str]:
        """Walk dependencies inside the blocked set until a node repeats: that loop is a cycle."""
        node = min(left)
        path: list[str] = []
        index: dict[str, int] = {}
        while node not in index:
            index[node] = len(path)
            path.append(node)
            node = min(d for d in deps[node] if d in left)
        cycle = path[index[node]:] + [node]
        cycle.reverse()  # dependency order reads as data flow: producer -> consumer
        return cycle

    # ---- derived facts ----------------------------------------------------------------------
    def steps(self) -> list[tuple[str, list[str], list[str]]]:
        """The execution order as (op, inputs, outputs) names: what lifetime analysis reads."""
        return [(o.name, list(o.input_names), list(o.output_names)) for o in self.ops]

    def critical_path(self, cost_us: dict[str, float] | None = None) -> CriticalPath:
        """Longest chain of ops by cost (the op's estimate unless ``cost_us`` overrides it)."""
        cost = {o.name: (cost_us or {}).get(o.name, o.cost_us) for o in self.ops}
        best: dict[str, tuple[float, str | None]] = {}
        for o in self.ops:
            preds = [self.producer[s.name] for s in o.inputs if s.name in self.producer]
            prev = max(preds, key=lambda p: (best[p][0], -self.op_index[p]), default=None)
            best[o.name] = (cost[o.name] + (best[prev][0] if prev else 0.0), prev)
        end = max(best, key=lambda n: (best[n][0], -self.op_index[n]))
        chain = []
        node: str | None = end
        while node is not None:
            chain.append(node)
            node = best[node][1]
        return CriticalPath(tuple(reversed(chain)), best[end][0])

    def longest_op_us(self, cost_us: dict[str, float] | None = None) -> float:
        """The longest single op: the blocking term limited preemption adds to higher priorities."""
        return max((cost_us or {}).get(o.name, o.cost_us) for o in self.ops)

    @property
    def capturable(self) -> bool:
        """True when every op may be recorded into one CUDA graph."""
        return all(o.capturable for o in self.ops)

    @property
    def static(self) -> bool:
        """True when one captured graph serves every job: each symbolic input is padded to its bound."""
        return all(s.is_static or s.name in self.pad for s in self.inputs)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.ops)} ops, in={[s.name for s in self.inputs]}, " \
               f"out={[s.name for s in self.outputs]})"
