"""Invocation state markers: the values of ``relay:invocation:…`` hash fields.

    ok                                    completed on an earlier delivery
    running:<unix-nano deadline>#<n>      attempt n is (or was) running until the deadline
    next_attempt_at:<unix-nano deadline>#<n>  attempt n failed; wait until the deadline
    exhausted:<n>                         terminal after n attempts
    (absent)                              never attempted: eligible

Pure functions over plain values, so the rules are tested without Redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from relay.durations import HOUR, MILLISECOND, MINUTE
from relay.stream.keys import invocation_key

STATE_TTL_SECONDS = 7 * 24 * 3600
BACKOFF = (1 * MINUTE, 2 * MINUTE, 5 * MINUTE, 10 * MINUTE)  # after attempt 1, 2, 3, then capped
JITTER = 0.2           # retry_jitter spreads a delay over ±20 %
# No deadline Relay writes is further ahead: timeouts ≤ 5m, a retry_backoff value ≤ 1h (+20 % jitter),
# skew included (tests/test_markers.py checks it against the template limits).
HORIZON = 2 * HOUR

OK, RUNNING, WAITING, EXHAUSTED, ABSENT = "ok", "running", "next_attempt_at", "exhausted", "absent"


@dataclass(frozen=True)
class Marker:
    kind: str
    attempts: int = 0     # attempts made so far (the n of the marker)
    deadline: int = 0     # unix nanoseconds, for running and next_attempt_at


ABSENT_MARKER = Marker(ABSENT)


state_key = invocation_key   # the hash of one message's markers; the name lives in relay.stream.keys


def parse(value: bytes | str | None) -> Marker:
    """The Marker a stored value means; anything unreadable is absent (eligible)."""
    return read(value) or ABSENT_MARKER


def read(value: bytes | str | None) -> Marker | None:
    """The Marker a stored value means, ABSENT_MARKER for no value, None when it cannot be read.

    Numbers are ASCII digits only: a tampered ``exhausted:²`` or a thousand-digit
    count is unreadable, never an exception.
    """
    if value is None:
        return ABSENT_MARKER
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if value == OK:
        return Marker(OK)
    kind, colon, rest = value.partition(":")
    if not colon:
        return None
    if kind == EXHAUSTED:
        attempts = _count(rest)
        return None if attempts is None else Marker(EXHAUSTED, attempts=attempts)
    if kind in (RUNNING, WAITING):
        deadline_text, hash_sign, attempts_text = rest.partition("#")
        deadline, count = _count(deadline_text), _count(attempts_text)
        if hash_sign and deadline is not None and count:
            return Marker(kind, attempts=count, deadline=deadline)
    return None


def _count(text: str) -> int | None:
    """A whole number written in ASCII digits, else None."""
    if not (text.isascii() and text.isdigit()):
        return None
    try:
        return int(text)
    except ValueError:      # more digits than int() converts
        return None


def running(deadline: int, attempt: int) -> str:
    return f"{RUNNING}:{deadline}#{attempt}"


def waiting(deadline: int, attempt: int) -> str:
    return f"{WAITING}:{deadline}#{attempt}"


def exhausted(attempts: int) -> str:
    return f"{EXHAUSTED}:{attempts}"


def backoff(attempt: int, schedule: Sequence[int] | None = None) -> int:
    """How long to wait after failed attempt number *attempt* (1-based), in nanoseconds.

    *schedule* is a rule's ``retry_backoff``: the delay before retry n is its
    n-th value, the last one repeating; None is Relay's own, BACKOFF.
    """
    schedule = schedule or BACKOFF
    return schedule[min(attempt, len(schedule)) - 1]


def jittered(delay: int, unit: float) -> int:
    """*delay* spread by ±JITTER: *unit* in [0, 1) (random.random()) maps to 0.8 × delay up to 1.2 × delay,
    to the millisecond (a delay under one keeps its own value)."""
    spread = delay * (1 - JITTER + 2 * JITTER * unit)
    return round(spread / MILLISECOND) * MILLISECOND or delay


class Action(Enum):
    """What to do with one matched invocation on this delivery."""

    SKIP_COMPLETE = "skip-complete"   # it succeeded on an earlier delivery
    SKIP_TERMINAL = "skip-terminal"   # its attempts were exhausted earlier
    SKIP_BUSY = "skip-busy"           # running elsewhere, or its backoff is not over
    RUN = "run"
    EXHAUST = "exhaust"               # its last attempt died with its worker: record it exhausted


@dataclass(frozen=True)
class Decision:
    action: Action
    attempt: int = 0     # the attempt number to run, or the attempts made so far


def decide(marker: Marker, now: int, retries: int) -> Decision:
    """Given the stored marker, the time (unix ns) and the rule's retries, what happens now.

    A deadline still in the future means another attempt may be live (running)
    or the backoff is not over (next_attempt_at): skip without charging. A
    running marker past its deadline is an attempt that died with its worker;
    it counts, so the next attempt gets the next number. A deadline further
    ahead than HORIZON was never written by Relay (a tampered key): it counts
    as passed, so the entry cannot be held pending for years.
    """
    if marker.kind == OK:
        return Decision(Action.SKIP_COMPLETE)
    if marker.kind == EXHAUSTED:
        return Decision(Action.SKIP_TERMINAL, attempt=marker.attempts)
    if marker.kind in (RUNNING, WAITING):
        if now < marker.deadline <= now + HORIZON:
            return Decision(Action.SKIP_BUSY, attempt=marker.attempts)
        if marker.attempts >= 1 + retries:
            return Decision(Action.EXHAUST, attempt=marker.attempts)
        return Decision(Action.RUN, attempt=marker.attempts + 1)
    return Decision(Action.RUN, attempt=1)
