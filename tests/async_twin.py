"""Shared pieces of the cpu-async twin's tests: the twin as a fixture, and launched work held at a gate."""
from __future__ import annotations

import threading
from typing import Callable

import pytest
import torch

from rt_runtime.device import device_for


@pytest.fixture
def twin():
    """The asynchronous CPU twin, closed after the test."""
    dev = device_for("cpu-async")
    yield dev
    dev.close()


def gated_fill(gate: threading.Event, dst: torch.Tensor, value: float) -> Callable[[], None]:
    """Work for a stream: wait for ``gate``, then fill ``dst``; so the test decides when it completes."""
    def fill() -> None:
        gate.wait(10)
        dst.fill_(value)
    return fill
