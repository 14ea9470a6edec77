"""One record of the run ledger: what an attempt did, or how its entry was settled.

A record is a flat stream entry of text fields; its id in the ledger is the
run id (``relay runs show <run id>``). ``kind`` says which of two it is:

    run         one attempt of one matched rule on one entry: who ran it
                (worker host and pid, cold or warm, container), when and for
                how long, how it ended (RunStatus, exit code, error), and the
                last 4 KiB of its stdout and stderr with the invocation's
                secret values masked. The last run a dispatch wrote also says
                how the entry was settled then (``settled``).
    settlement  an entry settled with no attempt in that dispatch (its
                markers said it was done, exhausted, or never to run).

Anyone who can write to Redis can write to the ledger, so ``decode`` takes
any fields: missing ones are empty, numbers that are not ASCII digits are
None, and bytes that are not UTF-8 become U+FFFD. A record is at most
about 10 KiB: two tails of 4 KiB, an error cut at 1 KiB, and short fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from relay.runtime.invocation import Outcome

TAIL_BYTES = 4096          # of stdout and of stderr, in a record
DLQ_STDERR_BYTES = 2048    # of stderr, in a dead-letter entry
ERROR_CHARS = 1024
_E = TypeVar("_E", bound=Enum)


class RunStatus(Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"              # the handler raised or exited non-zero
    TIMED_OUT = "timed out"        # the rule's timeout ran out; Relay killed the container
    KILLED = "killed"              # exit code 137: out of memory (the container's limit), or SIGKILL
    NOT_STARTED = "not started"    # no handler ran: a missing secret, the engine, ... (``error`` says why)
    EXPIRED = "expired"            # not run: the entry was older than the rule's max_event_age


class Settled(Enum):
    """What became of the entry when the record was written."""

    ACKNOWLEDGED = "acknowledged"
    DEAD_LETTERED = "dead-lettered"
    RETRY_DUE = "retry due"        # left pending; the next attempt is due at ``retry_at``
    PENDING = "pending"            # left pending: a later rule or another worker still has it


RUN = "run"
SETTLEMENT = "settlement"

# The record's fields, as written.
KIND = "kind"
ENTRY = "entry"
EVENT_ID = "event_id"
FUNCTION = "function"
HANDLER = "handler"
RULE = "rule"
ATTEMPT = "attempt"
KEY = "key"
HOST = "host"
PID = "pid"
MODE = "mode"
CONTAINER = "container"
STARTED = "started"        # unix milliseconds
DURATION = "duration"      # milliseconds, with microseconds
STATUS = "status"
EXIT_CODE = "exit_code"
ERROR = "error"
STDOUT = "stdout"
STDERR = "stderr"
SETTLED = "settled"
RETRY_AT = "retry_at"      # unix milliseconds
REASON = "reason"          # the dead-letter reason
REPLAY_OF = "replay_of"
FIELDS = (KIND, ENTRY, EVENT_ID, FUNCTION, HANDLER, RULE, ATTEMPT, KEY, HOST, PID, MODE, CONTAINER, STARTED, DURATION,
          STATUS, EXIT_CODE, ERROR, STDOUT, STDERR, SETTLED, RETRY_AT, REASON, REPLAY_OF)


@dataclass(frozen=True, slots=True)
class Run:
    """A record of the ledger, written (``fields``) or read back (``decode``)."""

    kind: str = RUN
    run_id: str = ""                    # its id in the ledger; "" before it is written
    entry: str = ""                     # the source stream entry's id
    event_id: str = ""
    function: str = ""
    handler: str = ""
    rule: str = ""                      # the rule's field: function/handler, #n for a repeated handler
    attempt: int | None = None
    key: str = ""                       # RELAY_IDEMPOTENCY_KEY
    host: str = ""
    pid: int | None = None
    mode: str = ""                      # "cold" or "warm"; "" when no container ran
    container: str = ""
    started_ms: int | None = None
    duration_ms: float | None = None
    status: RunStatus | None = None     # None on a settlement record, or an unknown status read back
    status_text: str = ""               # the status field as read, when it is not a RunStatus
    exit_code: int | None = None
    error: str = ""
    stdout: str = ""
    stderr: str = ""
    settled: Settled | None = None
    retry_at_ms: int | None = None
    reason: str = ""
    replay_of: str = ""

    @property
    def worker(self) -> str:
        return f"{self.host}/{self.pid}" if self.pid is not None else self.host

    @property
    def target(self) -> str:
        return f"{self.function}/{self.handler}" if self.handler else self.function

    @property
    def ok(self) -> bool:
        return self.status is RunStatus.SUCCEEDED

    def fields(self) -> dict[str, str]:
        """The record as the ledger's entry: only the fields that say something."""
        values: dict[str, object] = {
            KIND: self.kind, ENTRY: self.entry, EVENT_ID: self.event_id, FUNCTION: self.function,
            HANDLER: self.handler, RULE: self.rule, ATTEMPT: self.attempt, KEY: self.key, HOST: self.host,
            PID: self.pid, MODE: self.mode, CONTAINER: self.container, STARTED: self.started_ms,
            DURATION: None if self.duration_ms is None else f"{self.duration_ms:.3f}",
            STATUS: self.status.value if self.status is not None else None, EXIT_CODE: self.exit_code,
            ERROR: self.error[:ERROR_CHARS], STDOUT: self.stdout, STDERR: self.stderr,
            SETTLED: self.settled.value if self.settled is not None else None, RETRY_AT: self.retry_at_ms,
            REASON: self.reason[:ERROR_CHARS], REPLAY_OF: self.replay_of}
        return {name: str(value) for name, value in values.items() if value is not None and value != ""}

    def to_json(self) -> dict[str, object]:
        """The record for ``--json``: every field, named as in the ledger."""
        return {"run_id": self.run_id, "kind": self.kind, "entry": self.entry, "event_id": self.event_id,
                "function": self.function, "handler": self.handler, "rule": self.rule, "attempt": self.attempt,
                "idempotency_key": self.key, "host": self.host, "pid": self.pid, "mode": self.mode,
                "container": self.container, "started_ms": self.started_ms, "duration_ms": self.duration_ms,
                "status": self.status.value if self.status is not None else (self.status_text or None),
                "exit_code": self.exit_code, "error": self.error, "stdout": self.stdout, "stderr": self.stderr,
                "settled": self.settled.value if self.settled is not None else None,
                "retry_at_ms": self.retry_at_ms, "reason": self.reason, "replay_of": self.replay_of or None}


def decode(run_id: bytes | str, fields: Mapping[bytes, bytes]) -> Run:
    """The record *fields* (as redis-py returns them) under *run_id*, whatever a writer put there."""
    def text(name: str) -> str:
        return fields.get(name.encode(), b"").decode("utf-8", "replace")

    status_text = text(STATUS)
    return Run(
        kind=text(KIND) or RUN, run_id=run_id.decode() if isinstance(run_id, bytes) else run_id,
        entry=text(ENTRY), event_id=text(EVENT_ID), function=text(FUNCTION), handler=text(HANDLER),
        rule=text(RULE), attempt=number(text(ATTEMPT)), key=text(KEY), host=text(HOST), pid=number(text(PID)),
        mode=text(MODE), container=text(CONTAINER), started_ms=number(text(STARTED)),
        duration_ms=_milliseconds(text(DURATION)), status=_enum(RunStatus, status_text), status_text=status_text,
        exit_code=_signed(text(EXIT_CODE)), error=text(ERROR), stdout=text(STDOUT), stderr=text(STDERR),
        settled=_enum(Settled, text(SETTLED)), retry_at_ms=number(text(RETRY_AT)), reason=text(REASON),
        replay_of=text(REPLAY_OF))


def status_of(outcome: Outcome | None) -> RunStatus:
    """How an attempt ended, from its Outcome (None: running it raised in Relay)."""
    if outcome is None:
        return RunStatus.FAILED
    if outcome.ok:
        return RunStatus.SUCCEEDED
    if outcome.timed_out:
        return RunStatus.TIMED_OUT
    if outcome.killed:
        return RunStatus.KILLED
    if outcome.exit_code is None:
        return RunStatus.NOT_STARTED
    return RunStatus.FAILED


def tail(text: str, limit: int) -> str:
    """The end of *text* that is at most *limit* bytes of UTF-8, cut at a character."""
    encoded = text.encode("utf-8", "surrogateescape")
    if len(encoded) <= limit:
        return text
    return encoded[-limit:].decode("utf-8", "ignore")


def number(text: str) -> int | None:
    """*text* as a number when it is 1 to 18 ASCII digits, else None."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def _signed(text: str) -> int | None:
    return -value if text.startswith("-") and (value := number(text[1:])) is not None else number(text)


def _milliseconds(text: str) -> float | None:
    whole, dot, fraction = text.partition(".")
    if number(whole) is None or (dot and number(fraction) is None):
        return None
    return float(text)


def _enum(kind: type[_E], text: str) -> _E | None:
    try:
        return kind(text)
    except ValueError:
        return None
