"""The one settle decision: what happens to a stream entry, from its plan and its targets' outcomes.

An entry is acknowledged when there is nothing (more) to run for it,
dead-lettered when it can never succeed, and otherwise left pending for the
reclaimer:

    trimmed away while pending          → ACK (nothing left to run)
    schedule occurrence now obsolete    → ACK
    malformed                           → DEAD_LETTER, 0 attempts (a replay for a function
                                          not loaded is one: relay.stream.plans)
    matches a function not built yet    → LEAVE_PENDING
    matches nothing                     → ACK, no invocation state to clear
    has targets, not yet dispatched     → None: dispatch it
    a schedule occurrence whose entry is not the one Relay's scheduler published
                                        → DEAD_LETTER, 0 attempts (decide_provenance,
                                          asked by the dispatcher before any attempt)
    every target complete               → ACK
    any target still open               → LEAVE_PENDING
    every unfinished target finished:
      any exhausted, or expired with on_expired: dead-letter
                                        → DEAD_LETTER, the most attempts any of those made
      else (expired with on_expired: drop)
                                        → ACK, not counted as processed

A target is expired when it would still run (now, or after its backoff) but
the entry is older than its rule's max_event_age. Its age only grows, so an
expired target is terminal like an exhausted one and needs no marker: every
delivery finds it expired again. The other targets of the entry still run;
the entry settles once every one is finished, and the expired ones then
decide with the exhausted ones: dead-lettered if any of them says so
(the reason names each cause), acknowledged if all say drop.

Targets the dispatch did not reach this time (it stops at the first one that
is not complete) are judged by their stored markers. Pure: no Redis, no
clock, no logging; the Settler carries a Settlement out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, overload

from relay.durations import MILLISECOND, SECOND, format_compact
from relay.functions.template import OnExpired
from relay.stream import markers
from relay.stream.keys import SCHEDULE_UNRECORDED, target_field
from relay.stream.markers import Action, Decision, Marker
from relay.stream.plans import Plan

if TYPE_CHECKING:
    from relay.functions.rules import Target


class Status(Enum):
    """Where one target of an entry stands after a delivery."""

    COMPLETE = "complete"     # succeeded, now or earlier
    TERMINAL = "terminal"     # attempts exhausted
    EXPIRED = "expired"       # the entry is older than the rule's max_event_age: terminal, not run
    OPEN = "open"             # may still run: failed with retries left, busy, not reached, no slot


@dataclass(frozen=True, slots=True)
class TargetOutcome:
    status: Status
    attempts: int = 0         # attempts made (for TERMINAL and EXPIRED, the count the dead-letter entry reports)
    retry_in: int = 0         # OPEN after an attempt failed here: the wait (ns) before the next one


COMPLETE = TargetOutcome(Status.COMPLETE)


class Verdict(Enum):
    ACK = "ack"
    DEAD_LETTER = "dead-letter"
    LEAVE_PENDING = "leave-pending"


class Cause(Enum):
    """Why the verdict: what the consumer logs and the batch path keys on."""

    TRIMMED = "trimmed"
    OBSOLETE = "obsolete"
    MALFORMED = "malformed"
    WAITING = "waiting"
    UNMATCHED = "unmatched"
    DONE = "done"
    OPEN = "open"
    EXHAUSTED = "exhausted"
    EXPIRED = "expired"       # only expired targets are unfinished (dead-lettered, or dropped)
    FORGED = "forged"         # a 'schedule' field Relay's scheduler did not write


@dataclass(frozen=True, slots=True)
class Settlement:
    """A verdict and what carrying it out needs."""

    verdict: Verdict
    cause: Cause
    reason: str | None = None      # the dead-letter entry's reason
    attempts: int = 0              # the dead-letter entry's attempts
    event_bytes: int = 0           # the event's size when the dead-letter entry keeps only its start
    clear_state: bool = True       # delete the invocation state hash with the acknowledgment
    counts_processed: bool = False  # an acknowledged event that counts as processed (events_processed)
    functions: tuple[str, ...] = ()  # the functions a dead-lettered entry matched (function_dlq_entries)
    expired: tuple[str, ...] = ()    # the functions whose invocations expired (events_expired)
    occurrence: str | None = None    # the id of a published schedule occurrence a dead-letter entry keeps


TRIMMED = Settlement(Verdict.ACK, Cause.TRIMMED)
OBSOLETE = Settlement(Verdict.ACK, Cause.OBSOLETE)
WAITING = Settlement(Verdict.LEAVE_PENDING, Cause.WAITING)
UNMATCHED = Settlement(Verdict.ACK, Cause.UNMATCHED, clear_state=False, counts_processed=True)
OPEN = Settlement(Verdict.LEAVE_PENDING, Cause.OPEN)


@overload
def decide_settlement(plan: Plan, outcomes: None = None, *,
                      stored: Mapping[str, bytes | str] | None = None, now: int = 0) -> Settlement | None: ...
@overload
def decide_settlement(plan: Plan, outcomes: Mapping[int, TargetOutcome], *,
                      stored: Mapping[str, bytes | str] | None = None, now: int = 0) -> Settlement: ...
def decide_settlement(plan: Plan, outcomes: Mapping[int, TargetOutcome] | None = None, *,
                      stored: Mapping[str, bytes | str] | None = None, now: int = 0) -> Settlement | None:
    """The Settlement for *plan*, or None when its targets are still to be dispatched.

    *outcomes* are the targets' outcomes of this dispatch by index in
    ``plan.targets``; a target without one is judged by its marker in
    *stored* (the invocation state as loaded) at time *now* (unix ns).
    """
    if plan.trimmed:
        return TRIMMED
    if plan.obsolete:
        return OBSOLETE
    if plan.problem:
        return Settlement(Verdict.DEAD_LETTER, Cause.MALFORMED, reason=plan.problem, event_bytes=plan.event_bytes)
    if plan.waiting:
        return WAITING
    if not plan.targets:
        return UNMATCHED
    if outcomes is None:
        return None
    return _judge(plan, outcomes, stored or {}, now)


def _judge(plan: Plan, outcomes: Mapping[int, TargetOutcome], stored: Mapping[str, bytes | str],
           now: int) -> Settlement:
    judged = [outcomes.get(index) or stored_outcome(plan, target, stored.get(target_field(target)), now)
              for index, target in enumerate(plan.targets)]
    statuses = {outcome.status for outcome in judged}
    if statuses <= {Status.COMPLETE}:
        return Settlement(Verdict.ACK, Cause.DONE, counts_processed=not plan.scheduled)
    if Status.OPEN in statuses:
        return OPEN
    exhausted = [(target, outcome) for target, outcome in zip(plan.targets, judged, strict=True)
                 if outcome.status is Status.TERMINAL]
    expired = [(target, outcome) for target, outcome in zip(plan.targets, judged, strict=True)
               if outcome.status is Status.EXPIRED]
    expired_functions = tuple(sorted({target.active.name for target, _ in expired}))
    dead = [(target, outcome) for target, outcome in expired if target.rule.on_expired is OnExpired.DEAD_LETTER]
    if not exhausted and not dead:
        return Settlement(Verdict.ACK, Cause.EXPIRED, expired=expired_functions)
    reasons = []
    if exhausted:
        reasons.append(f"attempts exhausted for {', '.join(sorted({target_field(t) for t, _ in exhausted}))}")
    reasons.extend(dict.fromkeys(expiry_reason(plan, target, now) for target, _ in dead))
    return Settlement(Verdict.DEAD_LETTER, Cause.EXHAUSTED if exhausted else Cause.EXPIRED, reason="; ".join(reasons),
                      attempts=max(outcome.attempts for _, outcome in exhausted + dead),
                      functions=tuple(sorted({target.active.name for target in plan.targets})),
                      expired=expired_functions, occurrence=plan.occurrence)


NOT_PUBLISHED = "the 'schedule' field was not written by Relay's scheduler"


def decide_provenance(plan: Plan, published: str | None) -> Settlement | None:
    """None when *plan*'s entry is the schedule occurrence Relay's scheduler published; else its
    Settlement: dead-lettered before any attempt, its handler never run.

    *published* is the id of the entry the occurrence's dedup key names, or
    None when there is none (relay.stream.schedules.Provenance). A producer
    can add an entry with a ``schedule`` field of its own choosing, but not
    set that key: run, such an entry would give a schedule-only handler the
    producer's event and take the occurrence's idempotency key. The
    dead-letter entry keeps no ``schedule`` field, so a redrive sends its
    event back as an ordinary event.
    """
    if published == plan.message_id:
        return None
    occurrence = repr(plan.occurrence)
    if published is None:
        why = f"there is no record of {occurrence} being published (records are kept 7 days)"
    elif published == SCHEDULE_UNRECORDED:
        why = f"the event is not the one published for {occurrence}"
    else:
        why = f"{occurrence} was published as entry {published}"
    return Settlement(Verdict.DEAD_LETTER, Cause.FORGED, reason=f"{NOT_PUBLISHED}: {why}")


def stored_outcome(plan: Plan, target: Target, raw: bytes | str | None, now: int) -> TargetOutcome:
    """A target this dispatch did not reach, by its stored marker *raw* at *now* (unix ns)."""
    marker = markers.parse(raw)
    return marked_outcome(plan, target, marker, markers.decide(marker, now, target.rule.retries), now)


def marked_outcome(plan: Plan, target: Target, marker: Marker, decision: Decision, now: int) -> TargetOutcome:
    """Where *target* stands by its *marker* and the *decision* it gives at *now* (relay.stream.markers):
    complete, exhausted, expired, or open (it may still run: now, once a backoff or a running attempt
    is over, or once an attempt that died with its worker is recorded exhausted).

    The one judgement of a target's marker: the settle decision makes it of
    the targets a dispatch did not reach (``stored_outcome``), the dispatcher
    of each target before it runs one.
    """
    if decision.action is Action.SKIP_COMPLETE:
        return COMPLETE
    if decision.action is Action.SKIP_TERMINAL:
        return TargetOutcome(Status.TERMINAL, marker.attempts)
    return expired(plan, target, marker, decision, now) or TargetOutcome(Status.OPEN)


def expired(plan: Plan, target: Target, marker: Marker, decision: Decision, now: int) -> TargetOutcome | None:
    """EXPIRED when *target* would still run, now or once its backoff is over, but the entry is older
    than its rule's max_event_age at *now* (unix ns); else None.

    An attempt running (here or elsewhere) is let finish, and a last attempt
    that died with its worker is exhausted, not expired: exhaustion wins.
    """
    limit = target.rule.max_event_age
    if limit is None:
        return None
    if decision.action is not Action.RUN and not (
            decision.action is Action.SKIP_BUSY and marker.kind == markers.WAITING):
        return None
    added = plan.added_at
    if added is None or now - added <= limit:
        return None
    return TargetOutcome(Status.EXPIRED, marker.attempts)


def expiry_reason(plan: Plan, target: Target, now: int) -> str:
    """The dead-letter reason of an expired target: ``older than max_event_age (1h): 3h12m``.

    The age is cut to whole seconds (to milliseconds under a second).
    """
    limit = target.rule.max_event_age
    if limit is None:
        raise ValueError(f"{target.rule.handler} has no max_event_age: it cannot expire")
    age = now - (plan.added_at or 0)
    age -= age % (SECOND if age >= SECOND else MILLISECOND)
    return f"older than max_event_age ({format_compact(limit)}): {format_compact(age)}"
