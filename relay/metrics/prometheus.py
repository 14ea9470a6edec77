"""Relay's Prometheus metrics: the single in-memory source of its counters.

One ``Metrics`` object per process, on its own registry (nothing is
registered at import time). Labels are only function, handler and outcome;
message, event, container and fingerprint IDs are never labels.

The consumer, the dispatcher and the Settler do not touch these metrics:
they emit domain events (relay.stream.seams.Observer), and ``PrometheusObserver``
turns each into its counter updates. It hears the runtime's events too
(relay.runtime.events.RuntimeObserver: builds, warm containers) and the
reconciler's (relay.live.reconciler.FunctionsObserver: functions loaded).
The backlog sampler, the schedule publisher, the buffer gauge and the
slot-wait counter still set theirs directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from relay.stream.limits import Limit
from relay.stream.verdict import Settlement, Verdict

if TYPE_CHECKING:
    from relay.live.status import FunctionStatus
    from relay.runtime.invocation import Outcome
    from relay.stream.seams import Attempt

DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
BUILD_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class Metrics:
    def __init__(self) -> None:
        disable_created_metrics()
        self.registry = registry = CollectorRegistry(auto_describe=True)

        def counter(name, documentation, labels=()):
            return Counter(name, documentation, labels, registry=registry)

        self.events_received = counter("events_received", "Stream entries delivered to this worker.")
        self.events_processed = counter("events_processed", "Stream entries acknowledged after every matching "
                                                            "invocation succeeded (or none matched).")
        self.handler_success = counter("handler_success", "Handler invocations that exited 0.")
        self.handler_failure = counter("handler_failure", "Handler invocations that failed or timed out.")
        self.retries = counter("retries", "Handler invocations that were a retry of an earlier attempt.")
        self.dlq_entries = counter("dlq_entries", "Entries written to the dead-letter stream.")
        self.handler_invocations = counter("handler_invocations", "Handler invocations by outcome.",
                                           ("outcome", "function", "handler"))
        self.build_failures = counter("build_failures", "Failed function image builds.", ("function",))
        self.function_events = counter("function_events", "Entries that matched a rule of the function.",
                                       ("function",))
        self.function_success = counter("function_handler_success", "Successful invocations of the function.",
                                        ("function",))
        self.function_failure = counter("function_handler_failure", "Failed invocations of the function.",
                                        ("function",))
        self.function_retries = counter("function_retries", "Retried invocations of the function.", ("function",))
        self.function_dlq_entries = counter("function_dlq_entries", "Dead-lettered entries that matched the "
                                                                     "function.", ("function",))
        self.events_expired = counter("events_expired", "Entries whose invocations of the function were not run: "
                                                        "older than max_event_age (dead-lettered or dropped).",
                                      ("function",))
        self.concurrency_waits = counter("concurrency_waits", "Invocations whose concurrency slot was not free "
                                                              "at once.")
        self.rate_limit_waits = counter("rate_limit_waits", "Invocations of the function its rate_limit held "
                                                            "back, whether they then ran or were left pending.",
                                        ("function",))
        self.rate_limit_wait_seconds = counter("rate_limit_wait_seconds", "Time invocations of the function "
                                                                          "waited for its rate_limit.", ("function",))
        self.concurrency_key_waits = counter("concurrency_key_waits", "Invocations of the function whose "
                                                                      "concurrency_key was held by another, whether "
                                                                      "they then ran or were left pending.",
                                             ("function",))
        self.concurrency_key_wait_seconds = counter("concurrency_key_wait_seconds", "Time invocations of the "
                                                                                    "function waited for their "
                                                                                    "concurrency_key.", ("function",))
        self.schedule_published = counter("schedule_occurrences_published", "Schedule occurrences this worker "
                                                                             "published.")
        self.schedule_duplicates = counter("schedule_occurrences_duplicate", "Schedule occurrences another "
                                                                             "worker had already published.")
        self.schedule_failures = counter("schedule_publish_failures", "Schedule occurrences this worker could "
                                                                      "not publish.")
        self.runs_unrecorded = counter("runs_unrecorded", "Run records the run ledger could not write to Redis "
                                                          "(relay runs does not show those attempts).")
        self.duplicate_runs = counter("duplicate_runs", "Successful invocations of the function on an entry "
                                                        "another worker acknowledged meanwhile: it ran twice.",
                                      ("function",))
        self.bookkeeping_deferred = counter("bookkeeping_deferred", "Claims, completion markers and "
                                                                    "acknowledgments that met a Redis error, kept "
                                                                    "to write when Redis answers.", ("kind",))
        self.bookkeeping_late = counter("bookkeeping_late", "Entries whose deferred bookkeeping was written after "
                                                            "the reclaim idle time (the entry may have run again).")
        self.bookkeeping_lost = counter("bookkeeping_lost", "Entries whose deferred bookkeeping was never written "
                                                            "(too much owed, or owed at stop without a journal).")
        self.bookkeeping_resent = counter("bookkeeping_resent", "Entries whose acknowledgment or markers were "
                                                                "written again after a Redis failover.")
        self.handler_duration = Histogram("handler_duration_seconds", "Handler invocation wall time.",
                                          ("function", "handler"), buckets=DURATION_BUCKETS, registry=registry)
        self.build_duration = Histogram("function_build_seconds", "Function image preparation time.",
                                        ("function",), buckets=BUILD_BUCKETS, registry=registry)
        self.pending_entries = Gauge("pending_entries", "Entries pending in the consumer group (XPENDING).",
                                     registry=registry)
        self.pending_oldest_age = Gauge("pending_oldest_age_seconds", "Age of the oldest pending entry.",
                                        registry=registry)
        self.buffered_events = Gauge("buffered_events", "Entries read and held locally, not yet finished.",
                                     registry=registry)
        self.in_flight = Gauge("in_flight_invocations", "Handler invocations running in this worker.",
                               registry=registry)
        self.warm_containers = Gauge("warm_containers", "Warm containers of this worker (starting, idle or "
                                                        "running an invocation).", ("function",), registry=registry)

    def function_loaded(self, name: str) -> None:
        """Create the function's counters at 0, so that its first build failure or failed
        invocation is an increase an alert sees (``increase()`` needs a sample before it)."""
        for counter in (self.build_failures, self.function_events, self.function_success,
                        self.function_failure, self.function_retries, self.function_dlq_entries,
                        self.events_expired, self.duplicate_runs):
            counter.labels(name)


class PrometheusObserver:
    """Domain events as Prometheus updates: the hot path's (a relay.stream.seams.Observer), the
    runtime's (a relay.runtime.events.RuntimeObserver) and the reconciler's (a FunctionsObserver)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def received(self, count: int) -> None:
        self.metrics.events_received.inc(count)

    def matched(self, function: str) -> None:
        self.metrics.function_events.labels(function).inc()

    def invocation_started(self, attempt: Attempt) -> None:
        self.metrics.in_flight.inc()

    def invocation_finished(self, attempt: Attempt, outcome: Outcome | None) -> None:
        """An engine that could not be reached is not an invocation of the handler: only in-flight counts it."""
        metrics = self.metrics
        metrics.in_flight.dec()
        if outcome is None or outcome.engine_unavailable:
            return
        function, handler = attempt.function, attempt.handler
        metrics.handler_duration.labels(function, handler).observe(outcome.duration)
        if attempt.number > 1:
            metrics.retries.inc()
            metrics.function_retries.labels(function).inc()
        if outcome.ok:
            metrics.handler_success.inc()
            metrics.function_success.labels(function).inc()
            metrics.handler_invocations.labels("success", function, handler).inc()
        else:
            metrics.handler_failure.inc()
            metrics.function_failure.labels(function).inc()
            metrics.handler_invocations.labels("timeout" if outcome.timed_out else "failure", function, handler).inc()

    def invocation_expired(self, attempt: Attempt) -> None:
        pass   # counted per entry and function by ``expired``

    def limit_waited(self, function: str, limit: Limit, seconds: float) -> None:
        metrics = self.metrics
        if limit is Limit.RATE:
            metrics.rate_limit_waits.labels(function).inc()
            metrics.rate_limit_wait_seconds.labels(function).inc(seconds)
        else:
            metrics.concurrency_key_waits.labels(function).inc()
            metrics.concurrency_key_wait_seconds.labels(function).inc(seconds)

    def settled(self, settlement: Settlement, count: int) -> None:
        metrics = self.metrics
        if settlement.verdict is Verdict.ACK:
            if settlement.counts_processed:
                metrics.events_processed.inc(count)
        elif settlement.verdict is Verdict.DEAD_LETTER:
            metrics.dlq_entries.inc(count)
            for name in settlement.functions:
                metrics.function_dlq_entries.labels(name).inc(count)

    def expired(self, function: str) -> None:
        self.metrics.events_expired.labels(function).inc()

    def ran_twice(self, attempt: Attempt) -> None:
        self.metrics.duplicate_runs.labels(attempt.function).inc()

    # --- the runtime's events ---------------------------------------------------------

    def build_failed(self, function: str) -> None:
        self.metrics.build_failures.labels(function).inc()

    def image_built(self, function: str, seconds: float) -> None:
        self.metrics.build_duration.labels(function).observe(seconds)

    def warm_containers_changed(self, function: str, count: int) -> None:
        self.metrics.warm_containers.labels(function).set(count)

    def image_missing(self, function: str, image: str) -> None:
        """Not counted: the invocation's own outcome (not charged) is all there is to count."""

    # --- the reconciler's events --------------------------------------------------------

    def functions_changed(self, statuses: Sequence[FunctionStatus]) -> None:
        for status in statuses:
            self.metrics.function_loaded(status.function.name)
