"""Running one entry's matched invocations, in order, with retries and limits.

For every target (functions by name, rules in file order) the stored state
decides: completed and exhausted invocations are skipped, and an eligible one
takes its concurrency slots, is claimed, and runs. A failure, an invocation
still running elsewhere or waiting out its backoff, or a slot that stays
busy stops the entry there, so later rules never run ahead of earlier ones.
An attempt that could not reach the Docker engine is not the handler's
failure: its claim is undone, so it costs no attempt and the reclaimer
brings the entry back once the engine is up. Then the entry is
acknowledged when every target is complete, dead-lettered when every
unfinished target is exhausted, and otherwise left pending for the
reclaimer.
"""

import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass

from relay.durations import format_duration
from relay.errors import RelayError
from relay.runtime.executor import Invocation
from relay.stream import markers
from relay.stream.markers import decide

log = logging.getLogger("relay.stream.dispatcher")

SLOT_WAIT = 15.0  # seconds; well under the reclaimer's 1m idle time

COMPLETE, TERMINAL, OPEN = "complete", "terminal", "open"
NO_SLOT = object()        # the slots stayed busy: leave the entry pending, charge nothing
CLAIMED_ELSEWHERE = object()  # another worker started this attempt first


class Dispatcher:
    def __init__(self, *, store, settler, executor, slots, metrics, environment, leases,
                 clock=time.time_ns, slot_wait=SLOT_WAIT):
        self.store = store
        self.settler = settler
        self.executor = executor
        self.slots = slots
        self.metrics = metrics
        self.environment = environment
        self.leases = leases
        self.clock = clock
        self.slot_wait = slot_wait

    def dispatch(self, plan):
        """Run *plan*'s targets and settle the entry; never raises for handler failures.

        The images of every target are leased for the whole dispatch, so a
        reconcile that swaps a function meanwhile cannot remove the version
        this entry matched, even while it waits for a concurrency slot.
        """
        with ExitStack() as leases:
            for image in dict.fromkeys(target.active.image for target in plan.targets):
                leases.enter_context(self.leases.lease(image))
            self._dispatch(plan)

    def _dispatch(self, plan):
        stored = self.store.load(plan.message_id)
        statuses = {}
        for index, target in enumerate(plan.targets):
            field = target.field
            raw = stored.get(field)
            decision = decide(markers.parse(raw), self.clock(), target.rule.retries)
            if decision.action == "skip-complete":
                statuses[index] = (COMPLETE, 0)
            elif decision.action == "skip-terminal":
                statuses[index] = (TERMINAL, decision.attempt)
            elif decision.action == "skip-busy":
                log.debug("Invocation running elsewhere or backing off; entry left pending",
                          extra=_attrs(plan, target))
                statuses[index] = (OPEN, decision.attempt)
                break                     # later rules run only after this one is done
            elif decision.action == "exhaust":
                self.store.exhausted(plan.message_id, field, decision.attempt)
                statuses[index] = (TERMINAL, decision.attempt)
            else:
                outcome = self._run(plan, target, raw, decision.attempt)
                if outcome is NO_SLOT:
                    statuses[index] = (OPEN, decision.attempt)
                    break
                if outcome is CLAIMED_ELSEWHERE:
                    statuses[index] = (OPEN, decision.attempt)
                    continue
                statuses[index] = outcome
                if outcome[0] != COMPLETE:
                    break                 # abort on the first failure
        self._settle(plan, stored, statuses)

    # --- one invocation ---------------------------------------------------------

    def _run(self, plan, target, raw, attempt):
        """Run one attempt: (status, attempts), or NO_SLOT / CLAIMED_ELSEWHERE."""
        active, rule = target.active, target.rule
        with self.slots.hold(active.name, active.function.template.concurrency, self.slot_wait) as held:
            if not held:
                log.info("No concurrency slot free; entry left pending", extra=_attrs(plan, target))
                return NO_SLOT
            started = self.clock()
            if not self.store.try_start(plan.message_id, target.field, raw, started + rule.timeout, attempt):
                log.debug("Invocation claimed by another worker; skipped", extra=_attrs(plan, target))
                return CLAIMED_ELSEWHERE
            log.debug("Rule matched", extra=_attrs(plan, target, attempt=attempt))
            outcome = self._execute(plan, target, attempt)
        if outcome.engine_unavailable:
            self.store.release(plan.message_id, target.field, raw)
            log.warning("Docker engine unreachable; attempt not charged, entry left pending",
                        extra=_attrs(plan, target, attempt=attempt, error=outcome.error))
            return (OPEN, attempt)
        return self._record(plan, target, attempt, outcome)

    def _execute(self, plan, target, attempt):
        active = target.active
        self.metrics.in_flight.inc()
        try:
            try:
                env = self.environment(active.function)
            except RelayError as error:
                return _Failed(str(error))
            invocation = Invocation(
                function=active.name, handler=target.rule.handler, image=active.image,
                payload=plan.payload.encode(), timeout=target.rule.timeout, env=env,
                message_id=plan.message_id, event_id=plan.event_id, event_name=plan.event_name,
                network=active.function.template.network)
            return self.executor.run(invocation)
        finally:
            self.metrics.in_flight.dec()

    def _record(self, plan, target, attempt, outcome):
        metrics, name, handler = self.metrics, target.active.name, target.rule.handler
        metrics.handler_duration.labels(name, handler).observe(outcome.duration)
        if attempt > 1:
            metrics.retries.inc()
            metrics.function_retries.labels(name).inc()
        attrs = _attrs(plan, target, attempt=attempt, duration=f"{outcome.duration:.3f}s",
                       exit_code=outcome.exit_code)
        if outcome.ok:
            self.store.complete(plan.message_id, target.field)
            metrics.handler_success.inc()
            metrics.function_success.labels(name).inc()
            metrics.handler_invocations.labels("success", name, handler).inc()
            log.info("Handler executed", extra=attrs)
            return (COMPLETE, attempt)

        metrics.handler_failure.inc()
        metrics.function_failure.labels(name).inc()
        metrics.handler_invocations.labels("timeout" if outcome.timed_out else "failure", name, handler).inc()
        attrs["error"] = outcome.error or f"exit code {outcome.exit_code}"
        if attempt >= 1 + target.rule.retries:
            self.store.exhausted(plan.message_id, target.field, attempt)
            log.error("Handler failed; attempts exhausted", extra=attrs)
            return (TERMINAL, attempt)
        wait = markers.backoff(attempt)
        self.store.failed(plan.message_id, target.field, self.clock() + wait, attempt)
        attrs["retry_in"] = format_duration(wait)
        log.warning("Handler failed; will retry", extra=attrs)
        return (OPEN, attempt)

    # --- the entry ----------------------------------------------------------------

    def _settle(self, plan, stored, statuses):
        """Acknowledge, dead-letter or leave pending, from every target's status."""
        now = self.clock()
        for index, target in enumerate(plan.targets):
            if index not in statuses:   # not reached this time: judge by its stored state
                marker = markers.parse(stored.get(target.field))
                decision = decide(marker, now, target.rule.retries)
                statuses[index] = {"skip-complete": (COMPLETE, 0), "skip-terminal": (TERMINAL, marker.attempts)}.get(
                    decision.action, (OPEN, 0))
        kinds = {status for status, _ in statuses.values()}
        if kinds <= {COMPLETE}:
            if self.settler.ack([plan.message_id]) and not plan.scheduled:
                self.metrics.events_processed.inc()
            return
        if OPEN in kinds:
            return
        attempts = max(count for status, count in statuses.values() if status == TERMINAL)
        exhausted = sorted({plan.targets[index].field for index, (status, _) in statuses.items() if status == TERMINAL})
        reason = f"attempts exhausted for {', '.join(exhausted)}"
        if self.settler.dead_letter(plan.message_id, plan.payload, reason, attempts):
            self.metrics.dlq_entries.inc()
            for name in sorted({target.active.name for target in plan.targets}):
                self.metrics.function_dlq_entries.labels(name).inc()


@dataclass(frozen=True)
class _Failed:
    """An invocation that failed before it reached Docker (e.g. a missing secret)."""

    error: str
    ok: bool = False
    exit_code: int | None = None
    duration: float = 0.0
    timed_out: bool = False
    engine_unavailable: bool = False


def _attrs(plan, target, **more):
    attrs = {"function": target.active.name, "handler": target.rule.handler, "message_id": plan.message_id,
             "event_id": plan.event_id, "event_name": plan.event_name}
    attrs.update(more)
    return {key: value for key, value in attrs.items() if value is not None}
