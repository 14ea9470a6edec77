"""Collecting every problem of a template, each with the path of the field.

Messages stay short whatever the template holds: values are quoted through
``show`` (about 100 characters at most), a field name in a path is cut the
same way, a message is capped as a backstop, and an error lists at most
MAX_LISTED problems, then says how many more there are (relay.errors.InvalidTemplate).
"""

from relay.errors import InvalidTemplate
from relay.quoting import QUOTE_LIMIT, quote, shorten

MAX_MESSAGE = 3 * QUOTE_LIMIT


class Problems:
    """The problems found so far, as (field path, message) pairs."""

    def __init__(self):
        self.items = []

    def add(self, path, message):
        self.items.append((shorten(path, 2 * QUOTE_LIMIT), shorten(message, MAX_MESSAGE)))

    def raise_if_any(self, source):
        if self.items:
            raise InvalidTemplate(source, self.items)

    def __len__(self):
        return len(self.items)


def join(path, key):
    """Extend a field path: join("events[1].pattern", "created_at") → "events[1].pattern.created_at"."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    key = shorten(key if isinstance(key, str) else quote(key))
    return f"{path}.{key}" if path else key


def reason(error, value):
    """*error*'s text with any full quotation of *value* in it shortened like ``show``."""
    return str(error).replace(repr(value), show(value))


def show(value):
    """A short, unambiguous rendering of a YAML value for a message (see relay.quoting)."""
    return quote(value)
