"""What a replay returns (``ReplayResult``), and ``ReplayError`` for a replay that cannot start."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..analysis.trace_stats import TaskTimes

# Counters of jobs that did not run as planned: a run with none of them is clean (ReplayResult.clean).
FAULTS = ("missed", "skipped", "aborted", "degraded", "stalls", "errors", "dropped_releases")
TIMINGS = ("budget", "measured")   # the virtual clock's (replay's ``timing``)


class ReplayError(ValueError):
    """A replay that cannot start: unreadable bag, missing topics, bad configuration."""


@dataclass
class ReplayResult:
    """What a replay did: per-task timing, digest, counts, and whether it stayed deterministic."""

    bag: str
    duration_s: float
    wall_s: float
    output_digest: str
    tasks: dict[str, TaskTimes]
    stats: dict[str, dict[str, Any]]
    outputs: dict[str, int]
    bad_messages: dict[str, dict[str, int]]   # topic -> kind (undecodable, nonfinite, crc, stamp_backwards, ...) -> n
    inputs: int
    exec_s: float = 0.0
    quality: dict[str, Any] | None = None
    out_bag: str | None = None
    trace: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    timing: str = "budget"   # "budget" | "measured" on the virtual clock; "wall" on the wall clock
    # Outputs depend only on the bag and the config (always so under budget timing); else why not.
    deterministic: bool = True
    nondeterminism: list[tuple[int, str]] = field(default_factory=list)
    hardware: dict[str, Any] | None = None   # analysis.hardware.hardware_report: this machine's timeline
    parallel: int = 1   # threads that computed the jobs (sched.parallel); 1 also where the driver computed them
    device: str = "cpu"   # what the graphs ran on: cpu, cpu-async (the asynchronous twin), cuda:N

    @property
    def speedup(self) -> float:
        """Bag duration over wall time."""
        return self.duration_s / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def misses(self) -> int:
        """Deadline misses over all tasks."""
        return sum(int(s.get("missed", 0)) for s in self.stats.values())

    @property
    def errors(self) -> int:
        """Jobs ended by an op that raised (a deterministic error, not a timing fault)."""
        return sum(int(s.get("errors", 0)) for s in self.stats.values())

    @property
    def faults(self) -> dict[str, int]:
        """Jobs that did not run as planned, by kind (missed, skipped, aborted, ...), the non-zero ones."""
        out = {k: sum(int(s.get(k, 0)) for s in self.stats.values()) for k in FAULTS}
        return {k: v for k, v in out.items() if v}

    @property
    def clean(self) -> bool:
        """No miss, no error, no watchdog reaction, no dropped release, no stall."""
        return not self.faults

    @property
    def inexact_commits(self) -> int:
        """Speculative outputs committed for inputs that were within tolerance but not bit-equal."""
        return sum(int(s.get("speculation", {}).get("inexact_hits", 0)) for s in self.stats.values())

    @property
    def runtime_share(self) -> float:
        """The part of wall time that was not op execution (scheduling, channels, decode, encode)."""
        return max(0.0, 1.0 - self.exec_s / self.wall_s) if self.wall_s > 0 else 0.0
