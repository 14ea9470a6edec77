"""Running one entry's matched invocations, in order, with retries and limits.

An entry with a ``schedule`` field runs only if Relay's scheduler published
it: before anything else its occurrence's dedup key is asked which entry that
was (one script call, relay.stream.schedules.Provenance), and any other entry
is dead-lettered with no attempt charged and no handler run (the verdict is
relay.stream.verdict.decide_provenance). Entries without the field never pay
for the check.

For every target (functions by name, rules in file order) its stored
marker says where it stands (relay.stream.verdict.marked_outcome: the
judgement the settle decision makes of the targets a dispatch does not
reach): completed and exhausted invocations are skipped, one whose entry
is older than its rule's max_event_age is expired (not run; the later ones
still run), and an eligible one is admitted (relay.stream.admission: its
concurrency slots and, when the template sets any, its function's
fleet-wide limits), is claimed, and runs. A failure, an invocation still
running elsewhere or waiting out its backoff, or a refused admission stops
the entry there, so later rules never run ahead of earlier ones.
An attempt that could not reach the Docker engine is not the handler's
failure: its claim is undone, so it costs no attempt and the reclaimer
brings the entry back once the engine is up. Then the entry is
acknowledged when every target is complete, dead-lettered when every
unfinished target is exhausted or expired (or acknowledged when those
expired say drop), and otherwise left pending for the reclaimer:
relay.stream.verdict decides, from the targets' outcomes, and the Settler
carries it out. A failed attempt waits out its rule's retry_backoff
(jittered with retry_jitter); ``dispatch`` returns when the next attempt
is due, so the consumer may hold the entry for it. The completed marker of
the last target run is sent in the acknowledgment's round trip (one round
trip less per entry); an earlier target's is written before the next one
starts.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from contextlib import ExitStack
from enum import Enum
from typing import TYPE_CHECKING

import redis

from relay.durations import format_duration
from relay.errors import RelayError
from relay.runtime.invocation import Invocation, Outcome
from relay.secrets.masking import mask, secret_pieces
from relay.stream import markers, seams
from relay.stream.keys import idempotency_key, target_field
from relay.stream.markers import Action, Marker, decide
from relay.stream.plans import Plan
from relay.stream.seams import Attempt, Refusal, RetryDue, Settle
from relay.stream.settle import takes_prelude
from relay.stream.verdict import (
    OPEN,
    Settlement,
    Status,
    TargetOutcome,
    Verdict,
    decide_provenance,
    decide_settlement,
    expiry_reason,
    marked_outcome,
)

if TYPE_CHECKING:
    from relay.functions.rules import Target

log = logging.getLogger("relay.stream.dispatcher")


class NotRun(Enum):
    """Why an eligible invocation did not run on this delivery; it costs no attempt."""

    REFUSED = "refused"                       # not admitted (the slots, the rate or the key): stop, leave pending
    CLAIMED_ELSEWHERE = "claimed elsewhere"   # another worker started this attempt first: go on


class Dispatcher:
    def __init__(self, *, stream: str, store: seams.InvocationStore, settler: seams.Settler,
                 executor: seams.Executor, admission: seams.Admission, observer: seams.Observer,
                 environment: seams.Environment, pins: seams.Pins, provenance: seams.Provenance,
                 clock: seams.Clock = time.time_ns) -> None:
        self.stream = stream      # names the invocations' idempotency keys
        self.store = store
        self.settler = settler
        self.executor = executor
        self.admission = admission
        self.observer = observer
        self.environment = environment
        self.pins = pins
        self.provenance = provenance
        self.clock = clock

    def dispatch(self, plan: Plan) -> RetryDue | None:
        """Run *plan*'s targets and settle the entry; never raises for handler failures.

        Returns when the next attempt is due if the entry was left pending
        with a retry waiting out its backoff (the consumer may hold the entry
        for it), else None.

        The images of every target are pinned for the whole dispatch, so a
        reconcile that swaps a function meanwhile cannot remove the version
        this entry matched, even while it waits for a concurrency slot.
        A schedule occurrence is first checked to be the entry the scheduler
        published; any other is settled unrun.
        """
        if plan.occurrence is not None and (refused := self._unpublished(plan)) is not None:
            self.settler.settle(plan, refused)
            return None
        with ExitStack() as pins:
            for image in dict.fromkeys(target.active.image for target in plan.targets):
                pins.enter_context(self.pins.holding(image))
            return self._dispatch(plan)

    def _dispatch(self, plan: Plan) -> RetryDue | None:
        stored = self.store.load(plan.message_id)
        outcomes: dict[int, TargetOutcome] = {}
        succeeded: list[Attempt] = []  # attempts that succeeded in this dispatch
        unwritten: str | None = None   # the field of a target that completed here, its marker not written yet
        retry: RetryDue | None = None  # the target the dispatch stopped at waits out a backoff
        for index, target in enumerate(plan.targets):
            field = target_field(target)
            raw = stored.get(field)
            marker, now = markers.parse(raw), self.clock()
            decision = decide(marker, now, target.rule.retries)
            standing = marked_outcome(plan, target, marker, decision, now)
            if standing.status is not Status.OPEN:    # complete, exhausted or expired: the later rules still run
                if standing.status is Status.EXPIRED:
                    log.info("Entry older than max_event_age; handler not run", extra=_attrs(
                        plan, target, reason=expiry_reason(plan, target, now), on_expired=target.rule.on_expired))
                    self.observer.invocation_expired(self._attempt(plan, target, marker.attempts, now))
                outcomes[index] = standing
            elif decision.action is Action.SKIP_BUSY:
                log.debug("Invocation running elsewhere or backing off; entry left pending",
                          extra=_attrs(plan, target))
                outcomes[index], retry = TargetOutcome(Status.OPEN, decision.attempt), _backing_off(marker, now)
                break                     # later rules run only after this one is done
            elif decision.action is Action.EXHAUST:
                self.store.exhausted(plan.message_id, field, decision.attempt)
                outcomes[index] = TargetOutcome(Status.TERMINAL, decision.attempt)
            else:
                if unwritten is not None:     # written before the next one runs: a crash then cannot repeat it
                    self.store.complete(plan.message_id, unwritten)
                    unwritten = None
                outcome = self._run(plan, target, raw, decision.attempt)
                if outcome is NotRun.REFUSED:
                    outcomes[index] = TargetOutcome(Status.OPEN, decision.attempt)
                    break
                if outcome is NotRun.CLAIMED_ELSEWHERE:
                    outcomes[index] = TargetOutcome(Status.OPEN, decision.attempt)
                    continue
                outcomes[index] = outcome
                if outcome.status is not Status.COMPLETE:
                    retry = RetryDue(outcome.retry_in / 1e9, after_failure=True) if outcome.retry_in else None
                    break                 # abort on the first failure
                unwritten = field
                succeeded.append(self._attempt(plan, target, decision.attempt, now))
        settlement = decide_settlement(plan, outcomes, stored=stored, now=self.clock())
        retry = retry if settlement.verdict is Verdict.LEAVE_PENDING else None
        if self._settle(plan, settlement, unwritten, retry) is Settle.ELSEWHERE and succeeded:
            log.warning("Entry acknowledged by another worker while it ran here: its handlers ran twice",
                        extra={"message_id": plan.message_id,
                               "functions": ",".join(dict.fromkeys(attempt.function for attempt in succeeded))})
            for attempt in succeeded:
                self.observer.ran_twice(attempt)
        return retry

    def _unpublished(self, plan: Plan) -> Settlement | None:
        """None when *plan*, a schedule occurrence, is the entry Relay's scheduler published; else how to
        settle it unrun: dead-lettered (decide_provenance), or left pending when Redis cannot say."""
        try:
            published = self.provenance.published(plan)
        except redis.RedisError as error:
            log.warning("Cannot check that the scheduler published a schedule occurrence; entry left pending",
                        extra={"message_id": plan.message_id, "occurrence": plan.occurrence, "error": str(error)})
            return OPEN
        return decide_provenance(plan, published)

    def _settle(self, plan: Plan, settlement: Settlement, unwritten: str | None, retry: RetryDue | None) -> Settle:
        """Settle the entry, with the marker of the target that completed last (*unwritten*).

        When the entry is acknowledged and its state cleared, the marker goes in
        the acknowledgment's round trip, ahead of the XACK; otherwise it is
        written first, on its own.
        """
        if unwritten is None:
            return self.settler.settle(plan, settlement, retry=retry)
        if takes_prelude(settlement):
            return self.settler.settle(plan, settlement,
                                       prelude=lambda pipe: self.store.queue_complete(pipe, plan.message_id,
                                                                                       unwritten))
        self.store.complete(plan.message_id, unwritten)
        return self.settler.settle(plan, settlement, retry=retry)

    # --- one invocation ---------------------------------------------------------

    def _run(self, plan: Plan, target: Target, raw: bytes | None, attempt: int) -> TargetOutcome | NotRun:
        """Run one attempt: its TargetOutcome, or why it did not run (NotRun)."""
        admitted = self.admission.admit(target, plan.event)
        if isinstance(admitted, Refusal):
            log.info(_LEFT_PENDING[admitted], extra=_attrs(plan, target))
            return NotRun.REFUSED
        with admitted:
            started = self.clock()
            if not self.store.try_start(plan.message_id, target_field(target), raw, started + target.rule.timeout,
                                        attempt):
                log.debug("Invocation claimed by another worker; skipped", extra=_attrs(plan, target))
                return NotRun.CLAIMED_ELSEWHERE
            log.debug("Rule matched", extra=_attrs(plan, target, attempt=attempt))
            outcome = self._execute(plan, target, attempt)
        if outcome.engine_unavailable:
            self.store.release(plan.message_id, target_field(target), raw)
            log.warning("Invocation could not reach a container; attempt not charged, entry left pending",
                        extra=_attrs(plan, target, attempt=attempt, error=outcome.error))
            return TargetOutcome(Status.OPEN, attempt)
        return self._record(plan, target, attempt, outcome)

    def _execute(self, plan: Plan, target: Target, attempt: int) -> Outcome:
        """The attempt's Outcome, between the invocation_started and invocation_finished events."""
        started = self._attempt(plan, target, attempt, self.clock())
        self.observer.invocation_started(started)
        outcome = None
        try:
            outcome = self._invoke(plan, target, started)
            return outcome
        finally:
            self.observer.invocation_finished(started, outcome)

    def _attempt(self, plan: Plan, target: Target, number: int, now: int) -> Attempt:
        return Attempt(message_id=plan.message_id, event_id=plan.event_id, function=target.active.name,
                       handler=target.rule.handler, rule=target_field(target), number=number,
                       idempotency_key=plan.occurrence or idempotency_key(self.stream, plan.message_id, target),
                       started_at=now, replay_of=plan.replay_of)

    def _invoke(self, plan: Plan, target: Target, attempt: Attempt) -> Outcome:
        active = target.active
        assert plan.payload is not None, "an entry with targets was read as text"
        try:
            env = self.environment(active.function)
        except RelayError as error:
            return Outcome.not_started(str(error))
        invocation = Invocation(
            function=active.name, handler=target.rule.handler, image=active.image,
            payload=plan.payload.encode(), timeout=target.rule.timeout, env=env,
            message_id=plan.message_id, event_id=plan.event_id, event_name=plan.event_name,
            network=active.function.template.network, runtime=active.function.template.runtime,
            warm=active.function.template.warm, attempt=attempt.number, idempotency_key=attempt.idempotency_key)
        outcome = self.executor.run(invocation)
        secrets = active.function.template.secrets
        if secrets and (outcome.stdout_tail or outcome.stderr_tail):
            pieces = secret_pieces(env[variable] for variable in secrets if variable in env)
            outcome = dataclasses.replace(outcome, stdout_tail=mask(outcome.stdout_tail, pieces),
                                          stderr_tail=mask(outcome.stderr_tail, pieces))
        return outcome

    def _record(self, plan: Plan, target: Target, attempt: int, outcome: Outcome) -> TargetOutcome:
        attrs = _attrs(plan, target, attempt=attempt, duration=f"{outcome.duration:.3f}s",
                       exit_code=outcome.exit_code)
        if outcome.ok:    # its marker is written by _dispatch: with the next run, or with the acknowledgment
            log.info("Handler executed", extra=attrs)
            return TargetOutcome(Status.COMPLETE, attempt)

        attrs["error"] = outcome.error or f"exit code {outcome.exit_code}"
        if attempt >= 1 + target.rule.retries:
            self.store.exhausted(plan.message_id, target_field(target), attempt)
            log.error("Handler failed; attempts exhausted", extra=attrs)
            return TargetOutcome(Status.TERMINAL, attempt)
        wait = markers.backoff(attempt, target.rule.retry_backoff)
        if target.rule.retry_jitter:
            wait = markers.jittered(wait, random.random())
        self.store.failed(plan.message_id, target_field(target), self.clock() + wait, attempt)
        attrs["retry_in"] = format_duration(wait)
        log.warning("Handler failed; will retry", extra=attrs)
        return TargetOutcome(Status.OPEN, attempt, wait)


def _backing_off(marker: Marker, now: int) -> RetryDue | None:
    """The RetryDue of an invocation found waiting out its backoff, else None (it is running)."""
    return RetryDue((marker.deadline - now) / 1e9, after_failure=False) if marker.kind == markers.WAITING else None


_LEFT_PENDING = {Refusal.NO_SLOT: "No concurrency slot free; entry left pending",
                 Refusal.RATE_LIMIT: "Rate limit reached; entry left pending",
                 Refusal.CONCURRENCY_KEY: "Concurrency key held by another invocation; entry left pending"}


def _attrs(plan: Plan, target: Target, **more: object) -> dict[str, object]:
    attrs: dict[str, object] = {
        "function": target.active.name, "handler": target.rule.handler, "message_id": plan.message_id,
        "event_id": plan.event_id, "event_name": plan.event_name}
    attrs.update(more)
    return {key: value for key, value in attrs.items() if value is not None}
