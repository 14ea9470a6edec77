"""The one settle decision: what happens to a stream entry, from its plan and its targets' outcomes.

An entry is acknowledged when there is nothing (more) to run for it,
dead-lettered when it can never succeed, and otherwise left pending for the
reclaimer:

    trimmed away while pending          → ACK (nothing left to run)
    schedule occurrence now obsolete    → ACK
    malformed                           → DEAD_LETTER, 0 attempts
    matches a function not built yet    → LEAVE_PENDING
    matches nothing                     → ACK, no invocation state to clear
    has targets, not yet dispatched     → None: dispatch it
    every target complete               → ACK
    any target still open               → LEAVE_PENDING
    every unfinished target exhausted   → DEAD_LETTER, the most attempts any made

Targets the dispatch did not reach this time (it stops at the first one that
is not complete) are judged by their stored markers. Pure: no Redis, no
clock, no logging; the Settler carries a Settlement out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import overload

from relay.stream import markers
from relay.stream.keys import target_field
from relay.stream.markers import Action
from relay.stream.plans import Plan


class Status(Enum):
    """Where one target of an entry stands after a delivery."""

    COMPLETE = "complete"     # succeeded, now or earlier
    TERMINAL = "terminal"     # attempts exhausted
    OPEN = "open"             # may still run: failed with retries left, busy, not reached, no slot


@dataclass(frozen=True, slots=True)
class TargetOutcome:
    status: Status
    attempts: int = 0         # attempts made (for TERMINAL, the count the dead-letter entry reports)


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
    judged = [outcomes.get(index) or stored_outcome(stored.get(target_field(target)), now, target.rule.retries)
              for index, target in enumerate(plan.targets)]
    statuses = {outcome.status for outcome in judged}
    if statuses <= {Status.COMPLETE}:
        return Settlement(Verdict.ACK, Cause.DONE, counts_processed=not plan.scheduled)
    if Status.OPEN in statuses:
        return OPEN
    terminal = [(target, outcome) for target, outcome in zip(plan.targets, judged, strict=True)
                if outcome.status is Status.TERMINAL]
    exhausted = sorted({target_field(target) for target, _ in terminal})
    return Settlement(Verdict.DEAD_LETTER, Cause.EXHAUSTED, reason=f"attempts exhausted for {', '.join(exhausted)}",
                      attempts=max(outcome.attempts for _, outcome in terminal),
                      functions=tuple(sorted({target.active.name for target in plan.targets})))


def stored_outcome(raw: bytes | str | None, now: int, retries: int) -> TargetOutcome:
    """A target this dispatch did not reach, by its stored marker: complete, exhausted, or open."""
    marker = markers.parse(raw)
    action = markers.decide(marker, now, retries).action
    if action is Action.SKIP_COMPLETE:
        return COMPLETE
    if action is Action.SKIP_TERMINAL:
        return TargetOutcome(Status.TERMINAL, marker.attempts)
    return TargetOutcome(Status.OPEN)
