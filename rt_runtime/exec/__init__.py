"""The graph executor: one job of a graph, op by op, on a device inside its arenas."""
from .executor import GraphExecutor

__all__ = ["GraphExecutor"]
