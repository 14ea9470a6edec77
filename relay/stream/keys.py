"""Where Relay is in Redis: the stream address, and every key and field name it writes or reads.

Operators, the docs and other tools read these names; they never change
without a migration. Pure values and string functions, no Redis client.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from relay.functions.rules import Target


@dataclass(frozen=True)
class StreamAddress:
    """The stream this worker reads, its consumer group, and its name in that group."""

    stream: str
    group: str
    consumer: str


# --- the fields of a stream entry -----------------------------------------------------

EVENT = "event"          # the event JSON
SCHEDULE = "schedule"    # set by Relay's scheduler on a schedule occurrence: its occurrence id
EVENT_FIELD = EVENT.encode()        # as redis-py returns them
SCHEDULE_FIELD = SCHEDULE.encode()
REDRIVEN_FROM = "redriven_from"    # set by ``relay dlq redrive``: the dead-letter entry it came from
REDRIVEN_FROM_FIELD = REDRIVEN_FROM.encode()
REPLAY_OF = "replay_of"            # set by ``relay replay``: the entry it is a copy of
REPLAY_FOR = "replay_for"          # ... and the one function (``name``) or handler (``name/handler``) it runs for
REPLAY_OF_FIELD = REPLAY_OF.encode()
REPLAY_FOR_FIELD = REPLAY_FOR.encode()


# --- invocation state -----------------------------------------------------------------


def invocation_key(stream: str, group: str, message_id: str) -> str:
    """The hash that holds one message's invocation states; names are percent-encoded."""
    return f"relay:invocation:{quote(stream, safe='')}:{quote(group, safe='')}:{message_id}"


def invocation_field(function: str, handler: str) -> str:
    """The field of one matched invocation in that hash."""
    return f"{function}/{handler}"


def target_field(target: Target) -> str:
    """The field of a matched rule in that hash: ``<function>/<handler>``,
    and ``#<n>`` after it for the n-th rule of the function with that handler (n ≥ 2; ``#`` is in no handler)."""
    field = invocation_field(target.active.name, target.rule.handler)
    return f"{field}#{target.rule.repeat + 1}" if target.rule.repeat else field


# --- the handler context --------------------------------------------------------------


def idempotency_key(stream: str, message_id: str, target: Target) -> str:
    """RELAY_IDEMPOTENCY_KEY of one matched rule on one entry: 32 hex digits.

    The first 128 bits of a SHA-256 over the stream, the entry's id and the
    target's field, so it is the same on every attempt and every delivery,
    whichever worker runs it, and new for a redriven entry (a new id). Two
    rules of one function with the same handler have fields of their own,
    so each has its own key. A schedule occurrence uses its occurrence id instead.
    """
    return hashlib.sha256("\0".join((stream, message_id, target_field(target))).encode(
        "utf-8", "surrogateescape")).hexdigest()[:32]


# --- fleet-wide limits (relay.stream.limits) ------------------------------------------


def rate_key(stream: str, group: str, function: str) -> str:
    """The rate limiter's state of one function: its theoretical arrival time (GCRA)."""
    return f"relay:rate:{quote(stream, safe='')}:{quote(group, safe='')}:{function}"


def concurrency_key(stream: str, group: str, function: str, digest: str) -> str:
    """The lease of one concurrency key value; *digest* is the value's hash, never the value itself."""
    return f"relay:concurrency:{quote(stream, safe='')}:{quote(group, safe='')}:{function}:{digest}"


# --- the dead-letter stream -----------------------------------------------------------


def dlq_stream(stream: str) -> str:
    return f"relay:{stream}:dlq"


# The fields of a dead-letter entry (the event field is EVENT).
DLQ_ORIGINAL_STREAM = "original_stream"
DLQ_ORIGINAL_ID = "original_id"
DLQ_GROUP = "group"
DLQ_CONSUMER = "consumer"
DLQ_REASON = "reason"
DLQ_ATTEMPTS = "attempts"
DLQ_TIMESTAMP = "timestamp"
DLQ_TRUNCATED = "truncated"      # "true" when the event is only the start of one of ...
DLQ_EVENT_BYTES = "event_bytes"  # ... this many bytes
DLQ_SCHEDULE = SCHEDULE          # the occurrence id, when the entry was an occurrence Relay's scheduler published
# The last attempt's outcome, when this worker ran it (relay.runs): its run id in the ledger, its status
# (failed, timed out, killed, not started), its exit code and the end of its stderr.
DLQ_RUN_ID = "run_id"
DLQ_RUN_STATUS = "run_status"
DLQ_EXIT_CODE = "exit_code"
DLQ_STDERR = "stderr"


# --- the run ledger (relay.runs) ------------------------------------------------------


def runs_stream(stream: str) -> str:
    """The run ledger of *stream*: one entry per attempt (relay.runs.record)."""
    return f"relay:{stream}:runs"


# --- schedules ------------------------------------------------------------------------


SCHEDULE_KEY_PREFIX = "relay:"


def occurrence_id(function: str, handler: str, scheduled_at: str) -> str:
    """A schedule occurrence's id: ``schedule:<function>:<handler>:<instant>``, the instant in UTC
    (``2026-09-13T03:00:00Z``). The ``schedule`` field of its entry, its idempotency key, and the
    name of its dedup key."""
    return f"schedule:{function}:{handler}:{scheduled_at}"


def parse_occurrence_id(text: str) -> tuple[str, str, str] | None:
    """(function, handler, scheduled_at) of an occurrence id, or None."""
    parts = text.split(":", 3)
    if len(parts) != 4 or parts[0] != "schedule" or not all(parts[1:]):
        return None
    return parts[1], parts[2], parts[3]


def schedule_key(occurrence_id: str) -> str:
    """The dedup key of one schedule occurrence (``schedule:<function>:<handler>:<instant>``).

    It holds the id of the stream entry the scheduler published for the
    occurrence (``SCHEDULE_UNRECORDED`` when an earlier Relay, which did not record it, did).
    """
    return SCHEDULE_KEY_PREFIX + occurrence_id


SCHEDULE_UNRECORDED = "1"   # what an earlier Relay set a dedup key to: it did not record the entry id


# --- worker heartbeats (relay.console.heartbeat) --------------------------------------


HEARTBEAT_TTL_S = 3600   # a worker's heartbeat outlives its last beat by an hour: shown gone, then forgotten


def workers_key(stream: str) -> str:
    """The workers of *stream*: a sorted set of worker ids (``host/pid``) scored by their last beat (unix ms)."""
    return f"relay:{stream}:workers"


def worker_key(stream: str, worker: str) -> str:
    """One worker's last heartbeat: a hash of short fields (relay.console.heartbeat), expiring HEARTBEAT_TTL_S
    after the beat. *worker* is ``host/pid``, percent-encoded here."""
    return f"relay:{stream}:worker:{quote(worker, safe='')}"
