"""The playback core (``replay.control``) shared by threads: the player's loop reads it, the keyboard, the ROS
services and Foxglove's controls send it commands. One lock, one condition: a command wakes a loop that
waits for its next message, so a pause holds at once; listeners hear every change (off the lock)."""
from __future__ import annotations

import threading
import time
from typing import Callable

from . import control as C

Listener = Callable[[C.Playback, "C.Command | None"], None]


class Controller:
    """A ``Playback`` behind a lock; ``state`` is read without one (an immutable value, swapped whole)."""

    def __init__(self, pb: C.Playback, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.state = pb
        self.clock = clock
        self._cond = threading.Condition()
        self._listeners: list[Listener] = []

    def listen(self, fn: Listener) -> None:
        """Call ``fn(state, command)`` after every change (command None: the loop's own, e.g. a step taken)."""
        self._listeners.append(fn)

    def _set(self, pb: C.Playback, cmd: C.Command | None) -> C.Playback:
        with self._cond:
            changed = pb is not self.state
            self.state = pb
            self._cond.notify_all()
        if changed:
            for fn in self._listeners:
                fn(pb, cmd)
        return pb

    def command(self, cmd: C.Command) -> C.Playback:
        """Apply ``cmd`` now (ControlError, one line, for a bad one: the state is unchanged)."""
        with self._cond:
            pb = C.apply(self.state, cmd, self.clock())
        return self._set(pb, cmd)

    def update(self, fn: Callable[[C.Playback, int], C.Playback]) -> C.Playback:
        """The loop's own change: ``fn(state, now)`` under the lock."""
        with self._cond:
            pb = fn(self.state, self.clock())
        return self._set(pb, None)

    def take_step(self, bag_ns: int) -> bool:
        """If a step is pending: consume it, holding bag time at ``bag_ns`` (the message it releases)."""
        with self._cond:
            if not (self.state.paused and self.state.steps):
                return False
            pb = C.took_step(self.state, self.clock(), bag_ns)
        self._set(pb, None)
        return True

    def step_and_wait(self, timeout_s: float) -> bool:
        """Ask for one step and wait until the loop took it (rosbag2's play_next answers once published)."""
        pb = self.command(C.Command("step"))
        want = pb.steps - 1
        end = time.monotonic() + timeout_s
        with self._cond:
            while self.state.paused and self.state.steps > want:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return self.state.paused

    def wait(self, timeout_s: float) -> None:
        """Sleep up to ``timeout_s``, or until a command changes the state."""
        if timeout_s <= 0:
            return
        version = self.state.version
        with self._cond:
            if self.state.version == version:
                self._cond.wait(timeout_s)
