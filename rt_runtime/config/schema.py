"""The stack file's structure as pydantic models: the one source of its keys, and its JSON Schema.

``rt-runtime schema`` prints ``StackFile.model_json_schema()`` (committed as
``config/stack.schema.json``), so an editor with a YAML language server completes and checks a stack
file as it is typed. The key lists the hand-written validation uses (``STACK_KEYS``, ``TASK_KEYS``,
``RUNTIME_TASK_KEYS``, ``CHAIN_KEYS``, ``CHANNEL_KEYS``, ``INGRESS_KEYS``, ``EGRESS_KEYS``,
``JOIN_KEYS``, ...) are these models' field names, in order: a key added here is accepted there.

The models check structure (keys, types, enums, duration syntax); the ``redundancy:``, ``speculate:``
and ``safety:`` keys are validated by them (``safety_keys.py``, one line an error by
``basetypes.validate``), the rest by hand against the key lists. The semantic checks (a chain's
members exist, one writer per channel, schedulability, the graphs build) and their one-line messages
stay in ``taskset.py``, ``stack.py`` and ``wiring.py``: ``parse_stack`` is what decides. The models
are deliberately a little looser where those checks say more (``graph`` is optional, since ``check``
reads bare task sets too; ``policy`` must be lower case here, while the loader also accepts ``EDF``).
Every field's description is the docstring under it.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import ConfigDict, Field, StringConstraints

from ..analysis.schedulability import POLICIES
from ..core.task import CRITICALITIES
from ..io import EGRESS_CODECS, INGRESS_CODECS
from ..sched.binding import COMPILE_MODES, Publish, Reaction
from ..sched.channel import ChannelPolicy
from .basetypes import REALTIME_KEYS, Duration, Realtime, Ref, keys  # noqa: F401 - re-exported
from .basetypes import Model as _Model

Names = dict[str, str]


def _literal(values: Any) -> Any:
    """``Literal[...]`` of the given values (an enum's ``.value`` for enum members)."""
    return Literal[tuple(getattr(v, "value", v) for v in values)]  # type: ignore[valid-type]


PolicyName = _literal(POLICIES)
ReactionName = _literal(Reaction)
PublishName = _literal(Publish)
ChannelPolicyName = _literal(ChannelPolicy)
IngressCodec = _literal(INGRESS_CODECS)
EgressCodec = _literal(EGRESS_CODECS)
Criticality = _literal(CRITICALITIES)


class RuntimeKey:
    """Field marker: a task key that configures how jobs run, not when (the analysis skips it)."""


RUNTIME = RuntimeKey()


class Join(_Model):
    """A join trigger: released when all (or any) of the channels have a new value."""

    all: list[Annotated[str, StringConstraints(min_length=1)]] | None = None
    """Released when every one of these channels has a new value (give 'all' or 'any', not both)."""
    any: list[Annotated[str, StringConstraints(min_length=1)]] | None = None
    """Released when any of these channels has a new value."""
    window: Duration | None = None
    """How far apart the joined values' stamps may be."""
    pairing: Literal["exact", "approximate", "latest"] | None = None
    """exact: equal stamps (window 0); approximate: within 'window'; latest: the newest of each."""


class Kinematics(_Model):
    """A trajectory's (x, y, yaw, v, t rows) physical consistency."""

    dt: Annotated[float, Field(gt=0)]
    """Seconds between rows (the t column must be on this grid)."""
    v_max: Annotated[float, Field(gt=0)]
    """Highest plausible speed, m/s."""
    a_max: Annotated[float, Field(gt=0)] = 10.0
    """Highest plausible |acceleration|, m/s^2."""
    tol: Annotated[float, Field(gt=0)] = 0.25
    """How far a step's length may be from what its speeds give, m."""
    yaw_tol: Annotated[float, Field(gt=0)] = 0.1
    """How far the yaw may be from the direction of travel, rad."""
    kappa_max: Annotated[float, Field(gt=0)] = 0.2
    """Highest plausible curvature, 1/m (widens the yaw tolerance over a step)."""


class Steps(_Model):
    """Predicted paths (rows x steps x (x, y)): no step faster than v_max."""

    dt: Annotated[float, Field(gt=0)]
    """Seconds between steps."""
    v_max: Annotated[float, Field(gt=0)]
    """Highest plausible speed, m/s."""


Bounds = Annotated[list[float], Field(min_length=2, max_length=2)]


class OutputChecks(_Model):
    """What must hold of one graph output when it is published (rt_runtime/safety/invariants.py)."""

    rows: str | None = None
    """The output holding this one's valid row count (checks read only those rows)."""
    capacity: Annotated[int, Field(ge=0)] | None = None
    """For a count: 0 <= value <= capacity."""
    finite: bool = True
    """No NaN or Inf in the valid rows."""
    range: Union[Bounds, dict[int, Bounds], None] = None
    """[low, high] for every element, or column -> [low, high]."""
    integer: list[Annotated[int, Field(ge=0)]] | None = None
    """Columns whose values are whole numbers (ids, classes, counters)."""
    ordered: list[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=2, max_length=2)]] | None = None
    """[a, b] pairs: column a below column b in every valid row (a box's corners)."""
    zero_padding: bool = False
    """Rows past the count are all zero."""
    increasing: Annotated[int, Field(ge=0)] | None = None
    """An id column, strictly increasing over the valid rows."""
    split: str | None = None
    """With increasing: ids increase within the rows before this output's count and within the rest."""
    below: str | None = None
    """The output every id must be below (e.g. the next id)."""
    at_most: str | None = None
    """For a count: not above this other count output."""
    equals: Annotated[list[Union[str, Annotated[int, Field(ge=0)]]], Field(min_length=2, max_length=2)] | None = None
    """[input or output, element index]: a scalar output bit-equal to that element (a stamp passed on)."""
    partition: Annotated[list[Union[float, str]], Field(min_length=2, max_length=2)] | None = None
    """[threshold, split output]: the valid rows before the split are at or above it, the rest below."""
    speed: Annotated[list[float], Field(min_length=3, max_length=3)] | None = None
    """[vx column, vy column, max m/s]."""
    positive_definite: bool = False
    """Each valid row is a symmetric positive-definite matrix (a covariance)."""
    kinematics: Kinematics | None = None
    """The output is a trajectory: times on the grid, speeds, accelerations and steps consistent."""
    steps: Steps | None = None
    """The output is predicted paths: no step faster than v_max."""


class Redundancy(_Model):
    """How many copies of each job run and how their outputs are compared (docs/SAFETY.md)."""

    mode: Literal["dual", "triple", "invariants"] = "dual"
    """dual: two copies (a third votes on a mismatch); triple: three; invariants: one, its outputs checked."""
    compare: Literal["exact", "tolerance"] | None = None
    """exact: bit for bit (the default without atol/rtol); tolerance: |a-b| <= atol + rtol |b|."""
    atol: Annotated[float, Field(ge=0)] = 0.0
    """Absolute tolerance (compare: tolerance)."""
    rtol: Annotated[float, Field(ge=0)] = 0.0
    """Relative tolerance (compare: tolerance)."""
    budget: Literal["nominal", "worst_case"] = "nominal"
    """What wcet is multiplied by for the analysis and the watchdog: the copies, or 3 (a vote)."""
    checks: dict[str, OutputChecks] | None = None
    """Output -> the invariants it must satisfy at publish (required by mode invariants)."""
    cost: Duration | None = None
    """CPU time of the checks per job, added to the budget (default 150us per checked output)."""


NonNegative = Annotated[float, Field(ge=0)]
Tolerance = Union[NonNegative, list[NonNegative]]


class Speculate(_Model):
    """Speculative execution in slack time (docs/SAFETY.md): run on predicted inputs, commit on a match."""

    hypotheses: Ref
    """'package.module:function' returning the hypotheses (called with args)."""
    args: dict[str, Any] | None = None
    """Keyword arguments of the hypotheses factory."""
    k: Annotated[int, Field(ge=1)] = 2
    """Hypotheses per release."""
    atol: Union[Tolerance, dict[str, Tolerance]] = 0.0
    """How close a hypothesis must be to the real input: a number, one per column, or per input."""
    rows: Names | None = None
    """Input -> its count input: compare only the valid rows."""
    margin: NonNegative = 2.0
    """Slack margin before speculating."""
    wait_for: list[str] | None = None
    """Inputs that must be this cycle's before speculating."""
    enabled: bool = True
    """false: declared, off unless `--speculate` asks for it."""


class Task(_Model):
    """One task: when it runs (timing, analysed by `rt-runtime check`) and what it runs (graph, channels)."""

    name: str
    """The task's name (unique in the file)."""
    period: Duration | None = None
    """Release period of a periodic task, e.g. "100ms"."""
    min_interarrival: Duration | None = None
    """For a triggered task: the minimum time between triggering messages (instead of period)."""
    wcet: Duration | None = None
    """Worst-case execution time (budget), e.g. "2ms"; required."""
    deadline: Duration | None = None
    """Relative deadline (default: the period)."""
    blocking: Duration | None = None
    """Worst-case blocking by lower-priority work."""
    jitter: Duration | None = None
    """Release jitter."""
    offset: Duration | None = None
    """First release offset."""
    priority: int | None = None
    """Fixed priority (policy fp): a lower number is a higher priority."""
    trigger: Union[Annotated[str, StringConstraints(min_length=1)], Join, None] = None
    """Released by a channel (or topic) instead of a period, or by a join {all|any: [...], window, pairing}."""
    criticality: Criticality | None = None
    """How critical the task is (default medium)."""
    graph: Annotated[Ref | None, RUNTIME] = None
    """'package.module:function(device=..., **args)' building the task's graph (required to run the stack)."""
    args: Annotated[dict[str, Any] | None, RUNTIME] = None
    """Keyword arguments of the graph builder."""
    on_miss: Annotated[ReactionName | None, RUNTIME] = None
    """What the watchdog does on a deadline miss (default skip)."""
    on_overrun: Annotated[ReactionName | None, RUNTIME] = None
    """What the watchdog does when a job overruns its budget (default none: count and trace)."""
    fallback: Annotated[Ref | None, RUNTIME] = None
    """'package.module:function' building the fallback graph (on_miss: degrade)."""
    fallback_args: Annotated[dict[str, Any] | None, RUNTIME] = None
    """Keyword arguments of the fallback builder."""
    fallback_wcet: Annotated[Duration | None, RUNTIME] = None
    """The fallback graph's budget (default: wcet): reserved for the degraded task every period."""
    compile: Annotated[Literal[COMPILE_MODES] | None, RUNTIME] = None  # type: ignore[valid-type]
    """How its kernels run: auto (a compiled mode cached by `rt-runtime compile` where it pays), eager, jit, aot
    (default: $RT_RUNTIME_COMPILE, else eager)."""
    group: Annotated[str | None, RUNTIME] = None
    """Tasks of one group degrade together."""
    recover_after: Annotated[Annotated[int, Field(ge=1)] | None, RUNTIME] = None
    """Clean jobs in a row before leaving the fallback (default 3)."""
    initial: Annotated[Ref | None, RUNTIME] = None
    """'package.module:function(device=...)' giving initial values of the task's inputs."""
    redundancy: Annotated[Union[Literal["none", "dual", "triple", 2, 3, False], Redundancy, None], RUNTIME] = None
    """Run each job 2 or 3 times and compare (dual, triple, or a mapping)."""
    speculate: Annotated[Union[Literal[False], Speculate, None], RUNTIME] = None
    """Speculative execution in slack time."""
    inputs: Annotated[Names | None, RUNTIME] = None
    """Graph input -> channel."""
    outputs: Annotated[Names | None, RUNTIME] = None
    """Graph output -> channel."""
    worker: Annotated[Annotated[int, Field(ge=0)] | None, RUNTIME] = None
    """The worker (0, 1, ...) the task runs on."""
    publish: Annotated[PublishName | None, RUNTIME] = None
    """When outputs become visible: let (at release + deadline, deterministic) or on_finish."""
    op_budgets: Annotated[dict[str, Duration] | None, RUNTIME] = None
    """Op name -> its execution-time budget."""
    optional: Annotated[list[str] | None, RUNTIME] = None
    """Inputs a job may run without (their empty default until a message)."""


class TaskFields(Task):
    """A task in the mapping form of ``tasks:`` (name -> fields): the name is the key."""

    name: str | None = None  # type: ignore[assignment]
    """The task's name; when given, it must equal the key."""


class ChainEntry(_Model):
    """A chain of tasks in data-flow order."""

    name: str
    """The chain's name (unique in the file)."""
    tasks: Annotated[list[str], Field(min_length=1)]
    """Task names in data-flow order."""
    deadline: Duration | None = None
    """End-to-end deadline: the chain runs as one (two or more tasks)."""


class Channel(_Model):
    """How one channel behaves when a reader falls behind its writer."""

    name: str
    """The channel's name."""
    policy: ChannelPolicyName | None = None
    """latest (default), queue or drop_oldest."""
    depth: Annotated[int, Field(ge=1)] | None = None
    """Queue depth per reader (default 1)."""


class Ingress(_Model):
    """Messages on a topic, decoded by a codec, pushed into channels."""

    topic: str
    """The input topic (remappable with --remap)."""
    codec: IngressCodec
    """How the message is decoded."""
    channel: str | None = None
    """The channel of a codec with one output."""
    channels: Names | None = None
    """Codec role -> channel, for a codec with several outputs."""


class Egress(_Model):
    """Channels published at one instant as one message on a topic."""

    topic: str
    """The output topic (remappable with --remap)."""
    codec: EgressCodec
    """How the message is encoded."""
    channels: Names
    """Codec role -> channel."""


class Hysteresis(_Model):
    """Clean planning periods before stepping down a mode."""

    degraded: Annotated[int, Field(ge=1)] | None = None
    """Clean periods to leave degraded."""
    minimal_risk: Annotated[int, Field(ge=1)] | None = None
    """Clean periods to leave minimal-risk."""


class Safety(_Model):
    """The degrade supervisor (docs/SAFETY.md): nominal -> degraded -> minimal-risk."""

    planner: str
    """The planning task, held in its minimal-risk fallback in minimal-risk."""
    sensors: dict[str, Duration] | None = None
    """Channel -> its expected period (silence detection)."""
    silence_factor: NonNegative = 1.5
    """Silent for this many periods: degraded."""
    silence_critical: NonNegative = 4.0
    """Silent for this many periods: minimal-risk."""
    max_latency: Duration | None = None
    """Arrival - stamp beyond this: degraded (default 30ms)."""
    hysteresis: Hysteresis | None = None
    """Clean planning periods to step down."""


class StackFile(_Model):
    """An rt_runtime stack file (config/stack.yaml): tasks, chains, channels, ingress, egress, safety."""

    model_config = ConfigDict(title="rt_runtime stack file")

    name: str | None = None
    """The stack's name."""
    policy: PolicyName
    """Scheduling policy: rm, dm, fp or edf."""
    tasks: Union[Annotated[list[Task], Field(min_length=1)], Annotated[dict[str, TaskFields], Field(min_length=1)]]
    """The tasks: a list, or a mapping from task name to its fields."""
    chains: list[ChainEntry] | None = None
    """Chains of tasks in data-flow order (latency analysis; with a deadline, run as one)."""
    channels: list[Channel] | None = None
    """Channel settings (default: latest, depth 1)."""
    ingress: list[Ingress] | None = None
    """Topic -> codec -> channel(s)."""
    egress: list[Egress] | None = None
    """Channels -> codec -> topic."""
    device: Annotated[str, StringConstraints(pattern=r"^(cpu|cpu-async|cuda(:[0-9]{1,4})?)$")] | None = None
    """cpu (default), cpu-async (the asynchronous CPU twin of CUDA), cuda or cuda:N."""
    workers: Annotated[int, Field(ge=1, le=1024)] | None = None
    """Worker threads running jobs (default 1)."""
    steal: bool | None = None
    """Work-conserving dispatch: an idle worker takes a busy worker's waiting job (default false)."""
    threads: Annotated[int, Field(ge=1, le=1024)] | None = None
    """Intra-op threads (default 1)."""
    frame: str | None = None
    """The output frame id (default map)."""
    diagnostics_period: Duration | None = None
    """Period of the diagnostics message (at least 1ms; default 1s)."""
    safety: Safety | None = None
    """The degrade supervisor."""
    description: str | None = None
    """Free text."""
    realtime: Union[bool, Realtime, None] = None
    """SCHED_FIFO and pinning: true, false or {enabled, priority, cpus}."""


def task_keys(runtime: bool) -> tuple[str, ...]:
    """The task keys the analysis reads (``runtime=False``) or only the runtime does (``True``)."""
    return tuple(k for k, f in Task.model_fields.items() if any(m is RUNTIME for m in f.metadata) == runtime)


def json_schema() -> dict[str, Any]:
    """The stack file's JSON Schema (draft 2020-12), as ``rt-runtime schema`` prints it."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **StackFile.model_json_schema()}


STACK_KEYS = keys(StackFile)
TASK_KEYS = task_keys(runtime=False)
RUNTIME_TASK_KEYS = task_keys(runtime=True)
CHAIN_KEYS = keys(ChainEntry)
CHANNEL_KEYS = keys(Channel)
INGRESS_KEYS = keys(Ingress)
EGRESS_KEYS = keys(Egress)
JOIN_KEYS = keys(Join)
HYSTERESIS_KEYS = keys(Hysteresis)
SAFETY_KEYS = keys(Safety)
SPECULATE_KEYS = keys(Speculate)
REDUNDANCY_KEYS = keys(Redundancy)
