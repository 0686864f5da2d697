"""rt_runtime: a deterministic real-time runtime for robot perception, fusion and planning graphs.

The public API: the core model (``TensorSpec``, ``Op``, ``Graph``, ``Task``), static memory plans
(``rt_runtime.memory``), devices (``rt_runtime.device``) and the graph executor (``rt_runtime.exec``).
rclpy is optional: only ``rt_runtime.ros`` imports it.
"""
from .core import ContractError, Dim, Graph, GraphError, Job, Op, Task, TensorSpec, op, parse_duration

__version__ = "0.1.0"
__all__ = ["ContractError", "Dim", "Graph", "GraphError", "Job", "Op", "Task", "TensorSpec", "op",
           "parse_duration", "__version__"]
