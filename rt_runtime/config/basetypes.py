"""The schema's small pieces that need nothing of the runtime: durations, refs, ``realtime:``, ``keys``,
``validate`` (a model's errors as one line).

``config.schema`` (the stack file's models) re-exports them; the DeadlineExecutor's configuration
(``ros.deadline.config``) and ``config.realtime`` take them from here, so reading that file imports
pydantic and ``core.units`` only, not the scheduler, the codecs and torch that the stack schema needs.
"""
from __future__ import annotations

from typing import Annotated, Any, Mapping

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, ValidationError
from pydantic_core import PydanticCustomError

from ..core.units import DURATION_RE, clip

_DURATION = 'a duration with a unit, such as "10ms", "250us" or "1.5s"'


def _duration_text(value: object) -> object:
    """A duration must be text with its unit: a bare number is refused as such, not as "not a string"."""
    if isinstance(value, str):
        return value
    raise PydanticCustomError("duration_type", _DURATION)


# A duration with its unit, as ``core.units.parse_duration`` reads it ("10ms", "250us", "1.5s", "500ns").
Duration = Annotated[str, StringConstraints(pattern=DURATION_RE.pattern), BeforeValidator(_duration_text)]
# ``package.module:function``, as ``stack.resolve`` imports it.
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
Ref = Annotated[str, StringConstraints(pattern=rf"^{_IDENT}(\.{_IDENT})*:{_IDENT}$")]


class Model(BaseModel):
    """A config model: unknown keys refused, types strict, each field's docstring its description."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)


class Realtime(Model):
    """SCHED_FIFO and CPU pinning of the runtime's workers."""

    enabled: bool = True
    """SCHED_FIFO and pinning where the OS permits."""
    priority: Annotated[int, Field(ge=1, le=98)] = 50
    """The workers' SCHED_FIFO priority (the timekeeper runs one above)."""
    cpus: Annotated[list[int], Field(min_length=1)] | None = None
    """CPUs the workers are pinned to, in turn (default: every CPU the process may use)."""


def keys(model: type[BaseModel]) -> tuple[str, ...]:
    """The model's keys, in declaration order."""
    return tuple(model.model_fields)


REALTIME_KEYS = keys(Realtime)


_KINDS = {"float_type": "a number", "int_type": "an integer", "bool_type": "true or false", "string_type": "text",
          "list_type": "a list", "dict_type": "a mapping", "missing": "a value (it is required)"}
_PATTERNS = {DURATION_RE.pattern: _DURATION,
             Ref.__metadata__[0].pattern: "'package.module:function'"}


def _expected(err: Mapping[str, Any]) -> str:
    """What one pydantic error says was expected, in the words the hand-written checks use."""
    kind, ctx = err["type"], err.get("ctx") or {}
    for bound, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if bound in ctx:
            return f"{'an integer' if isinstance(ctx[bound], int) else 'a number'} {op} {ctx[bound]:g}"
    if kind == "literal_error":
        return f"one of {ctx['expected']}"
    if kind == "string_pattern_mismatch":
        return _PATTERNS.get(ctx.get("pattern", ""), f"text matching {ctx.get('pattern')}")
    return _KINDS.get(kind) or str(err["msg"]).replace("Input should be ", "")


def validate(model: type[BaseModel], value: Mapping[str, Any]) -> BaseModel:
    """``value`` checked against ``model``; ValueError with one line (``key.path: expected X, found Y``).

    Of a union's alternatives the one that got furthest into the value is reported (``atol.odom.1`` rather
    than "not a number"); where none got further than the key, each alternative is named.
    """
    try:
        return model.model_validate(value)
    except ValidationError as e:
        errors = e.errors(include_url=False)
    # pydantic names a union's alternatives in the location ('list[constrained-float]'): not keys of the file
    paths = [[p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or "-" in p or p in _TAGS))]
             for err in errors]
    depth = max(map(len, paths))
    deepest = [(p, err) for p, err in zip(paths, errors) if len(p) == depth]
    path, err = deepest[0]
    where = ".".join(map(str, path))
    if err["type"] == "extra_forbidden":
        unknown = sorted(str(p[-1]) for p, x in deepest if x["type"] == "extra_forbidden")
        known = keys(model) if depth == 1 else ()
        raise ValueError(f"{'.'.join(map(str, path[:-1])) + ': ' if depth > 1 else ''}unknown key(s) {unknown}"
                         + (f"; expected {', '.join(known)}" if known else "")) from None
    alternatives = list(dict.fromkeys(_expected(x) for _, x in deepest))
    expected = " or ".join([", ".join(alternatives[:-1]), alternatives[-1]] if len(alternatives) > 1 else alternatives)
    found = "" if err["type"] == "missing" else f", found {clip(err['input'])}"
    raise ValueError(f"{where}: expected {expected}{found}") from None


_TAGS = {"float", "int", "str", "bool", "list", "dict", "none"}
