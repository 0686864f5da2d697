"""Static memory planning: tensor lifetimes, offset planning, and the arenas that hold the result."""
from .arena import Arena, PoolKind
from .lifetime import lifetimes
from .planner import Buffer, MemoryPlan, plan_buffers, plan_offsets

__all__ = ["plan_offsets", "plan_buffers", "Buffer", "MemoryPlan", "lifetimes", "Arena", "PoolKind"]
