"""The seams between the parts the supervisor wires together, as typing.Protocols.

The consumer, the dispatcher and the Settler depend on these shapes, not on
the classes behind them: a test passes a scripted executor, the benchmark
its own pieces, and a second execution path (warm containers) only has to
fit the Executor seam. relay.wiring puts the real ones together.

Types only: the Protocols, and the few plain values and aliases that cross
them (Attempt, RetryDue, Refusal, Settle, EntryIds, Prelude). The imports the annotations need are for
the type checker alone, so importing this module costs nothing, and nothing
here imports the modules that implement the seams: this is a leaf of the
stream engine, below the dispatcher and the Settler.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from redis.client import Pipeline

    from relay.functions import Function
    from relay.functions.rules import Rules, Target
    from relay.functions.template import Template
    from relay.runtime.invocation import Invocation, Outcome
    from relay.stream.limits import Blocked, Limit, Passage
    from relay.stream.plans import Plan
    from relay.stream.verdict import Settlement

Environment = Callable[["Function"], Mapping[str, str]]
"""A function's container environment: its template's env and its resolved secrets (raises RelayError)."""

Clock = Callable[[], int]
"""The time in unix nanoseconds."""

EntryIds = Sequence[str | bytes]
"""Stream entry ids, as Relay names them or as Redis sent them."""

Prelude = Callable[["Pipeline"], object]
"""Puts commands on the acknowledgment's pipeline (the Settler's ``settle``), ahead of the XACK."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of one matched rule on one entry, as the hot path's observers hear of it."""

    message_id: str
    event_id: str | None
    function: str
    handler: str
    rule: str                # the rule's field in the invocation state (relay.stream.keys.target_field)
    number: int              # 1-based; for an expired rule, the attempts made before
    idempotency_key: str
    started_at: int          # unix nanoseconds
    replay_of: str | None = None


@dataclass(frozen=True, slots=True)
class RetryDue:
    """An entry left pending for a retry due *delay* seconds after its attempt failed here (or,
    *after_failure* False, after its marker was found still waiting): waiting that long from
    now never starts it early."""

    delay: float
    after_failure: bool


class Settle(Enum):
    """How carrying out a settlement went (the Settler's ``settle``)."""

    DONE = "done"             # acknowledged, dead-lettered or left pending, as decided
    ELSEWHERE = "elsewhere"   # acknowledged, but another worker had acknowledged the entry first
    FAILED = "failed"         # Redis failed: the entry stays pending


class Executor(Protocol):
    """Runs one handler invocation to its end; never raises for a failing handler or engine."""

    def run(self, invocation: Invocation) -> Outcome: ...


class InvocationStore(Protocol):
    """Per-message invocation state (relay.stream.markers values); fails open."""

    def load(self, message_id: str) -> dict[str, bytes]: ...

    def try_start(self, message_id: str, field: str, expected: bytes | None, deadline: int,
                  attempt: int) -> bool: ...

    def release(self, message_id: str, field: str, previous: bytes | None) -> None: ...

    def complete(self, message_id: str, field: str) -> None: ...

    def queue_complete(self, pipe: Pipeline, message_id: str, field: str) -> None: ...

    def failed(self, message_id: str, field: str, retry_at: int, attempt: int) -> None: ...

    def exhausted(self, message_id: str, field: str, attempts: int) -> None: ...


class Settler(Protocol):
    """Carries a Settlement out: the one place an entry is acknowledged or dead-lettered."""

    def settle(self, plan: Plan, settlement: Settlement, prelude: Prelude | None = None,
               retry: RetryDue | None = None) -> Settle: ...

    def settle_unmatched(self, message_ids: EntryIds) -> bool: ...

    def queue_unmatched(self, pipe: Pipeline, message_ids: EntryIds) -> None: ...

    def unmatched_acknowledged(self, message_ids: EntryIds, reply: object) -> bool: ...


class RunLedger(Protocol):
    """The run ledger as the Settler writes it (relay.runs.ledger.RunLedger): the records of an entry's
    attempts, which it heard of as an Observer, go out with the entry's settlement. It never raises:
    a record that cannot be written is counted and logged, and delivery goes on."""

    def queue(self, pipe: Pipeline, plan: Plan, settlement: Settlement) -> int:
        """Put the entry's records on *pipe*, the acknowledgment's; how many commands it added."""

    def queued(self, plan: Plan, replies: Sequence[object]) -> None:
        """Account for the replies to the commands ``queue`` added (exceptions for those that failed)."""

    def unsent(self, plan: Plan) -> list[dict[str, str]]:
        """The records ``queue`` put on a pipeline that never reached Redis, handed over uncounted:
        the write-behind writes them with the entry's acknowledgment (relay.stream.writebehind)."""

    def write(self, plan: Plan, settlement: Settlement, retry: RetryDue | None = None) -> LastRun | None:
        """Write the entry's records now (an entry dead-lettered or left pending); its last run's
        summary for a dead-letter entry, when this dispatch ran one."""


@dataclass(frozen=True, slots=True)
class LastRun:
    """What a dead-letter entry says of the attempt that ran last (relay.stream.keys DLQ_RUN_*)."""

    run_id: str | None       # None when its record could not be written
    status: str
    exit_code: int | None
    stderr: str              # its end (relay.runs.record.DLQ_STDERR_BYTES)


class Provenance(Protocol):
    """Which entry Relay's scheduler published for a schedule occurrence (relay.stream.schedules)."""

    def published(self, plan: Plan) -> str | None:
        """The entry id the occurrence's dedup key holds, None without one; raises redis.RedisError."""


class Refusal(Enum):
    """Why an invocation was not admitted within the slot wait (Admission); it is left pending at no attempt's cost."""

    NO_SLOT = "no slot"                   # the worker's slots, or the function's, stayed busy
    RATE_LIMIT = "rate limit"             # the function's rate_limit had no permit in time
    CONCURRENCY_KEY = "concurrency key"   # another invocation held the event's concurrency_key


class Admission(Protocol):
    """Whether an invocation may start: the worker's Slots and its function's fleet-wide Limits together
    (relay.stream.admission). The answer is a context manager to hold while the invocation runs, which
    gives everything back at the end of its ``with`` block, or a Refusal."""

    def admit(self, target: Target, event: dict[str, object] | None) -> AbstractContextManager[object] | Refusal: ...


class Slots(Protocol):
    """Concurrency limits: ``with hold(...) as held`` holds a slot when *held* is True."""

    def hold(self, name: str, concurrency: int, timeout: float) -> AbstractContextManager[bool]: ...


class Limits(Protocol):
    """A function's fleet-wide limits (its template's rate_limit and concurrency_key), shared in Redis.

    ``enter`` never waits: it takes what the template asks for and returns a
    Passage, to ``leave`` when the invocation ends, or Blocked with the seconds
    after which to ask again. It fails open: when Redis cannot answer, the
    invocation passes. Only functions with a limit are asked.
    """

    def enter(self, function: str, template: Template, event: dict[str, object] | None,
              timeout: int) -> Passage | Blocked: ...

    def leave(self, passage: Passage) -> None: ...


class Pins(Protocol):
    """Keeps an image from garbage collection while the ``with`` block runs."""

    def holding(self, image: str) -> AbstractContextManager[object]: ...


class RuleSource(Protocol):
    """The live function set as the consumer reads it (relay.live.catalog.Catalog)."""

    def rules(self) -> Rules: ...

    def waiting(self) -> tuple[Function, ...]: ...


class Dispatcher(Protocol):
    """Runs a plan's targets and settles the entry; says when a retry it left pending is due."""

    def dispatch(self, plan: Plan) -> RetryDue | None: ...


class Gauge(Protocol):
    def set(self, value: float) -> None: ...


class Observer(Protocol):
    """Domain events of the hot path; relay.metrics.prometheus.PrometheusObserver counts them.

    Called inline in the consumer's and the dispatcher's greenlets: an
    observer must be quick and must not raise.
    """

    def received(self, count: int) -> None:
        """*count* events (not schedule occurrences) were read from the stream."""

    def matched(self, function: str) -> None:
        """An event matched at least one rule of *function* and goes to dispatch."""

    def invocation_started(self, attempt: Attempt) -> None:
        """*attempt* is about to run: its slots are held and the attempt is claimed."""

    def invocation_finished(self, attempt: Attempt, outcome: Outcome | None) -> None:
        """The attempt's outcome; None when running it raised. Follows every invocation_started.
        The outcome's output tails have the invocation's secret values masked."""

    def invocation_expired(self, attempt: Attempt) -> None:
        """A rule was not run on this delivery, its entry being older than its max_event_age
        (*attempt* numbers the attempts made before; it never started)."""

    def limit_waited(self, function: str, limit: Limit, seconds: float) -> None:
        """*limit* (the rate or the concurrency key) refused an invocation of *function* at least once;
        it waited *seconds* in all (0 when it gave up at once), whether it then ran or was left pending.
        Once per invocation and limit, before it runs."""

    def settled(self, settlement: Settlement, count: int) -> None:
        """*count* entries were settled as *settlement* says: Redis acknowledged or dead-lettered them
        (a failed settle emits nothing; LEAVE_PENDING is emitted too, having nothing to do)."""

    def expired(self, function: str) -> None:
        """A settled entry's invocations of *function* were not run: the entry was older than their
        max_event_age. Follows the ``settled`` of a dead-lettered or acknowledged entry, once per function."""

    def ran_twice(self, attempt: Attempt) -> None:
        """*attempt* succeeded here on an entry another worker had acknowledged meanwhile (its XACK found
        the entry settled): its handler ran for that entry twice. Follows the entry's ``settled``."""
