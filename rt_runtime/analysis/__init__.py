"""Schedulability analysis: utilization bounds, fixed-priority RTA, EDF demand and response times,
cause-effect chain latency, and the holistic analysis of event chains (cpa, offsets, e2e). Pure
functions on ``Task`` lists, integer nanoseconds, no I/O."""
from .bounds import (density, edf_utilization_test, exact_utilization, hyperbolic_product, hyperbolic_test,
                     liu_layland_bound, liu_layland_test, utilization)
from .chains import Chain, ChainBounds, chain_bounds, davare_bound, let_data_age, let_reaction_time
from .cpa import Activation, EventModel, HolisticResult, holistic
from .edf import DemandResult, SpuriResult, demand_bound, qpa, spuri_response_times
from .rta import RTAResult, blocking_terms, fixed_priority_analysis, longest_op_ns, priority_order, response_time
from .schedulability import POLICIES, SchedulabilityReport, TaskResult, analyze_taskset, validate_for_policy
from .e2e import analyze_system  # noqa: E402  (needs schedulability first)

__all__ = [
    "POLICIES", "Activation", "Chain", "ChainBounds", "DemandResult", "EventModel", "HolisticResult",
    "RTAResult", "SchedulabilityReport", "SpuriResult", "TaskResult", "analyze_system", "analyze_taskset",
    "blocking_terms", "chain_bounds", "davare_bound", "demand_bound", "density", "edf_utilization_test",
    "exact_utilization", "fixed_priority_analysis", "holistic", "hyperbolic_product", "hyperbolic_test",
    "let_data_age", "let_reaction_time", "liu_layland_bound", "liu_layland_test", "longest_op_ns",
    "priority_order", "qpa", "response_time", "spuri_response_times", "utilization", "validate_for_policy",
]
