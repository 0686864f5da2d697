"""Message metadata for ops: when the message a job read was stamped, which one it was, how old, and
whether the job had seen it before.

A graph that declares an input ``x.meta`` (``meta_spec("x")``: five int64) beside its input ``x``
gets, at every release, ``[t_ns, seq, age_ns, stale, stamp_ns]`` of the message it reads on ``x``:

* ``t_ns``: the message's logical timestamp: an ingress message's push time (a bag's log time
  minus its start, a ROS callback's arrival), a task output's publish instant;
* ``seq``: the channel's sequence number of that message (-1: handed over inside a chain, not
  published yet);
* ``age_ns``: the release instant minus ``t_ns``;
* ``stale``: 1 if this reader had read that message before (nothing new since), else 0;
* ``stamp_ns``: the instant the data describe, on the same timeline (so ``release - stamp_ns`` is
  the data's age since the sensor saw it): an ingress message's header stamp (its push time if it has
  no header); a task output carries the stamp of the message that released its job (of a join's
  messages, the oldest), as a ROS node copies its input's ``header.stamp``; a periodic task's output,
  its release instant; a chain member's output, its head's.

The binding maps only ``x`` to a channel; ``x.meta`` follows it. The rows come from a pool
allocated when the runtime is built (one row per job that can be alive at once, per metadata input):
a release writes five integers, nothing is allocated.
"""
from __future__ import annotations

from typing import Any, Iterable

from ..core.tensor import TensorSpec

SUFFIX = ".meta"
FIELDS = ("t_ns", "seq", "age_ns", "stale", "stamp_ns")


def meta_spec(input_name: str) -> TensorSpec:
    """The spec of the metadata input of graph input ``input_name``."""
    return TensorSpec(input_name + SUFFIX, (len(FIELDS),), "int64")


def meta_inputs(names: Iterable[str]) -> dict[str, str]:
    """Graph input names -> the input each ``x.meta`` describes (those whose base is an input too)."""
    names = set(names)
    return {n: n[: -len(SUFFIX)] for n in names if n.endswith(SUFFIX) and n[: -len(SUFFIX)] in names}


class MetaPool:
    """Preallocated metadata rows of one task: ``rows`` jobs' worth, used in turn."""

    __slots__ = ("names", "row_of", "buf", "host", "n", "i")

    def __init__(self, inputs: dict[str, str], rows: int) -> None:
        import torch

        self.names = sorted(inputs)                                     # the meta inputs, in row order
        self.row_of = {inputs[m]: k for k, m in enumerate(self.names)}  # base input -> its row
        self.n = max(1, rows)
        self.buf = torch.zeros((self.n, len(self.names), len(FIELDS)), dtype=torch.int64)
        self.host = self.buf.numpy()   # the same memory: writing five integers costs no torch dispatch
        self.i = 0

    def take(self) -> int:
        """The next job's block of rows (its index)."""
        i = self.i
        self.i = (i + 1) % self.n
        return i

    def fill(self, block: int, base: str, t_ns: int, seq: int, release_ns: int, stale: bool, stamp_ns: int) -> None:
        """Write the metadata of the message read on ``base`` into the job's block."""
        row = self.host[block, self.row_of[base]]
        row[0], row[1], row[2], row[3], row[4] = t_ns, seq, release_ns - t_ns, int(stale), stamp_ns

    def bind(self, block: int, inputs: dict[str, Any]) -> None:
        """Add the block's rows to a job's inputs, under the meta inputs' names."""
        rows = self.buf[block]
        for k, name in enumerate(self.names):
            inputs[name] = rows[k]
