"""Playback control from the keyboard of the terminal that runs `play` (or `replay --speed X`).

``KEYS`` maps a key press to a ``control.Command`` (``command_for``, pure); ``Keyboard`` is the thin adapter: a
thread that reads the terminal in cbreak mode (keys come one by one, unechoed; Ctrl-C still signals) only
when stdin is a tty, and gives the terminal back as it found it on ``close``."""
from __future__ import annotations

import os
import select
import sys
import threading
from typing import Callable

from . import control as C

SEEK_S = 5            # [ and ] seek this far back and on
RATE_STEP = 1.1       # + and - (or up and down) multiply the rate by this, as rosbag2's keys do (10 %)
UP, DOWN, RIGHT, LEFT = "\x1b[A", "\x1b[B", "\x1b[C", "\x1b[D"
KEYS = {"space": "pause / resume", "s or →": "play the next message (paused)", "n": "play one period (paused)",
        "+ or ↑": f"rate x{RATE_STEP:g}", "- or ↓": f"rate /{RATE_STEP:g}",
        "]": f"seek {SEEK_S} s on", "[ or ←": f"seek {SEEK_S} s back"}
HELP = "keys: " + "; ".join(f"{k}: {v}" for k, v in KEYS.items()) + "; Ctrl-C: stop"


def command_for(key: str, pb: C.Playback) -> C.Command | None:
    """The command a key press means now (None: not a key of ours); a rate key stops at the range's ends."""
    if key == " ":
        return C.Command("toggle")
    if key in ("s", RIGHT):
        return C.Command("step")
    if key == "n":
        return C.Command("period")
    if key in ("+", "=", UP, "-", DOWN):
        r = pb.rate * RATE_STEP if key in ("+", "=", UP) else pb.rate / RATE_STEP
        return C.Command("rate", min(C.RATE_MAX, max(C.RATE_MIN, r)))
    if key in ("]", "[", LEFT):
        return C.Command("seek_by", (SEEK_S if key == "]" else -SEEK_S) * 1_000_000_000)
    return None


class Keyboard:
    """Reads keys off a terminal into ``send``; ``say`` tells what a refused key was (one line)."""

    def __init__(self, send: Callable[[C.Command], object], state: Callable[[], C.Playback],
                 say: Callable[[str], None], fd: int | None = None) -> None:
        import termios
        import tty

        self.fd = sys.stdin.fileno() if fd is None else fd
        self.saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)   # ISIG stays: Ctrl-C is still SIGINT, the command's handler stops cleanly
        self.send, self.state, self.say = send, state, say
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._read, name="rt-keyboard", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        buf = ""
        while not self._stop.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if not ready:
                continue
            data = os.read(self.fd, 16)
            if not data:
                return
            buf += data.decode(errors="replace")
            while buf:
                key = buf[:3] if buf.startswith("\x1b[") and len(buf) >= 3 else buf[:1]
                if key == "\x1b" or (buf.startswith("\x1b[") and len(buf) < 3):
                    break   # the rest of an arrow key is on its way
                buf = buf[len(key):]
                cmd = command_for(key, self.state())
                if cmd is None:
                    continue
                try:
                    self.send(cmd)
                except C.ControlError as e:
                    self.say(str(e))

    def close(self) -> None:
        """Stop reading and give the terminal back as it was."""
        import termios

        self._stop.set()
        self.thread.join(1.0)
        termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)


def keyboard(send: Callable[[C.Command], object], state: Callable[[], C.Playback],
             say: Callable[[str], None]) -> Keyboard | None:
    """A ``Keyboard`` on stdin if it is a terminal (else None: piped, a test, a service)."""
    try:
        if not os.isatty(sys.stdin.fileno()):
            return None
    except (OSError, ValueError):
        return None
    return Keyboard(send, state, say)
