"""The graph executor: one job of a graph, op by op, on a device inside its arenas; op bodies as kernels."""
from .executor import GraphExecutor
from .kernel import Kernel, KernelError, kernel

__all__ = ["GraphExecutor", "Kernel", "KernelError", "kernel"]
