"""A fault-injection campaign: per class, N single faults, each judged against a golden run.

The accounting is pure (``judge``): a faulty run's outputs, detections and safety states compared
with the golden run of the same scenario, from the instant the fault landed:

* ``detected``: the runtime reported something the golden run did not (a comparison verdict, a
  miss, an overrun, a stall, a failed job, a rejected, silent or late sensor);
* ``masked``: nothing was detected and every published output stayed within ``tolerance`` of the
  golden one (the fault did not matter: it hit rows past a count, bits below the tolerance, an
  output nobody publishes, or a value the next stage does not depend on);
* ``wrong_output``: what a vehicle must never get, a silently wrong output: a published output
  (trajectory, objects) differs from the golden one beyond ``tolerance`` before the runtime had
  detected anything (a minimal-risk trajectory is never wrong: it is the detected fallback);
* ``recovered``: the outputs of the run's last ``settle`` window are back within ``recovered_within``
  of the golden ones (stateful stages, the tracker and the planner's plan chaining, carry a
  detected fault's effect for a while and converge back, so this tolerance is the looser one);
* ``crash``: the run raised; ``missing_plans``: golden planning instants with no valid (finite,
  nominal or minimal-risk) trajectory; ``deadline_misses`` and ``degrade_entries`` over golden.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..config.stack import StackConfig, parse_stack
from ..config.taskset import ConfigError, load_yaml
from ..core.units import DurationError, parse_duration
from ..safety.degrade import DEGRADED, MINIMAL_RISK
from .harness import Harness, RunRecord, Scenario
from .inject import CLASSES, INGRESS_CLASSES, OP_CLASSES, Injection, plan

CAMPAIGN_KEYS = ("seed", "duration", "inject", "settle", "planner", "tolerance", "recovered_within", "stack",
                 "monitor", "hysteresis", "stall_after", "classes", "description", "timing")
CLASS_KEYS = ("n", "tasks", "topics", "outputs_only", "fields", "magnitude", "delay", "values")
TIMINGS = ("budget", "calibrated")


@dataclass
class CampaignConfig:
    """A validated campaign file (see config/campaign.yaml)."""

    source: str
    seed: int = 7
    duration_ns: int = 2_000_000_000
    inject_ns: tuple[int, int] = (700_000_000, 1_200_000_000)
    settle_ns: int = 300_000_000
    planner: str = "planning"
    atol: float = 0.05
    rtol: float = 1e-3
    recover_atol: float = 0.5
    recover_rtol: float = 1e-2
    stall_after_ns: int | None = None
    timing: str = "budget"
    stack: Mapping[str, Any] = field(default_factory=dict)
    monitor: dict[str, Any] = field(default_factory=dict)
    hysteresis: dict[int, int] = field(default_factory=lambda: {DEGRADED: 5, MINIMAL_RISK: 10})
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)


def _dur(source: str, where: str, value: object) -> int:
    try:
        return parse_duration(value, what=where)
    except DurationError as e:
        raise ConfigError(source, str(e)) from None


def parse_campaign(doc: Mapping[str, Any], source: str) -> CampaignConfig:
    """Validate a campaign document; every error names the file and the field."""
    for k in doc:
        if k not in CAMPAIGN_KEYS:
            raise ConfigError(source, f"{k}: unknown key; expected one of {', '.join(CAMPAIGN_KEYS)}")
    c = CampaignConfig(source)
    seed = doc.get("seed", c.seed)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(source, f"seed: expected an integer, found {seed!r}")
    c.seed = seed
    c.duration_ns = _dur(source, "duration", doc.get("duration", "2s"))
    inj = doc.get("inject") or {}
    c.inject_ns = (_dur(source, "inject.from", inj.get("from", "0.7s")),
                   _dur(source, "inject.to", inj.get("to", "1.2s")))
    c.settle_ns = _dur(source, "settle", doc.get("settle", "300ms"))
    if not c.inject_ns[0] <= c.inject_ns[1] < c.duration_ns - c.settle_ns:
        raise ConfigError(source, "inject: expected from <= to < duration - settle")
    c.planner = str(doc.get("planner", c.planner))
    c.timing = doc.get("timing", c.timing)
    if c.timing not in TIMINGS:
        raise ConfigError(source, f"timing: expected one of {', '.join(TIMINGS)}, found {c.timing!r}")
    if doc.get("stall_after") is not None:
        c.stall_after_ns = _dur(source, "stall_after", doc["stall_after"])
    tol = doc.get("tolerance") or {}
    c.atol, c.rtol = float(tol.get("atol", c.atol)), float(tol.get("rtol", c.rtol))
    rec = doc.get("recovered_within") or {}
    c.recover_atol, c.recover_rtol = float(rec.get("atol", c.recover_atol)), float(rec.get("rtol", c.recover_rtol))
    c.stack = doc.get("stack") or {}
    mon = dict(doc.get("monitor") or {})
    if "max_latency" in mon:
        mon["max_latency_ns"] = _dur(source, "monitor.max_latency", mon.pop("max_latency"))
    unknown = set(mon) - {"silence_factor", "silence_critical", "max_latency_ns"}
    if unknown:
        raise ConfigError(source, f"monitor: unknown key(s) {sorted(unknown)}")
    c.monitor = mon
    hyst = doc.get("hysteresis") or {}
    c.hysteresis = {DEGRADED: int(hyst.get("degraded", 5)), MINIMAL_RISK: int(hyst.get("minimal_risk", 10))}
    classes = doc.get("classes")
    if not isinstance(classes, Mapping) or not classes:
        raise ConfigError(source, f"classes: expected a mapping of fault classes ({', '.join(CLASSES)})")
    for name, spec in classes.items():
        if name not in CLASSES:
            raise ConfigError(source, f"classes: unknown class {name!r}; expected one of {', '.join(CLASSES)}")
        spec = dict(spec or {})
        bad = set(spec) - set(CLASS_KEYS)
        if bad:
            raise ConfigError(source, f"classes.{name}: unknown key(s) {sorted(bad)}; expected {', '.join(CLASS_KEYS)}")
        n = spec.get("n", 3)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigError(source, f"classes.{name}.n: expected a non-negative integer, found {n!r}")
        key = "tasks" if name in OP_CLASSES else "topics"
        if not isinstance(spec.get(key), list) or not spec[key]:
            raise ConfigError(source, f"classes.{name}.{key}: expected a non-empty list")
        if name == "delay":
            lo, hi = spec.get("delay", ["20ms", "80ms"])
            spec["magnitude"] = [_dur(source, f"classes.{name}.delay", lo), _dur(source, f"classes.{name}.delay", hi)]
        elif name == "nan_input":
            spec["magnitude"] = spec.get("values", [1, 32])
        c.classes[name] = spec
    return c


def load_campaign(path: str | Path) -> CampaignConfig:
    """Read and validate a campaign file."""
    return parse_campaign(load_yaml(path), str(path))


def stack_under_test(stack_path: str | Path, campaign: CampaignConfig) -> StackConfig:
    """The stack file with the campaign's overrides applied: per task (e.g. redundancy; ``a.b`` sets key
    ``b`` inside the task's mapping ``a``, e.g. ``redundancy.mode``), and ``chains`` and ``workers``
    (replaced whole when given)."""
    doc = load_yaml(stack_path)
    for key in ("chains", "workers"):
        if key in (campaign.stack or {}):
            doc[key] = campaign.stack[key]
    over = (campaign.stack or {}).get("tasks") or {}
    entries = doc.get("tasks") or []
    names = {e.get("name") for e in entries}
    for name, fields in over.items():
        if name not in names:
            raise ConfigError(campaign.source, f"stack.tasks: no task named {name!r} in {stack_path}")
        for e in entries:
            if e.get("name") == name:
                for key, value in fields.items():
                    outer, _, inner = str(key).partition(".")
                    if inner and not isinstance(e.get(outer), dict):
                        raise ConfigError(campaign.source, f"stack.tasks.{name}.{key}: task {name!r} has no "
                                                           f"mapping {outer!r} in {stack_path}")
                    if inner:
                        e[outer] = {**e[outer], inner: value}
                    else:
                        e[key] = value
    return parse_stack(doc, str(stack_path))


def draw(campaign: CampaignConfig, harness: Harness, cfg: StackConfig) -> dict[str, list[Injection]]:
    """Every class's injections, drawn from the campaign seed (one stream per class)."""
    topics = {r.topic for r in cfg.ingress}
    out: dict[str, list[Injection]] = {}
    next_id = 0
    for k, name in enumerate(CLASSES):
        spec = campaign.classes.get(name)
        if not spec or not spec.get("n"):
            continue
        rng = np.random.default_rng([campaign.seed, k])
        if name in OP_CLASSES:
            targets = spec["tasks"]
            unknown = set(targets) - set(harness.graphs)
            if unknown:
                raise ConfigError(campaign.source, f"classes.{name}.tasks: unknown task(s) {sorted(unknown)}")
        else:
            targets = spec["topics"]
            unknown = set(targets) - topics
            if unknown:
                raise ConfigError(campaign.source, f"classes.{name}.topics: unknown topic(s) {sorted(unknown)}")
        mag = tuple(spec.get("magnitude", (0.3, 0.9)))
        out[name] = plan(name, spec["n"], targets, rng, campaign.inject_ns, harness.graphs, next_id,
                         bool(spec.get("outputs_only", False)), mag,   # type: ignore[arg-type]
                         fields=bool(spec.get("fields", False)))
        next_id += spec["n"]
    return out


# ---- judging one faulty run ----------------------------------------------------------------
@dataclass
class Outcome:
    """How one injection went."""

    injection: Injection
    landed_ns: int | None
    detected: bool = False
    masked: bool = False
    recovered: bool = False
    wrong_output: bool = False
    crash: bool = False
    deadline_misses: int = 0
    degrade_entries: int = 0
    missing_plans: int = 0
    first_detection: str = ""


# What an egress codec actually publishes of its channels (the rest is internal state, e.g. a
# track's age and miss counters, which stay off by one forever after one missed update).
# A nav_msgs/Path carries each row's x, y, yaw and stamp (t), not its speed (rt_runtime/io/egress.py).
PUBLISHED = {"markers": lambda v: np.asarray(v["tracks"])[: int(np.asarray(v["count"]).reshape(-1)[0]), :9],
             "path": lambda v: np.asarray(v["trajectory"])[:, [0, 1, 2, 4]]}


def published(run: RunRecord, routes: list[Any]) -> dict[str, dict[int, np.ndarray]]:
    """Per egress topic and instant, the published content (see ``PUBLISHED``)."""
    out: dict[str, dict[int, np.ndarray]] = {}
    for r in routes:
        chans = list(r.channels.items())
        times = set.intersection(*(set(run.outputs.get(c, {})) for _, c in chans)) if chans else set()
        project = PUBLISHED.get(r.codec)
        msgs = out.setdefault(r.topic, {})
        for t in times:
            v = {role: run.outputs[c][t] for role, c in chans}
            msgs[t] = project(v) if project is not None else np.concatenate([np.asarray(x, np.float64).reshape(-1)
                                                                              for x in v.values()])
    return out


def _same(a: np.ndarray | None, b: np.ndarray | None, atol: float, rtol: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if a.shape != b.shape:
        return False
    if not np.issubdtype(a.dtype, np.floating):
        return bool(np.array_equal(a, b))
    return bool(np.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True))


def judge(golden: RunRecord, run: RunRecord, inj: Injection, planner_out: tuple[str, str | None],
          campaign: CampaignConfig, routes: list[Any]) -> Outcome:
    """The outcome of ``inj`` in ``run`` (see the module docstring for the definitions)."""
    landed = next((t for i, t in run.fired if i.id == inj.id), None)
    out = Outcome(inj, landed, crash=run.crash is not None)
    if out.crash or landed is None:
        return out
    base = {(t, r, w) for t, r, w in golden.detections}
    new = [(t, r, w) for t, r, w in run.detections if t >= landed and (t, r, w) not in base]
    out.detected = bool(new)
    out.first_detection = f"{new[0][1]}@{new[0][2]}" if new else ""
    detected_at = min((t for t, _, _ in new), default=1 << 62)
    atol, rtol = campaign.atol, campaign.rtol
    traj_ch, status_ch = planner_out
    traj_topic = next((r.topic for r in routes if traj_ch in r.channels.values()), None)
    status = run.outputs.get(status_ch or "", {})
    mine, gold_pub = published(run, routes), published(golden, routes)
    for topic, msgs in mine.items():
        gold = gold_pub.get(topic, {})
        for t in sorted(msgs):
            if t < landed or _same(msgs[t], gold.get(t), atol, rtol):
                continue
            mrm = topic == traj_topic and status.get(t) is not None and int(status[t].reshape(-1)[0]) == 1
            if t < detected_at and not mrm:
                out.wrong_output = True
    window = run.end_ns - campaign.settle_ns
    late = {(topic, t) for pub in (mine, gold_pub) for topic, m in pub.items() for t in m if t >= window}
    out.recovered = bool(late) and all(_same(mine.get(tp, {}).get(t), gold_pub.get(tp, {}).get(t),
                                             campaign.recover_atol, campaign.recover_rtol) for tp, t in late)
    out.masked = not out.detected and not out.wrong_output
    traj = run.outputs.get(traj_ch, {})
    for t in golden.outputs.get(traj_ch, {}):
        if t < landed:
            continue
        x = traj.get(t)
        s = status.get(t)
        ok = x is not None and bool(np.isfinite(x).all()) and (s is None or int(s.reshape(-1)[0]) in (0, 1))
        out.missing_plans += not ok
    miss = lambda r: sum(int(s.get("missed", 0)) for s in r.stats.values())  # noqa: E731
    out.deadline_misses = max(0, miss(run) - miss(golden))
    entries = lambda r: sum(r.machine.entries.values()) if r.machine is not None else 0  # noqa: E731
    out.degrade_entries = max(0, entries(run) - entries(golden))
    return out


@dataclass
class ClassResult:
    """A class's totals over its injections."""

    name: str
    outcomes: list[Outcome]

    def to_json(self) -> dict[str, Any]:
        """The documented per-class keys, then the extra counts."""
        o = self.outcomes
        landed = [x for x in o if x.landed_ns is not None or x.crash]
        return {"name": self.name, "injected": len(landed), "detected": sum(x.detected for x in o),
                "masked": sum(x.masked for x in o), "recovered": sum(x.recovered for x in o),
                "wrong_output": sum(x.wrong_output for x in o),
                "crashes": sum(x.crash for x in o), "deadline_misses": sum(x.deadline_misses for x in o),
                "degrade_entries": sum(x.degrade_entries for x in o), "missing_plans": sum(x.missing_plans for x in o),
                "not_landed": len(o) - len(landed)}


@dataclass
class CampaignResult:
    """Every class's result, plus how long it took."""

    classes: list[ClassResult]
    wall_s: float
    runs: int
    golden: RunRecord

    def to_json(self) -> dict[str, Any]:
        """``{"classes": [...]}`` plus run facts."""
        return {"classes": [c.to_json() for c in self.classes], "runs": self.runs, "wall_s": round(self.wall_s, 3)}


def run_campaign(campaign: CampaignConfig, cfg: StackConfig, bag: str | Path,
                 progress: Any = None) -> CampaignResult:
    """Calibrate, run the golden scenario, then every injection in its own run; judge each."""
    t0 = time.perf_counter()
    scenario = Scenario(bag, cfg, campaign.duration_ns)
    try:
        h = Harness(cfg, scenario, campaign.planner, monitor=campaign.monitor, clear_after=campaign.hysteresis,
                    stall_after_ns=campaign.stall_after_ns)
        if campaign.timing == "calibrated":
            h.calibrate()
        golden = h.run()
        if golden.crash is not None:
            raise RuntimeError(f"the golden run failed: {golden.crash}")
        b = next(b for b in h.bindings if b.name == campaign.planner)
        planner_out = (b.outputs.get("trajectory", next(iter(b.outputs.values()))), b.outputs.get("plan_status"))
        results, runs = [], 2 if campaign.timing == "calibrated" else 1
        for name, injections in draw(campaign, h, cfg).items():
            outcomes = []
            for inj in injections:
                rec = h.run([inj])
                runs += 1
                outcomes.append(judge(golden, rec, inj, planner_out, campaign, cfg.egress))
                if progress is not None:
                    progress(name, outcomes[-1])
            results.append(ClassResult(name, outcomes))
    finally:
        scenario.close()
    return CampaignResult(results, time.perf_counter() - t0, runs, golden)


def describe(o: Outcome) -> str:
    """One injection's outcome on one line."""
    if o.crash:
        return f"{o.injection.describe()}: CRASH"
    if o.landed_ns is None:
        return f"{o.injection.describe()}: did not land"
    flags = [f"landed {o.landed_ns / 1e9:.3f}s", f"detected ({o.first_detection})" if o.detected
             else "masked" if o.masked else "undetected", "recovered" if o.recovered else "not recovered"]
    flags += ["WRONG OUTPUT"] * o.wrong_output + [f"{o.missing_plans} plan(s) missing"] * bool(o.missing_plans)
    flags += [f"{o.deadline_misses} miss(es)"] * bool(o.deadline_misses)
    flags += [f"{o.degrade_entries} degrade entr(ies)"] * bool(o.degrade_entries)
    return f"{o.injection.describe()}: " + ", ".join(flags)


def render(result: CampaignResult, verbose: bool = False) -> str:
    """The campaign table, one row per class, and the definitions in two lines."""
    cols = ("injected", "detected", "masked", "recovered", "wrong_output", "crashes", "deadline_misses",
            "degrade_entries", "missing_plans")
    heads = ("class", "injected", "detected", "masked", "recovered", "wrong out", "crashes", "misses", "degrade",
             "no plan")
    rows = [[c.name, *(str(c.to_json()[k]) for k in cols)] for c in result.classes]
    widths = [max(len(r[i]) for r in [list(heads), *rows]) for i in range(len(heads))]

    def fmt(r: list[str]) -> str:
        return "  ".join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(r, widths)))

    lines = [fmt(list(heads)), *(fmt(r) for r in rows)]
    if verbose:
        lines += ["", *(f"  {describe(o)}" for c in result.classes for o in c.outcomes), ""]
    lines.append(f"{result.runs} runs in {result.wall_s:.1f} s (golden run included). masked: undetected, every "
                 "published output within tolerance of the golden run; wrong out: a "
                 "published output off the golden run before anything was detected; no plan: planning periods "
                 "without a valid trajectory; misses and degrade entries: beyond the golden run's.")
    return "\n".join(lines)


__all__ = ["CampaignConfig", "CampaignResult", "ClassResult", "INGRESS_CLASSES", "Outcome", "judge",
           "load_campaign", "parse_campaign", "render", "run_campaign", "stack_under_test"]
