"""Fault injection: what to inject (a plan drawn from a seed) and how (op and ingress wrappers).

Op faults wrap ``Op.fn`` in a copy of a task's graphs; the wrapper is a pass-through until an
armed injection names its task and op, then applies it once, on the first call at or after the
injection's logical time (for a redundant task that is the first copy of the job):

* ``bitflip``: silent data corruption; the op runs, then one bit of one of its outputs flips.
* ``exception``: the op raises instead of running.
* ``overrun``: the op runs, and takes ``magnitude`` x the stall threshold longer (virtual time).
* ``hang``: the op does not return. On a VirtualClock a hang is modelled as the stall watchdog
  ending it: the op takes the task's stall threshold, a ``STALL`` is reported, and the op fails.

Ingress faults change a decoded sensor message before it is pushed: ``nan_input`` (NaN/Inf
values), ``drop``, ``delay`` (pushed later than stamped), ``corrupt`` (bytes of the serialized
message flipped, then decoded again: a decode error or garbage values) and ``arena`` (more rows
than the consuming graph's planned bound: the contract check at binding rejects it).
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..core.graph import Graph
from ..core.op import Op

OP_CLASSES = ("bitflip", "exception", "overrun", "hang")
INGRESS_CLASSES = ("nan_input", "drop", "delay", "corrupt", "arena")
CLASSES = OP_CLASSES + INGRESS_CLASSES


class InjectedFault(RuntimeError):
    """An exception an op raised because a fault was injected."""


class OpHung(InjectedFault):
    """An op that did not return, ended by the stall watchdog (virtual-time model of a hang)."""


@dataclass(frozen=True)
class Injection:
    """One fault: its class, when it is armed, where it lands, and its drawn parameters."""

    id: int
    cls: str
    t_ns: int                 # armed from this logical time on
    target: str               # a task (op faults) or an ingress channel (ingress faults)
    op: int = -1              # op index in the task's primary graph (op faults)
    tensor: int = 0           # which output of the op (bitflip)
    element: float = 0.0      # which element, as a fraction of the tensor's size
    bit: int = 0              # which bit of the element
    magnitude: float = 1.0    # overrun: x stall threshold; delay: ns; nan_input: values hit
    seed: int = 0             # anything else random (corrupt bytes)
    field: str = ""           # bitflip: "sign", "exponent", "mantissa" or "integer" ("": any bit)

    def describe(self) -> str:
        """One line for logs and reports."""
        where = f"{self.target}" + (f" op {self.op}" if self.op >= 0 else "")
        what = f" ({self.field} bit)" if self.field else ""
        return f"#{self.id} {self.cls}{what} at {self.t_ns / 1e9:.3f}s on {where}"


# Bit flips cycle through these fields, so every run covers each (a float's sign, exponent and
# mantissa; an integer output's bits, e.g. a count's).
FIELDS = ("sign", "exponent", "mantissa", "integer")
_FLOAT_BITS = {4: (31, (23, 30), (0, 22)), 8: (63, (52, 62), (0, 51)), 2: (15, (10, 14), (0, 9))}


def plan(cls: str, n: int, targets: Sequence[str], rng: np.random.Generator, t_range: tuple[int, int],
         graphs: Mapping[str, Graph] | None = None, first_id: int = 0, outputs_only: bool = False,
         magnitude: tuple[float, float] = (0.3, 0.9), fields: bool = False) -> list[Injection]:
    """``n`` injections of one class, drawn from ``rng`` (deterministic from its seed).

    Op faults pick a task among ``targets`` and an op of its graph (``outputs_only``: an op that
    writes a graph output, and one of those outputs); ingress faults pick a channel. ``fields``
    (bit flips): injection i flips a bit of field ``FIELDS[i % 4]`` (sign, exponent, mantissa of a
    floating-point output, or any bit of an integer one).
    """
    if cls not in CLASSES:
        raise ValueError(f"unknown fault class {cls!r}; expected one of {', '.join(CLASSES)}")
    if not targets:
        raise ValueError(f"fault class {cls}: no targets")
    out = []
    for i in range(n):
        target = str(targets[int(rng.integers(len(targets)))])
        t = int(rng.integers(t_range[0], t_range[1] + 1))
        op = tensor = 0
        field = FIELDS[i % len(FIELDS)] if cls == "bitflip" and fields else ""
        if cls in OP_CLASSES:
            g = (graphs or {})[target]
            outs = {s.name for s in g.outputs}
            # (op, output index) pairs; with fields, only tensors of the wanted kind (float or integer)
            pairs = [(k, j) for k, o in enumerate(g.ops) for j, spec in enumerate(o.outputs)
                     if not outputs_only or spec.name in outs]
            if field:
                want = [(k, j) for k, j in pairs if _is_float(g.ops[k].outputs[j].dtype) == (field != "integer")]
                if not want:   # a task without integer outputs: its floats' mantissa
                    field, want = "mantissa", pairs
                pairs = want
            if field:
                op, tensor = pairs[int(rng.integers(len(pairs)))]
            else:
                choices = [k for k, o in enumerate(g.ops) if not outputs_only or outs & set(o.output_names)]
                op = choices[int(rng.integers(len(choices)))]
                pick = [k for k, nm in enumerate(g.ops[op].output_names) if not outputs_only or nm in outs]
                tensor = pick[int(rng.integers(len(pick)))] if pick else 0
        lo, hi = magnitude
        out.append(Injection(first_id + i, cls, t, target, op if cls in OP_CLASSES else -1, tensor,
                             float(rng.random()), int(rng.integers(64)), float(rng.uniform(lo, hi)),
                             int(rng.integers(1 << 31)), field))
    return out


def _is_float(dtype: str) -> bool:
    return str(dtype).startswith(("float", "bfloat"))


def field_bit(bit: int, size: int, field: str) -> int:
    """The bit (0 = least significant) of an element of ``size`` bytes that ``bit`` draws in ``field``."""
    if field in ("sign", "exponent", "mantissa") and size in _FLOAT_BITS:
        sign, exp, man = _FLOAT_BITS[size]
        if field == "sign":
            return sign
        lo, hi = exp if field == "exponent" else man
        return lo + bit % (hi - lo + 1)
    return bit % (8 * size)


def flip_bit(x: Any, element: float, bit: int, field: str = "") -> int:
    """Flip one bit of ``x`` in place (element chosen by fraction, bit modulo its width, or within
    ``field``); returns the byte."""
    if isinstance(x, np.ndarray):
        flat, n, size = x.reshape(-1).view(np.uint8), x.size, x.itemsize
    else:
        flat, n, size = x.reshape(-1).view(__import__("torch").uint8), x.numel(), x.element_size()
    e = min(int(element * n), n - 1)
    if field:
        bit = field_bit(bit, size, field)
    byte = e * size + (bit // 8) % size
    flat[byte] ^= 1 << (bit % 8)
    return byte


class Injector:
    """Holds the armed injections and wraps graphs so their ops apply them."""

    def __init__(self) -> None:
        self.armed: list[Injection] = []
        self.fired: list[tuple[Injection, int]] = []          # (injection, logical time it landed)
        self.extra_ns: dict[tuple[str, str], int] = defaultdict(int)   # (task, op name) -> virtual ns
        self.now: Callable[[], int] = lambda: 0
        self.stall_ns: Callable[[str], int] = lambda task: 0
        self.on_hang: Callable[[str, int], None] | None = None          # (task, kill time)

    def arm(self, injections: Sequence[Injection], now: Callable[[], int], stall_ns: Callable[[str], int]) -> None:
        """Start a run: these injections, this clock, this stall threshold per task."""
        self.armed = [i for i in injections if i.cls in OP_CLASSES]
        self.fired = []
        self.extra_ns.clear()
        self.now, self.stall_ns = now, stall_ns

    def wrap(self, task: str, graph: Graph, primary: bool = True) -> Graph:
        """A copy of ``graph`` whose ops consult this injector (only the primary graph is a target)."""
        ops = [dataclasses.replace(o, fn=self._wrapper(task, k if primary else -1 - k, o))
               for k, o in enumerate(graph.ops)]
        return Graph(graph.name, ops, graph.inputs, [s.name for s in graph.outputs])

    def _wrapper(self, task: str, index: int, op: Op) -> Callable[..., None]:
        fn, n_in = op.fn, len(op.inputs)

        def call(*args: Any) -> None:
            if self.armed:
                inj = self._take(task, index)
                if inj is not None:
                    return self._apply(inj, task, op, fn, n_in, args)
            return fn(*args)

        return call

    def _take(self, task: str, index: int) -> Injection | None:
        now = self.now()
        for k, inj in enumerate(self.armed):
            if inj.target == task and inj.op == index and inj.t_ns <= now:
                del self.armed[k]
                self.fired.append((inj, now))
                return inj
        return None

    def _apply(self, inj: Injection, task: str, op: Op, fn: Callable[..., None], n_in: int, args: tuple) -> None:
        if inj.cls == "exception":
            raise InjectedFault(f"injected: op '{op.name}' of task '{task}' raised")
        if inj.cls == "hang":
            stall = self.stall_ns(task)
            self.extra_ns[(task, op.name)] += stall
            if self.on_hang is not None:
                self.on_hang(task, self.now() + stall)
            raise OpHung(f"injected: op '{op.name}' of task '{task}' hung; ended by the stall watchdog "
                         f"after {stall / 1e6:.1f} ms")
        fn(*args)
        if inj.cls == "bitflip":
            outs = args[n_in:n_in + len(op.outputs)]
            flip_bit(outs[min(inj.tensor, len(outs) - 1)], inj.element, inj.bit, inj.field)
        elif inj.cls == "overrun":
            self.extra_ns[(task, op.name)] += int(inj.magnitude * self.stall_ns(task))
        return None

    def cost(self, base: Callable[[str, int, int, Op, int], int]) -> Callable[[str, int, int, Op, int], int]:
        """A cost model: ``base`` plus the virtual time injected overruns and hangs add to their op."""
        extra = self.extra_ns

        def cost(task: str, job: int, i: int, op: Op, measured: int) -> int:
            add = extra.pop((task, op.name), 0) if extra else 0
            return base(task, job, i, op, measured) + add

        if hasattr(base, "measure"):   # how the inline driver measures ops for ``base`` (wall or CPU time)
            cost.measure = base.measure   # type: ignore[attr-defined]
        if getattr(base, "logical", False):   # budget timing: the schedule depends on no machine
            cost.logical = True   # type: ignore[attr-defined]
        return cost


# ---- ingress faults ---------------------------------------------------------------------------
def poison(value: Mapping[str, np.ndarray], inj: Injection) -> dict[str, np.ndarray]:
    """``nan_input``: a copy of a decoded message with some values NaN or +-Inf."""
    rng = np.random.default_rng(inj.seed)
    out = {k: np.array(v, copy=True) for k, v in value.items()}
    floats = [k for k, v in out.items() if np.issubdtype(v.dtype, np.floating) and v.size]
    if not floats:
        return out
    a = out[floats[0]].reshape(-1)
    for j in rng.choice(a.size, size=min(a.size, max(1, int(inj.magnitude))), replace=False):
        a[j] = (np.nan, np.inf, -np.inf)[int(j) % 3]
    return out


def corrupt_bytes(raw: bytes, inj: Injection, count: int = 8) -> bytes:
    """``corrupt``: ``count`` random bytes of the serialized message XORed (the 4-byte CDR header kept)."""
    rng = np.random.default_rng(inj.seed)
    b = bytearray(raw)
    if len(b) > 4:
        for j in rng.integers(4, len(b), size=count):
            b[int(j)] ^= int(rng.integers(1, 256))
    return bytes(b)


def oversize(value: Mapping[str, np.ndarray], bound_rows: int) -> dict[str, np.ndarray]:
    """``arena``: the message's first array tiled past ``bound_rows`` rows (the planned bound)."""
    out = dict(value)
    k = next(iter(out))
    a = out[k]
    reps = bound_rows // max(1, len(a)) + 1
    if not len(a):
        out[k] = np.zeros((bound_rows + 1,) + a.shape[1:], a.dtype)
    else:
        out[k] = np.concatenate([a] * reps)[: bound_rows + 1]
    return out
