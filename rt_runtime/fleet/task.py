"""One bag, one Dask task: the replay `rt-runtime replay` runs, made into one result row.

``replay_bag`` runs on a worker process. It calls the same functions as the replay command
(``stack_for_bag``, ``replay`` with its defaults, ``result_json``), so a row's digest is the one
``rt-runtime replay BAG --config C`` prints. Whatever goes wrong with the bag (unreadable,
missing topics, an exception mid-replay) comes back as a row with ``error`` set, not as a failed
task: only a worker that dies leaves the scheduler to retry the bag elsewhere. A row's
``code_version`` is the code the worker ran; where it differs from the client's (the code changed
during the batch, or a worker of a real cluster has other code) the row is kept, said so in its
``log`` and by the batch's summary, and never reused by a later batch.
"""
from __future__ import annotations

import contextlib
import io
import json
import resource
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any

QUANTILES = 101   # per task: response-time quantiles 0, 1, ..., 100 % (the fleet CDF pools them)
LOG_LINES = 20    # the replay's stderr lines kept in a row (bad-message warnings, notes)


@dataclass(frozen=True)
class BagJob:
    """What a worker needs to replay one bag, and the key its row is stored under."""

    bag: str
    bag_hash: str
    config: str
    config_hash: str
    code_version: str

    @property
    def key(self) -> str:
        """The row's identity: the same bag bytes, config bytes and code give the same key."""
        import hashlib

        return hashlib.sha256(f"{self.bag_hash}:{self.config_hash}:{self.code_version}".encode()).hexdigest()[:32]


def new_row(job: BagJob) -> dict[str, Any]:
    """A row with the job's identity and every result column empty (an error row as it stands)."""
    return {"key": job.key, "bag": job.bag, "bag_hash": job.bag_hash, "config": job.config,
            "config_hash": job.config_hash, "code_version": job.code_version, "duration_s": None,
            "output_digest": None, "deterministic": None, "clean": None, "misses": None, "errors": None,
            "faults": None, "tasks": [], "quality": None, "safety": None, "replay": None, "passed": False,
            "failures": "[]", "wall_s": None, "replay_wall_s": None, "worker": None, "peak_rss_mb": None,
            "started_unix": None, "finished_unix": None, "error": None, "log": ""}


def task_rows(r: Any) -> list[dict[str, Any]]:
    """Per task: jobs, misses, errors, p50/p99/max response (ms) and the response-time quantiles."""
    import numpy as np

    out = []
    for name, t in r.tasks.items():
        p = t.percentiles_ms()
        q = (np.percentile(t.response_ns, np.linspace(0, 100, QUANTILES)) / 1e6).tolist() if len(t.response_ns) else []
        s = r.stats[name]
        out.append({"name": name, "jobs": int(t.released), "misses": int(s.get("missed", 0)),
                    "errors": int(s.get("errors", 0)), "p50_ms": p["p50"], "p99_ms": p["p99"], "max_ms": p["max"],
                    "quantiles_ms": q})
    return out


def fill_row(row: dict[str, Any], r: Any, doc: dict[str, Any]) -> None:
    """Put one replay's results (``ReplayResult`` and its ``result_json``) into a row."""
    row.update(duration_s=r.duration_s, output_digest=r.output_digest, deterministic=bool(r.deterministic),
               clean=bool(r.clean), misses=int(r.misses), errors=int(r.errors), faults=json.dumps(r.faults),
               tasks=task_rows(r), quality=json.dumps(r.quality) if r.quality is not None else None,
               safety=json.dumps(doc["safety"]) if "safety" in doc else None, replay=json.dumps(doc),
               replay_wall_s=r.wall_s)


def one_line(e: BaseException) -> str:
    """An exception as one line: the message of the errors replay explains, else its type too."""
    from ..bag import BagError
    from ..config import ConfigError
    from ..replay import ReplayError

    text = str(e) if isinstance(e, (BagError, ConfigError, ReplayError)) else f"{type(e).__name__}: {e}"
    return " ".join(text.split())[:600]


def replay_bag(job: BagJob) -> dict[str, Any]:
    """Replay one bag on this worker (one torch thread) and return its row; errors are rows too."""
    import torch

    from .bags import code_version

    torch.set_num_threads(1)   # one core per worker: more threads only fight over the cores
    row = new_row(job)
    row["started_unix"] = time.time()
    t0 = time.perf_counter()
    log = io.StringIO()
    try:
        with contextlib.redirect_stderr(log), warnings.catch_warnings():
            warnings.simplefilter("always")   # each bag's row says what its own replay warned of
            row["code_version"] = mine = code_version()   # what ran here; the key holds what the client asked for
            if mine != job.code_version:
                print(f"rt-runtime batch: note: this worker runs rt_runtime {mine}, the client hashed "
                      f"{job.code_version}: the code changed during the batch, or the worker has other code",
                      file=sys.stderr)
            from ..commands.replay import result_json, stack_for_bag
            from ..replay import replay
            from ..replay.quality import quality_from_outputs

            # what `rt-runtime replay BAG --config C` runs, with its defaults (the same digest), except that
            # the jobs compute on this thread: one core per worker (the digest is the same for any --parallel)
            r = replay(job.bag, stack_for_bag(job.config, job.bag), quality=quality_from_outputs, parallel=0)
            fill_row(row, r, result_json(r))
    except Exception as e:   # noqa: BLE001 - any failure of this bag is this bag's row, never a lost batch
        row["error"] = one_line(e)
    row["wall_s"] = time.perf_counter() - t0
    row["finished_unix"] = time.time()
    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # Linux: KiB
    row["worker"] = _worker_address()
    row["log"] = "\n".join(log.getvalue().splitlines()[-LOG_LINES:])
    return row


def _worker_address() -> str:
    """This Dask worker's address, or the process id outside a worker."""
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        import os

        return f"pid {os.getpid()}"

