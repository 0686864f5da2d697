"""Processes that render the simulator's heavy sensor frames, in order, and stop cleanly on a signal.

Not ``multiprocessing.Pool`` (nor ``ProcessPoolExecutor``): their processes share one result pipe and
its lock, so one that a signal ends in the middle of sending a frame leaves the lock held or half a
message in the pipe, and the parent waits for ever (a SIGTERM to the process group, as ``timeout``
or a service manager sends it, did that in one run of two). Here each renderer has its own pair of
pipes, ignores SIGINT and SIGTERM (its parent decides: it stops after the message it is writing) and
is killed by the parent when it is done; one that dies all the same (killed, out of memory) shows as
the end of its pipe, a ``RenderError``, never as a wait.
"""
from __future__ import annotations

import gc
import multiprocessing as mp
import signal
from collections.abc import Callable, Iterator, Sequence
from typing import Any


class RenderError(RuntimeError):
    """A process rendering sensor frames ended abruptly (killed, out of memory)."""


def _serve(render: Callable[[Any], Any], jobs: Any, frames: Any, parent_ends: Sequence[Any]) -> None:
    """A renderer's loop: a job in, its frame (or the exception it raised) out, until its parent goes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for end in parent_ends:   # so that the parent's exit is the end of this renderer's job pipe
        end.close()
    try:
        while True:
            job = jobs.recv()
            try:
                out = render(job)
            except Exception as e:  # noqa: BLE001 - a failed frame is the parent's to raise
                out = e
            frames.send(out)
    except (EOFError, OSError):   # the parent closed its end or is gone
        return


class Renderers:
    """``n`` forked processes computing ``render(job)``; ``frames(jobs)`` yields the results in job order,
    with at most ``ahead`` jobs per process handed out before their frames are used."""

    def __init__(self, render: Callable[[Any], Any], n: int, ahead: int = 2) -> None:
        ctx = mp.get_context("fork")   # the renderers inherit the scene (no pickling of the world)
        self.ahead = ahead
        self._procs: list[Any] = []
        self._jobs: list[Any] = []
        self._frames: list[Any] = []
        # A forked child inherits every object of a parent that may run DDS, torch or a websocket server
        # on threads the child does not have; its garbage collector once finalized such an object and the
        # renderer died of a segmentation fault (CI, after in-process rclpy tests). What exists now is
        # collected here, in the parent, then frozen: the children's collector never looks at it.
        gc.collect()
        gc.freeze()
        try:
            for _ in range(n):
                job_r, job_w = ctx.Pipe(duplex=False)
                frame_r, frame_w = ctx.Pipe(duplex=False)
                p = ctx.Process(target=_serve, args=(render, job_r, frame_w, (job_w, frame_r)), daemon=True,
                                name="rt-sim-render")
                p.start()
                job_r.close()     # the parent keeps only its own ends: a renderer's exit is EOF on its frame pipe
                frame_w.close()
                self._procs.append(p)
                self._jobs.append(job_w)
                self._frames.append(frame_r)
        except BaseException:
            self.close()
            raise
        finally:
            gc.unfreeze()

    def frames(self, jobs: Sequence[Any]) -> Iterator[Any]:
        """``render(job)`` of every job, in order (job i goes to process i mod n)."""
        n = len(self._procs)
        handed = 0

        def hand_out() -> None:
            nonlocal handed
            if handed < len(jobs):
                try:
                    self._jobs[handed % n].send(jobs[handed])
                except OSError:   # that renderer is gone: reading its frame pipe says so, in job order
                    pass
                handed += 1

        for _ in range(min(len(jobs), self.ahead * n)):
            hand_out()
        for i in range(len(jobs)):
            try:
                out = self._frames[i % n].recv()
            except (EOFError, OSError):
                code = self._procs[i % n].exitcode
                raise RenderError(f"a process rendering sensor frames ended abruptly (exit status {code}) "
                                  f"at frame {i} of {len(jobs)}") from None
            if isinstance(out, BaseException):
                raise out
            hand_out()
            yield out

    def close(self) -> None:
        """Kill the renderers (whatever they were computing is not needed) and release their pipes."""
        for p in self._procs:
            if p.is_alive():
                p.kill()
        for p in self._procs:
            p.join()
        for c in self._jobs + self._frames:
            c.close()
        self._procs, self._jobs, self._frames = [], [], []
