"""What the reconciler reports of each function it loaded: a FunctionStatus.

The reconciler hands over the status of every function whenever one
changes; the state view (relay.view.writer) turns them into its rows. The
reconciler knows nothing of rows or SQLite, the view nothing of reconciling.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum

from relay.functions import Function


class Outcome(Enum):
    """How the last reconcile of a function ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class FunctionStatus:
    """One function as the reconciler knows it: ready (an active version serves) or pending (loaded, never built)."""

    function: Function                  # the active version when ready, else the version loaded last
    ready: bool
    updated_at: datetime                # when anything here last changed
    image: str | None = None            # the active version's image; None while pending
    prepared_at: datetime | None = None  # when the active version became ready
    last_reconcile_at: datetime | None = None
    last_outcome: Outcome | None = None  # None until a reconcile of this function has ended
    last_error: str | None = None       # why the last reconcile failed

    @property
    def name(self) -> str:
        return self.function.name


def now() -> datetime:
    """The time a status records: UTC, in whole seconds (as the state view shows it)."""
    return datetime.now(UTC).replace(microsecond=0)
