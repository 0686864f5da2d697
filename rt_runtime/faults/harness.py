"""The campaign's replay loop: a short scenario, decoded once, replayed many times with faults.

Each run builds a fresh Runtime (fresh arenas, channels, counters) on a VirtualClock. Op costs
are the stack's budgets (budget timing, ``sched.budget``, as a replay): every op takes its
budget, so a run's timing depends on nothing but the configuration, its inputs and its faults —
not on this machine or what else runs on it — and the golden run and a faulty run differ only
where the fault made them differ. ``calibrate()`` switches a harness to *calibrated* costs
instead (each op the median of its CPU time in one measuring run), for stacks whose budgets do
not fit. Graphs are built once per campaign, wrapped by the ``Injector`` (pass-through until an
injection is armed).

Ingress goes through an end-to-end check (each message's CRC-32 as its sender computed it, over
the serialized bytes, as an AUTOSAR E2E profile carries it), a plausibility guard (finite
values, magnitudes within ``limit``) and the ``SafetyMonitor`` (arrival times: silent and late
sensors); outputs are recorded per channel and instant for the comparison with the golden run.
"""
from __future__ import annotations

import heapq
import logging
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..bag import BagError, open_bag
from ..config.stack import StackConfig, build_bindings
from ..core.tensor import Dim
from ..drive import StackRuntime, host_copy, open_stack
from ..io import INGRESS_CODECS, IngressError
from ..io.ingress import decode
from ..sched import Runtime, TaskBinding, VirtualClock
from ..sched.budget import BudgetCost
from ..sched.events import EventKind
from ..safety.degrade import DegradeStateMachine
from ..safety.monitor import SafetyMonitor
from .inject import Injection, Injector, corrupt_bytes, oversize, poison

_K = EventKind
KEPT = {_K.MISS, _K.OVERRUN, _K.STALL, _K.ABORT, _K.COMPARE, _K.REACTION, _K.SAFETY, _K.PUBLISH}


@dataclass
class Message:
    """One input message of the scenario: logical time, route, decoded value, raw bytes."""

    t_ns: int
    topic: str
    route: Any
    value: dict[str, np.ndarray] | None
    raw: Any
    crc: int = 0   # CRC-32 of the serialized message as sent (the E2E protection's checksum)


class Scenario:
    """A bag's first ``until_ns`` of input messages, decoded once and kept in memory."""

    def __init__(self, bag: str | Path, cfg: StackConfig, until_ns: int) -> None:
        self.reader = open_bag(bag)
        routes = {r.topic: r for r in cfg.ingress}
        missing = sorted(set(routes) - set(self.reader.topics))
        if missing:
            self.reader.close()
            raise ValueError(f"{bag}: the configuration needs topic(s) {missing} that the bag does not have")
        self.until_ns = min(until_ns, self.reader.duration_ns)
        self.messages: list[Message] = []
        for msg in self.reader.messages(topics=list(routes)):
            t = msg.t_ns - self.reader.start_ns
            if t > self.until_ns:
                break
            self.messages.append(Message(t, msg.topic, routes[msg.topic], self.decode(msg, routes[msg.topic]), msg,
                                         zlib.crc32(msg.raw_cdr)))

    def decode(self, msg: Any, route: Any) -> dict[str, np.ndarray] | None:
        """A raw message into its arrays, or None when it cannot be decoded."""
        try:
            return decode(INGRESS_CODECS[route.codec], self.reader.decode(msg), msg.topic)
        except (IngressError, BagError):
            return None

    def periods(self) -> dict[str, int]:
        """Expected period per ingress channel (median gap), for channels with at least 3 messages."""
        times: dict[str, list[int]] = {}
        for m in self.messages:
            for ch in m.route.channels.values():
                times.setdefault(ch, []).append(m.t_ns)
        return {ch: int(np.median(np.diff(ts))) for ch, ts in times.items() if len(ts) >= 3}

    def close(self) -> None:
        """Release the bag."""
        self.reader.close()


@dataclass
class RunRecord:
    """What one run did: outputs per channel and instant, kept events, safety states, counters."""

    outputs: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    events: list[tuple[int, int, str, int, int, int]] = field(default_factory=list)
    detections: list[tuple[int, str, str]] = field(default_factory=list)
    machine: DegradeStateMachine | None = None
    stats: dict[str, dict[str, Any]] = field(default_factory=dict)
    fired: list[tuple[Injection, int]] = field(default_factory=list)
    crash: str | None = None
    end_ns: int = 0


class _Keep:
    """An EventSink keeping only the kinds the campaign reads (faults, verdicts, publishes)."""

    enabled = True

    def __init__(self, out: list) -> None:
        self.out = out

    def emit(self, kind: int, t_ns: int, task: str, job_index: int, a: int = 0, b: int = 0) -> None:
        if kind in KEPT:
            self.out.append((int(kind), t_ns, task, job_index, a, b))


def plausible(value: Mapping[str, np.ndarray], limit: float) -> bool:
    """The ingress guard: float values finite; float32 sensor data (points, boxes) within +-``limit``.

    float64 arrays carry poses and absolute stamps (seconds since 1970), so only finiteness applies.
    """
    for a in value.values():
        if np.issubdtype(a.dtype, np.floating) and a.size:
            if not np.isfinite(a).all() or (a.dtype == np.float32 and float(np.abs(a).max()) > limit):
                return False
    return True


class Harness:
    """Builds the stack once (graphs wrapped for injection) and runs it over a scenario per call."""

    def __init__(self, cfg: StackConfig, scenario: Scenario, planner: str, *, limit: float = 1e5,
                 monitor: Mapping[str, Any] | None = None, clear_after: Mapping[int, int] | None = None,
                 stall_after_ns: int | None = None) -> None:
        import torch

        self.cfg, self.scenario, self.planner, self.limit = cfg, scenario, planner, limit
        self.monitor_kw = dict(monitor or {})
        self.clear_after = clear_after
        self.stall_after_ns = stall_after_ns
        self.injector = Injector()
        bindings, self.initial = build_bindings(cfg)
        self.bindings: list[TaskBinding] = []
        for b in bindings:
            g = self.injector.wrap(b.name, b.graph)   # type: ignore[arg-type]
            f = self.injector.wrap(b.name, b.fallback, primary=False) if b.fallback is not None else None
            self.bindings.append(TaskBinding(b.task, g, inputs=b.inputs, outputs=b.outputs, fallback=f,
                                             on_miss=b.on_miss, on_overrun=b.on_overrun, group=b.group,
                                             recover_after=b.recover_after, publish=b.publish, worker=b.worker,
                                             executor=b.executor))
        self.graphs = {b.name: b.graph for b in self.bindings}
        self.watch = {c for r in cfg.egress for c in r.channels.values()}
        self.watch |= {self._status_channel()} - {None}
        self.bounds = self._bounds()
        self._torch = torch
        self.budget = BudgetCost(self.bindings)
        self.fixed: dict[tuple[str, str], int] = {}   # (task, op name) -> calibrated cost (ns)

    def calibrate(self, until_ns: int | None = None) -> dict[tuple[str, str], int]:
        """One run with measured op costs; from then on each op costs its median measured duration."""
        seen: dict[tuple[str, str], list[int]] = {}

        def record(task: str, job: int, i: int, op: Any, measured: int) -> int:
            seen.setdefault((task, op.name), []).append(measured)
            return measured

        # CPU time of the op's thread where the driver supports it: other processes on a shared
        # machine then do not inflate the calibration (torch runs ops on this thread: threads: 1).
        record.measure = time.thread_time_ns   # type: ignore[attr-defined]
        self.fixed = {}
        rec = self.run(until_ns=until_ns, base_cost=record)
        if rec.crash is not None:
            raise RuntimeError(f"calibration run failed: {rec.crash}")
        self.fixed = {k: int(np.median(v)) for k, v in seen.items()}
        return self.fixed

    def _cost(self, task: str, job: int, i: int, op: Any, measured: int) -> int:
        c = self.fixed.get((task, op.name))
        return c if c is not None else int(round(op.cost_us * 1000))   # calibrated; an op not seen: declared

    def _status_channel(self) -> str | None:
        b = next((b for b in self.bindings if b.name == self.planner), None)
        return b.outputs.get("plan_status") if b is not None else None

    def _bounds(self) -> dict[str, int]:
        """Per ingress channel, the smallest planned bound on rows among the graphs that read it."""
        out: dict[str, int] = {}
        for b in self.bindings:
            specs = {s.name: s for s in b.graph.inputs}   # type: ignore[union-attr]
            for gin, ch in b.inputs.items():
                d = specs[gin].shape[0] if specs[gin].shape else None
                rows = d.max if isinstance(d, Dim) else d
                if isinstance(rows, int):
                    out[ch] = min(out.get(ch, rows), rows)
        return out

    def run(self, injections: Sequence[Injection] = (), until_ns: int | None = None,
            base_cost: Any = None) -> RunRecord:
        """One replay of the scenario with ``injections``; never raises (a crash is recorded)."""
        rec = RunRecord()
        stack: StackRuntime | None = None
        quiet = logging.getLogger("rt_runtime.sched")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)   # stalls and op errors are expected here, and counted
        threads = self._torch.get_num_threads()
        self._torch.set_num_threads(self.cfg.threads)
        try:
            # No warm-up: an op costs its budget (or calibration) here, however long its first run takes,
            # and a campaign builds a runtime per run.
            stack = open_stack(self.cfg, self.bindings, self.initial, clock=VirtualClock(), sink=_Keep(rec.events),
                               egress=self._egress(rec),
                               cost=self.injector.cost(base_cost or (self._cost if self.fixed else self.budget)),
                               stall_after_ns=self.stall_after_ns)
            rt = stack.rt
            mon = SafetyMonitor(rt, self.planner, DegradeStateMachine(**({"clear_after": self.clear_after}
                                                                         if self.clear_after else {})),
                                periods=self.scenario.periods(), **self.monitor_kw).install()
            rec.machine = mon.machine
            self.injector.arm(injections, rt.clock.now, lambda task: rt.stall_ns(rt.tasks[task]))
            self.injector.on_hang = lambda task, t: self._stall(rt, task, t)
            self._feed(stack, mon, [i for i in injections if i.cls not in ("bitflip", "exception", "overrun", "hang")],
                       rec, self.scenario.until_ns if until_ns is None else until_ns)
            rec.stats = rt.stats()
            rec.detections = list(mon.detections)
        except Exception as e:  # noqa: BLE001 - a crash is a campaign result, not an abort
            rec.crash = f"{type(e).__name__}: {e}"
        finally:
            quiet.setLevel(level)
            self._torch.set_num_threads(threads)
            rec.fired += self.injector.fired
            self.injector.arm((), lambda: 0, lambda task: 0)
            self.injector.on_hang = None
            if stack is not None:
                stack.close()
        return rec

    def _egress(self, rec: RunRecord) -> Any:
        watch, outputs = self.watch, rec.outputs

        def on_publish(channel: str, t_ns: int, seq: int, data: Any) -> None:
            if channel in watch:
                outputs.setdefault(channel, {})[t_ns] = host_copy(data)

        return on_publish

    @staticmethod
    def _stall(rt: Runtime, task: str, t_ns: int) -> None:
        """The stall watchdog ends a hung op: report the stall, then the op fails (see inject.py)."""
        s = rt.sched
        for w in s.workers:
            if w.current is not None and w.current.ts.name == task:
                s.watchdog.stall(w.index, w.current, t_ns)
                s.watchdog.unstall(w.index)
                return

    def _feed(self, stack: StackRuntime, mon: SafetyMonitor, faults: list[Injection], rec: RunRecord,
              end_ns: int) -> None:
        rt = stack.rt
        stack.push_initial()
        pending = sorted(faults, key=lambda i: (i.t_ns, i.id))
        arrivals: list[tuple[int, int, str, int]] = []   # (arrival, seq, channel, stamp): delayed messages
        seq = 0

        def advance(t: int) -> None:
            while True:
                step = t
                nc = mon.next_check()
                if nc is not None and nc < step:
                    step = nc
                if arrivals and arrivals[0][0] < step:
                    step = arrivals[0][0]
                rt.run_until(step)
                while arrivals and arrivals[0][0] <= step:
                    at, _, ch, stamp = heapq.heappop(arrivals)
                    mon.arrived(ch, at, stamp)
                mon.check_silence(step)
                if step >= t:
                    return

        for m in self.scenario.messages:
            if m.t_ns > end_ns:
                break
            if m.t_ns > 0:
                advance(m.t_ns - 1)
            inj = next((i for i in pending if i.target == m.topic and i.t_ns <= m.t_ns), None)
            value, t_push = m.value, m.t_ns
            channels = list(m.route.channels.values())
            if inj is not None:
                pending.remove(inj)
                rec.fired.append((inj, m.t_ns))
                if inj.cls == "drop":
                    continue
                if inj.cls == "delay":
                    t_push = m.t_ns + int(inj.magnitude)
                elif inj.cls == "nan_input" and value is not None:
                    value = poison(value, inj)
                elif inj.cls == "corrupt":
                    raw = corrupt_bytes(m.raw.raw_cdr, inj)
                    # The E2E check: bytes that changed after the sender's checksum are rejected whole.
                    value = None if zlib.crc32(raw) != m.crc else self.scenario.decode(m.raw._replace(raw_cdr=raw),
                                                                                        m.route)
                elif inj.cls == "arena" and value is not None:
                    value = oversize(value, self.bounds.get(channels[0], 1 << 20))
            if value is None or not plausible(value, self.limit):
                mon.rejected(channels[0], m.t_ns)
                continue
            for role, ch in m.route.channels.items():
                rt.push(ch, t_push, stack.to_tensor(value[role]))
            if t_push == m.t_ns:
                for ch in channels:
                    mon.arrived(ch, t_push, m.t_ns)
            else:
                for ch in channels:
                    heapq.heappush(arrivals, (t_push, seq, ch, m.t_ns))
                    seq += 1
        advance(end_ns)
        rec.end_ns = end_ns
