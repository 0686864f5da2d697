"""Tensor lifetimes from an execution order: the input the memory planner needs."""
from __future__ import annotations

from typing import AbstractSet, Sequence


def lifetimes(
    order: Sequence[tuple[str, Sequence[str], Sequence[str]]],
    keep_alive: AbstractSet[str] = frozenset(),
) -> dict[str, tuple[int, int]]:
    """Map each tensor produced in `order` to its inclusive (producing step, last consuming step).

    `order` lists steps as `(op_name, input_tensor_names, output_tensor_names)`. A tensor nobody
    consumes still lives for its producing step; tensors in `keep_alive` (graph outputs) live to
    the last step. Tensors never produced (graph inputs) are left out: they are not planned here.
    """
    span: dict[str, list[int]] = {}
    consumed_early: dict[str, tuple[int, str]] = {}  # graph-input reads, to catch name reuse
    for step, (op, inputs, outputs) in enumerate(order):
        for name in inputs:
            if name in span:
                span[name][1] = step
            else:
                consumed_early.setdefault(name, (step, op))
        for name in outputs:
            if name in span:
                raise ValueError(
                    f"tensor {name!r} is produced twice (steps {span[name][0]} and {step}, op {op!r}); "
                    f"give in-place results their own name and declare alias_of instead"
                )
            if name in consumed_early:
                read_step, reader = consumed_early[name]
                # Planning this would let the producer overwrite memory an earlier step read.
                raise ValueError(
                    f"tensor {name!r} is consumed at step {read_step} (op {reader!r}) before it is "
                    f"produced at step {step} (op {op!r})"
                )
            span[name] = [step, step]
    end = len(order) - 1
    for name in keep_alive:
        if name in span:
            span[name][1] = end
    return {name: (first, last) for name, (first, last) in span.items()}
