"""The Dask adapter: an embedded LocalCluster or an existing scheduler, and one task per bag.

Embedded (no address): one process worker per core, one thread each, on 127.0.0.1, no dashboard,
Dask's logging silenced (the batch reports every bag itself), and ``allowed-failures: 1``: a bag
whose worker dies is run once more on a fresh worker, and a second death makes it a failed row
(``KilledWorker``). Against ``--cluster ADDRESS`` the scheduler's own ``allowed-failures`` applies
(Dask's default is 3; set ``DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=1`` where it starts).
Embedded workers start without Dask's ``MALLOC_TRIM_THRESHOLD_`` (see ``open_client``); start your
own with ``DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON__MALLOC_TRIM_THRESHOLD_=None`` for the same.
"""
from __future__ import annotations

import contextlib
import logging
import os
import queue
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from .task import BagJob, new_row, replay_bag

CONNECT_TIMEOUT_S = 20.0
WORKERS_TIMEOUT_S = 60.0
POLL_S = 0.25          # how often the loop looks at the stop flag while no bag finishes
_LOGGERS = ("distributed", "tornado", "asyncio")


class ClusterError(ValueError):
    """A scheduler that cannot be reached or has no workers: one line naming --cluster."""


@dataclass
class ClusterInfo:
    """What the batch ran on, for the report."""

    address: str
    workers: int
    embedded: bool

    def to_json(self) -> dict[str, Any]:
        """The ``"cluster"`` object of ``batch --json``."""
        return {"address": self.address, "workers": self.workers, "embedded": self.embedded}


@contextlib.contextmanager
def quiet_dask() -> Iterator[None]:
    """Dask's and tornado's log lines off while the batch runs (failures are rows, not log lines)."""
    saved = {name: logging.getLogger(name).level for name in _LOGGERS}
    for name in _LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, run in each embedded worker process as it starts: Ctrl-C is the client's.

    A terminal sends SIGINT to its whole process group, the workers included; the client cancels
    their tasks and closes the cluster, so a worker ignores it rather than die with a traceback.
    """
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def open_client(address: str | None, workers: int | None) -> Iterator[tuple[Any, ClusterInfo]]:
    """A connected ``distributed.Client`` and what it runs on; the embedded cluster is closed after."""
    import dask
    from distributed import Client, LocalCluster

    cluster = None
    settings = {"distributed.scheduler.allowed-failures": 1, "logging.distributed": "critical",
                "distributed.admin.tick.limit": "1h",   # a replay holds the GIL for long stretches: no warnings
                # Dask's MALLOC_TRIM_THRESHOLD_ fixes glibc's mmap threshold: every frame-sized array is
                # then a fresh mmap, page-faulted in; a replay ran 1.8x slower with it (docs/BENCHMARKS.md)
                "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
    with dask.config.set(settings):
        if address is None:
            n = workers or os.cpu_count() or 1
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                                   dashboard_address=None, silence_logs=logging.CRITICAL,
                                   preload=[__name__])   # dask_setup below, in each worker process
            client = Client(cluster, set_as_default=False)
        else:
            try:
                client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
            except (OSError, TimeoutError, ValueError) as e:
                raise ClusterError(f"--cluster {address}: cannot connect to a Dask scheduler there "
                                   f"within {CONNECT_TIMEOUT_S:g} s ({type(e).__name__}: {e})") from None
    try:
        if cluster is None:
            try:
                client.wait_for_workers(workers or 1, timeout=WORKERS_TIMEOUT_S)
            except (OSError, TimeoutError) as e:
                have = len(client.scheduler_info(n_workers=-1)["workers"])
                raise ClusterError(f"--cluster {address}: {have} worker(s) connected to the scheduler, "
                                   f"waited {WORKERS_TIMEOUT_S:g} s for {workers or 1} ({type(e).__name__})") from None
        n_now = len(client.scheduler_info(n_workers=-1)["workers"])
        yield client, ClusterInfo(str(client.scheduler.address), n_now, cluster is not None)
    finally:
        with contextlib.suppress(Exception):
            client.close(timeout=10)
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.close(timeout=10)


def run_jobs(client: Any, jobs: Sequence[BagJob], on_row: Callable[[dict[str, Any]], None],
             stop: Callable[[], str | None] | None = None,
             task: Callable[[BagJob], dict[str, Any]] = replay_bag) -> str | None:
    """Submit one task per job and call ``on_row`` with each row as it arrives, in completion order.

    A task that fails as a whole (its worker died twice: ``KilledWorker``) is a row with its error.
    ``stop`` is polled while waiting; once it returns a signal name the unfinished tasks are
    cancelled and that name is returned (the rows already passed to ``on_row`` stand).
    ``task`` is the function each worker runs (``replay_bag``; tests give another).
    """
    done: "queue.Queue[Any]" = queue.Queue()
    futures = {}
    for job in jobs:
        f = client.submit(task, job, key=f"replay-{job.key}", pure=False)
        futures[f.key] = (f, job)
        f.add_done_callback(done.put)
    left = len(futures)
    try:
        while left:
            cut = stop() if stop is not None else None
            try:
                f = done.get(timeout=POLL_S) if not cut else done.get_nowait()
            except queue.Empty:
                if cut:
                    return cut   # the bags that finished before the signal are all in
                continue
            left -= 1
            _, job = futures[f.key]
            on_row(_row_of(f, job))
        return None
    finally:
        pending = [f for f, _ in futures.values() if not f.done()]
        if pending:
            with contextlib.suppress(Exception):
                client.cancel(pending, force=True)


def _row_of(f: Any, job: BagJob) -> dict[str, Any]:
    """The task's row, or an error row when the task itself failed (worker lost, cancelled)."""
    t0 = time.time()
    try:
        return f.result()
    except BaseException as e:   # noqa: BLE001 - KilledWorker, CancelledError, a pickling error: this bag's row
        if isinstance(e, KeyboardInterrupt):
            raise
        row = new_row(job)
        kind = type(e).__name__
        why = ("its worker died while replaying it, on every try" if kind == "KilledWorker"
               else " ".join(str(e).split())[:400])
        row.update(error=f"{kind}: {why}", finished_unix=t0)
        return row
