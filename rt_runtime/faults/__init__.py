"""Fault injection: a campaign of single faults (bit flips, hung or raising ops, corrupt, late or silent
sensors) injected into the stack on a recorded scenario, each judged against a golden run
(``rt-runtime faults``, docs/SAFETY.md). A tool that drives the stack through ``drive``, as replay
does; what it exercises is in ``rt_runtime.safety``.

Light to import: the modules load on first use (``faults.campaign``, ``faults.harness``, ``faults.inject``).
"""
