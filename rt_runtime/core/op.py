"""Op: one step of a graph, a named callable that writes its outputs into views it is given."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from .tensor import ContractError, TensorSpec

# fn(*inputs, *outputs, *workspace) -> None. The op never returns fresh tensors on the hot path:
# the executor hands it views into the task's arena, planned ahead of time.
OpFn = Callable[..., None]


@dataclass(frozen=True, eq=False)
class Op:
    """A named kernel with input and output contracts.

    ``fn`` is called as ``fn(*inputs, *outputs, *workspace)`` and must write its results into the
    output views (``out[...] = ...`` / ``torch.xxx(..., out=out)``). ``inplace`` maps an output to
    the input whose memory it may reuse; ``capturable`` says the op may be recorded into a CUDA
    graph (no host sync, no data-dependent shapes); ``deterministic`` says equal inputs give
    bit-equal outputs; ``cost_us`` is the estimate the critical path and first budgets use.
    """

    name: str
    fn: OpFn
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    workspace: tuple[TensorSpec, ...] = ()
    inplace: Mapping[str, str] = field(default_factory=dict)
    capturable: bool = False
    deterministic: bool = True
    cost_us: float = 1.0

    def __post_init__(self) -> None:
        for attr in ("inputs", "outputs", "workspace"):
            specs = tuple(getattr(self, attr))
            for s in specs:
                if not isinstance(s, TensorSpec):
                    raise ContractError(attr, "TensorSpec", type(s).__name__, tensor=str(s), op=self.name)
            object.__setattr__(self, attr, specs)
        if not callable(self.fn):
            raise ContractError("fn", "a callable", type(self.fn).__name__, tensor="-", op=self.name)
        names = [s.name for s in self.inputs + self.outputs + self.workspace]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ContractError("name", "each tensor once per op", f"{sorted(dup)} repeated",
                                tensor=sorted(dup)[0], op=self.name)
        ins = {s.name: s for s in self.inputs}
        outs = {s.name: s for s in self.outputs}
        for out, src in dict(self.inplace).items():
            if out not in outs or src not in ins:
                raise ContractError("inplace", "an output mapped to one of the op's inputs",
                                    f"{out!r} -> {src!r}", tensor=out, op=self.name)
            if outs[out].max_nbytes > ins[src].max_nbytes or outs[out].device != ins[src].device:
                raise ContractError("inplace", f"fits in input '{src}' ({ins[src]})", str(outs[out]),
                                    tensor=out, op=self.name)
        if self.cost_us < 0:
            raise ContractError("cost_us", "a non-negative estimate", self.cost_us, tensor="-", op=self.name)
        object.__setattr__(self, "inplace", dict(self.inplace))

    @property
    def input_names(self) -> tuple[str, ...]:
        """Names of the tensors the op reads."""
        return tuple(s.name for s in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        """Names of the tensors the op writes."""
        return tuple(s.name for s in self.outputs)

    def __repr__(self) -> str:
        return f"Op({self.name!r}, {list(self.input_names)} -> {list(self.output_names)})"


def op(name: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], **kw: object) -> Callable[[OpFn], Op]:
    """Decorator: turn a function into an ``Op`` with the given contracts."""

    def wrap(fn: OpFn) -> Op:
        return Op(name, fn, tuple(inputs), tuple(outputs), **kw)  # type: ignore[arg-type]

    return wrap
