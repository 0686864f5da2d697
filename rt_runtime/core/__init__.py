"""The pure core: tensors, ops, graphs, tasks and jobs. Plain data and functions; no threads, no I/O."""
from .graph import CriticalPath, Graph, GraphError
from .op import Op, op
from .task import Job, Task, TaskError
from .tensor import ContractError, Dim, TensorSpec
from .units import DurationError, format_duration, parse_duration

__all__ = [
    "ContractError", "CriticalPath", "Dim", "DurationError", "Graph", "GraphError", "Job", "Op", "Task",
    "TaskError", "TensorSpec", "format_duration", "op", "parse_duration",
]
