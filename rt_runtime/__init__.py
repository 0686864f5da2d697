"""rt_runtime: a deterministic real-time runtime for robot perception, fusion and planning graphs.

The public API: the core model (``TensorSpec``, ``Op``, ``Graph``, ``Task``), static memory plans
(``rt_runtime.memory``), devices (``rt_runtime.device``) and the graph executor (``rt_runtime.exec``).
rclpy is optional: only ``rt_runtime.ros`` imports it.
"""
from typing import Any

__version__ = "0.1.0"
__all__ = ["ContractError", "Dim", "Graph", "GraphError", "Job", "Op", "Task", "TensorSpec", "op",
           "parse_duration", "__version__"]


def __getattr__(name: str) -> Any:
    """The core model's names, imported on first use (PEP 562): ``rt-runtime`` starts, and handles a
    Ctrl-C, before torch is loaded."""
    if name in __all__:
        from . import core

        return getattr(core, name)
    raise AttributeError(f"module 'rt_runtime' has no attribute {name!r}")
