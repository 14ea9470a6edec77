"""Quoting a value in an error message: never more than about a hundred characters.

A template, a name or an event is someone else's input. Quoting it whole
lets a 509-byte YAML alias bomb become an 800 MB error string, so every
message quotes through ``quote``: a repr that is bounded while it is built
(reprlib looks at a few items of each container and a few levels deep), then
cut to QUOTE_LIMIT characters with an ellipsis. Stdlib only: the admin
commands import it.
"""

import reprlib

QUOTE_LIMIT = 100

_repr = reprlib.Repr()
_repr.maxlevel = 3
_repr.maxdict = _repr.maxlist = _repr.maxtuple = _repr.maxset = _repr.maxfrozenset = 4
_repr.maxstring = _repr.maxother = QUOTE_LIMIT
_repr.maxlong = 40


def quote(value, limit=QUOTE_LIMIT):
    """An unambiguous rendering of *value* for a message, at most *limit* characters."""
    try:
        text = _repr.repr(value)
    except ValueError:  # an int past Python's digit limit for str()
        text = f"<{type(value).__name__} too large to show>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def shorten(text, limit=QUOTE_LIMIT):
    """*text* itself (not a repr) cut to *limit* characters with an ellipsis."""
    return text if len(text) <= limit else text[:limit - 3] + "..."
