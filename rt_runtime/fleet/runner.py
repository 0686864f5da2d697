"""A batch, in order: key every bag, take the rows the store has, replay the rest, gate every row.

1. Each bag gets its key: bag content hash + config hash + code version (``BagJob.key``).
2. A bag whose key has a stored row without an error, made by this code, is not replayed again
   (``resumed``): a batch cut short by a crash or Ctrl-C goes on where it stopped. Error rows (and
   rows a worker made with other code) are replayed again.
3. The other bags go to the cluster, one task each; every row is stored as it arrives, so an
   interrupt keeps all finished rows.
4. Gates are checked on every row against this run's ``--expect`` (stored rows too: a new expect
   file needs no replay). A bag passes when it has no error and no bound is broken.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from .bags import code_version, config_hash, content_hash
from .gates import Bound, check
from .store import ResultsStore
from .task import BagJob


@dataclass
class BagOutcome:
    """One bag of a batch: its row, whether it came from the store, and its broken bounds."""

    bag: str
    row: dict[str, Any]
    resumed: bool = False
    failures: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No error and every bound held."""
        return self.row.get("error") is None and not self.failures


def make_jobs(bags: Sequence[str | Path], config: str | Path,
              stop: Callable[[], str | None] | None = None) -> list[BagJob]:
    """One job per bag, keyed by its content (read whole once, in blocks), the config and the code.

    ``stop`` is polled between bags (hashing a fleet's bags takes a while): a signal raises ``Interrupted``."""
    from ..outpaths import Interrupted

    cfg_hash, code = config_hash(config), code_version()
    jobs = []
    for b in bags:
        if stop is not None and stop():
            raise Interrupted(stop() or "SIGINT")
        jobs.append(BagJob(str(b), content_hash(b), str(config), cfg_hash, code))
    return jobs


def gate_row(row: dict[str, Any], bounds: Sequence[Bound]) -> list[dict[str, Any]]:
    """The broken bounds of a row (none for an error row: its error is its failure)."""
    if row.get("error") is not None or row.get("replay") is None:
        return []
    return [f.to_json() for f in check(json.loads(row["replay"]), list(bounds))]


def run_batch(jobs: Sequence[BagJob], store: ResultsStore, bounds: Sequence[Bound],
              run: Callable[[list[BagJob], Callable[[dict[str, Any]], None]], str | None], *,
              progress: Any = None) -> tuple[list[BagOutcome], str | None]:
    """Replay what the store lacks, store each row as it lands; (outcomes in job order, interrupting signal).

    ``run(jobs, on_row)`` replays jobs and passes each row to ``on_row`` as it arrives, returning the
    signal that cut it short or None (``cluster.run_jobs`` on a client; not called when the store
    has every row, so no cluster is started for nothing). ``progress``: an object with
    ``update(n)`` (a tqdm bar) told of every bag done or resumed.
    """
    by_key: dict[str, list[BagJob]] = {}
    for job in jobs:
        by_key.setdefault(job.key, []).append(job)   # copies of one bag: replayed once
    outcomes: dict[str, BagOutcome] = {}

    def land(row: dict[str, Any], resumed: bool) -> None:
        failures = gate_row(row, bounds)
        if not resumed:
            row = {**row, "passed": row.get("error") is None and not failures, "failures": json.dumps(failures)}
            store.put(row)
        for job in by_key[row["key"]]:
            outcomes[job.bag] = BagOutcome(job.bag, {**row, "bag": job.bag}, resumed, failures)
            if progress is not None:
                progress.update(1)

    todo = []
    for key, same in by_key.items():
        old = store.get(key)
        if old is not None and old.get("error") is None and old.get("code_version") == same[0].code_version:
            land(old, resumed=True)
        else:
            todo.append(same[0])
    interrupted = run(todo, lambda row: land(row, resumed=False)) if todo else None
    return [outcomes[j.bag] for j in jobs if j.bag in outcomes], interrupted

