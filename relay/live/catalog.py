"""The functions Relay is serving, as an immutable snapshot.

The dispatcher takes one snapshot per entry and keeps it for the whole
dispatch, so a reconcile that swaps a function in or out never changes the
rules under a running dispatch; in-flight invocations finish on the version
they started with.
"""

from __future__ import annotations

from collections.abc import Iterable

from relay.functions import ActiveFunction, Function
from relay.functions.rules import Rules


class Catalog:
    """The active functions, and the ones *waiting*: loaded with a valid
    template but never built (their first build failed). Entries that match
    a waiting function stay pending until it is built."""

    def __init__(self, functions: Iterable[ActiveFunction] = ()) -> None:
        self._waiting: tuple[Function, ...] = ()
        self.replace(functions)

    def snapshot(self) -> tuple[ActiveFunction, ...]:
        """The active functions, sorted by name; an immutable tuple."""
        return self._snapshot

    def rules(self) -> Rules:
        """The rules of the snapshot, indexed for matching (relay.functions.rules.Rules)."""
        return self._rules

    def waiting(self) -> tuple[Function, ...]:
        """The functions (not ActiveFunctions) waiting for their first image; an immutable tuple."""
        return self._waiting

    def mark_waiting(self, function: Function) -> None:
        """Mark *function* as waiting for its first image."""
        self._waiting = tuple(sorted([*(item for item in self._waiting if item.name != function.name), function],
                                     key=lambda item: item.name))

    def replace(self, functions: Iterable[ActiveFunction]) -> None:
        rules = Rules(sorted(functions, key=lambda active: active.name))
        self._snapshot, self._rules = rules.functions, rules

    def put(self, active: ActiveFunction) -> None:
        """Add or swap one function atomically."""
        self.replace([*(item for item in self._snapshot if item.name != active.name), active])
        self._release(active.name)

    def remove(self, name: str) -> None:
        """Forget *name*, active or waiting."""
        self.replace(item for item in self._snapshot if item.name != name)
        self._release(name)

    def _release(self, name: str) -> None:
        self._waiting = tuple(item for item in self._waiting if item.name != name)
