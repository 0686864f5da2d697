"""Errors and warnings of the bag layer: each message names the file or topic, what was expected
and what was found, so a user can act on it without a traceback."""
from __future__ import annotations


class BagError(Exception):
    """A bag that cannot be opened, read or written (missing, truncated beyond use, corrupt)."""


class CodecError(BagError):
    """A message that cannot be converted to or from arrays (bad layout, size, type)."""


class BagWarning(UserWarning):
    """Something was skipped but reading went on (truncated file, undecodable messages)."""


def one_line(text: str, limit: int = 240) -> str:
    """`text` on one line (runs of whitespace made one space), cut to `limit` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
