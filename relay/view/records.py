"""What the state view holds: the records the writer stores and the reports read.

Plain frozen dataclasses and the words their fields take, with no SQLite in
sight: relay.view.database writes them, relay.view.reader reads them back,
relay.view.report and relay.view.json_report render them. Only the standard
library is imported here: ``relay function`` and ``relay stats`` start fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

READY, PENDING = "ready", "pending"
SUCCESS, FAILED = "success", "failed"
EVENT, SCHEDULE = "event", "schedule"


@dataclass(frozen=True)
class HandlerRecord:
    """One event rule (kind "event") or schedule (kind "schedule") of a function."""

    handler: str
    timeout: str                  # a Go duration, "6s"
    kind: str = EVENT
    cron: str | None = None       # schedules only
    timezone: str | None = None   # schedules only


@dataclass(frozen=True)
class WarmRecord:
    """The template's ``warm:`` settings, as ``relay function inspect`` shows them."""

    containers: int               # per worker
    max_invocations: int
    idle: str                     # a Go duration, "10m0s"
    prestart: bool


@dataclass(frozen=True)
class FunctionRecord:
    name: str
    runtime: str
    status: str                   # READY: an active version serves; PENDING: loaded, never built
    updated_at: datetime
    image: str | None = None
    fingerprint: str | None = None
    prepared_at: datetime | None = None
    last_reconcile_at: datetime | None = None
    last_reconcile_status: str | None = None  # SUCCESS or FAILED; None until an outcome
    last_error: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)   # variable -> secret name, never a value
    handlers: tuple[HandlerRecord, ...] = ()
    warm: WarmRecord | None = None  # None: a new container per invocation
    rate_limit: str | None = None       # the template's rate_limit as written ("20/s"), or None
    concurrency_key: str | None = None  # the template's concurrency_key ("new_image.id"), or None

    @property
    def events(self) -> tuple[HandlerRecord, ...]:
        return tuple(item for item in self.handlers if item.kind == EVENT)

    @property
    def schedules(self) -> tuple[HandlerRecord, ...]:
        return tuple(item for item in self.handlers if item.kind == SCHEDULE)


@dataclass(frozen=True)
class Counters:
    events_processed: int = 0
    handler_successes: int = 0
    handler_failures: int = 0
    retries: int = 0
    dlq_entries: int = 0


@dataclass(frozen=True)
class LimitWaits:
    """Invocations of one function that its rate_limit or concurrency_key held back, and the time they waited."""

    rate_limit_waits: int = 0
    rate_limit_wait_seconds: float = 0.0
    concurrency_key_waits: int = 0
    concurrency_key_wait_seconds: float = 0.0


@dataclass(frozen=True)
class FunctionStats:
    """One function's latest snapshot: its counters, the warm containers this worker had then,
    and its waits for its limits."""

    counters: Counters = Counters()
    warm_containers: int = 0
    waits: LimitWaits = LimitWaits()


@dataclass(frozen=True)
class Stats:
    """The global snapshot; ``updated_at`` None means never written."""

    counters: Counters = Counters()
    pending_entries: int = 0
    oldest_pending_age_seconds: float = 0.0
    updated_at: datetime | None = None


def now() -> datetime:
    """The time a record carries: UTC, in whole seconds (as the file stores it)."""
    return datetime.now(UTC).replace(microsecond=0)
