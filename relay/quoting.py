"""Quoting a value in an error message: never more than about a hundred characters.

A template, a name or an event is someone else's input. Quoting it whole
lets a 509-byte YAML alias bomb become an 800 MB error string, so every
message quotes through ``quote``: a repr that is bounded while it is built
(reprlib looks at a few items of each container and a few levels deep), then
cut to QUOTE_LIMIT characters with an ellipsis. Stdlib only: the admin
commands import it.

``show`` is the rendering a person reads in a message about a template or a
name: the value as YAML (and JSON) would write it, never as Python does --
``"users"`` with double quotes, ``null``, ``true``, ``[1, "a"]``,
``{"suffix": ["_test"]}`` -- bounded the same way, with control and
invisible format characters escaped so that no value can reach a terminal
as anything but text.

``printable`` is the rendering of someone else's text on a terminal, line by
line (``relay dlq``, ``relay runs``): the text itself, with every character a
terminal could act on written as an escape such as ``\\x1b``.
"""

from __future__ import annotations

import math
import reprlib
import unicodedata
from collections.abc import Iterable
from datetime import date
from typing import TypeVar

_Item = TypeVar("_Item")

QUOTE_LIMIT = 100

_repr = reprlib.Repr()
_repr.maxlevel = 3
_repr.maxdict = _repr.maxlist = _repr.maxtuple = _repr.maxset = _repr.maxfrozenset = 4
_repr.maxstring = _repr.maxother = QUOTE_LIMIT
_repr.maxlong = 40


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """An unambiguous rendering of *value* for a message, at most *limit* characters."""
    try:
        text = _repr.repr(value)
    except ValueError:  # an int past Python's digit limit for str()
        text = f"<{type(value).__name__} too large to show>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def shorten(text: str, limit: int = QUOTE_LIMIT) -> str:
    """*text* itself (not a repr) cut to *limit* characters with an ellipsis."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


_MAX_ITEMS = 4   # items shown of a list or mapping, then "..."
_MAX_LEVELS = 3  # nested lists and mappings shown, then [...] or {...}
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def show(value: object, limit: int = QUOTE_LIMIT) -> str:
    """*value* as YAML/JSON writes it, at most *limit* characters: ``"a"``, ``null``, ``true``, ``[1, 2]``."""
    text = _show(value, 0, limit)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _show(value: object, level: int, limit: int) -> str:
    if isinstance(value, dict):
        if level >= _MAX_LEVELS:
            return "{...}"
        items = [f"{_show(key, level + 1, limit)}: {_show(item, level + 1, limit)}"
                 for key, item in _first(value.items())]
        return "{" + ", ".join(items + ["..."] * (len(value) > _MAX_ITEMS)) + "}"
    if isinstance(value, (list, tuple, set, frozenset)):
        if level >= _MAX_LEVELS:
            return "[...]"
        items = [_show(item, level + 1, limit) for item in _first(value)]
        return "[" + ", ".join(items + ["..."] * (len(value) > _MAX_ITEMS)) + "]"
    return _scalar(value, limit)


def _scalar(value: object, limit: int) -> str:
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        try:
            return str(value)
        except ValueError:  # past Python's digit limit for str()
            return "a number too large to show"
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        return (".inf" if value > 0 else "-.inf") if math.isinf(value) else repr(value)
    if isinstance(value, date):  # a YAML timestamp (datetime is a date too)
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return f"binary data ({len(value)} bytes)"
    return _string(value if isinstance(value, str) else str(value)[:limit], limit)


def _first(items: Iterable[_Item]) -> list[_Item]:
    found: list[_Item] = []
    for item in items:
        if len(found) == _MAX_ITEMS:
            break
        found.append(item)
    return found


def _string(text: str, limit: int) -> str:
    """A double-quoted string; control, format and separator characters as \\uXXXX escapes."""
    out = []
    for character in text[:limit]:
        escape = _ESCAPES.get(character)
        if escape is None and unicodedata.category(character) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            escape = f"\\u{ord(character):04x}"
        out.append(escape or character)
    return '"' + "".join(out) + ('..."' if len(text) > limit else '"')


def printable(text: str) -> str:
    """*text* with every character that ``str.isprintable`` refuses written as a Python-style escape.

    Those are the characters a terminal could act on: C0 and C1 controls,
    ESC, DEL, bidirectional overrides, line separators, lone surrogates.
    ``\\n``, ``\\r`` and ``\\t`` keep their names; the rest are ``\\x1b``,
    ``\\u202e`` or ``\\U000e0001``. Printable text comes back unchanged.
    """
    if text.isprintable():
        return text
    return "".join(character if character.isprintable() else _escape(character) for character in text)


def _escape(character: str) -> str:
    code = ord(character)
    if character in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[character]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
