"""Secret values out of text a person will read: a handler's output kept in the run ledger.

A handler may print a secret it was given (a connection string in a stack
trace, a token in a debug line). Every run of four or more printable
characters of each secret value is replaced with ``***`` wherever it
appears, so a multi-line value (a PEM key) is masked line by line. A
shorter piece could not be told from ordinary text and is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"
_PIECE = re.compile(r"[^\x00-\x1f\x7f]{4,}")


def secret_pieces(values: Iterable[str]) -> tuple[str, ...]:
    """What ``mask`` replaces for *values*, longest first (so a value that holds another is masked whole)."""
    pieces = {piece for value in values for piece in _PIECE.findall(value)}
    return tuple(sorted(pieces, key=len, reverse=True))


def mask(text: str, pieces: tuple[str, ...]) -> str:
    """*text* with every one of *pieces* (``secret_pieces``) replaced by ``***``."""
    for piece in pieces:
        if piece in text:
            text = text.replace(piece, MASK)
    return text
