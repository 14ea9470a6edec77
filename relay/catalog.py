"""The functions Relay is serving, as an immutable snapshot.

The dispatcher takes one snapshot per entry and keeps it for the whole
dispatch, so a reconcile that swaps a function in or out never changes the
rules under a running dispatch; in-flight invocations finish on the version
they started with.
"""

from dataclasses import dataclass

from relay.functions import Function


@dataclass(frozen=True, eq=False)
class ActiveFunction:
    """A loaded function and the image of it that is built and serving."""

    function: Function
    image: str

    @property
    def name(self):
        return self.function.name


class Catalog:
    def __init__(self, functions=()):
        self._snapshot = ()
        self.replace(functions)

    def snapshot(self):
        """The active functions, sorted by name; an immutable tuple."""
        return self._snapshot

    def replace(self, functions):
        self._snapshot = tuple(sorted(functions, key=lambda active: active.name))

    def put(self, active):
        """Add or swap one function atomically."""
        self.replace([*(item for item in self._snapshot if item.name != active.name), active])

    def remove(self, name):
        self.replace(item for item in self._snapshot if item.name != name)
