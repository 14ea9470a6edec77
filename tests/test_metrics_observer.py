"""PrometheusObserver, pure: domain events in, exactly the metric updates the hot path made inline before."""

from types import SimpleNamespace

import pytest

from relay.metrics.prometheus import Metrics, PrometheusObserver
from relay.runtime.events import RuntimeObserver, RuntimeObservers
from relay.runtime.invocation import Outcome
from relay.stream.limits import Limit
from relay.stream.seams import Attempt
from relay.stream.verdict import OBSOLETE, OPEN, TRIMMED, UNMATCHED, WAITING, Cause, Settlement, Verdict
from relay.wiring import Observers


@pytest.fixture
def metrics():
    return Metrics()


@pytest.fixture
def observer(metrics):
    return PrometheusObserver(metrics)


def sample(metrics, name, **labels):
    return metrics.registry.get_sample_value(name, labels) or 0.0


def attempt(number=1, function="orders", handler="app.h"):
    return Attempt(message_id="1-0", event_id="e1", function=function, handler=handler, rule=f"{function}/{handler}",
                   number=number, idempotency_key="k", started_at=0)


def ok(duration=0.5):
    return Outcome(ok=True, exit_code=0, duration=duration)


def test_received_and_matched(metrics, observer):
    observer.received(3)
    observer.received(2)
    observer.matched("orders")
    observer.matched("orders")
    observer.matched("audit")
    assert sample(metrics, "events_received_total") == 5
    assert sample(metrics, "function_events_total", function="orders") == 2
    assert sample(metrics, "function_events_total", function="audit") == 1


def test_an_invocation_is_in_flight_between_its_two_events(metrics, observer):
    observer.invocation_started(attempt(1))
    observer.invocation_started(attempt(1))
    assert sample(metrics, "in_flight_invocations") == 2
    observer.invocation_finished(attempt(1), ok())
    observer.invocation_finished(attempt(1), None)       # running it raised
    assert sample(metrics, "in_flight_invocations") == 0


def test_a_success(metrics, observer):
    observer.invocation_started(attempt(1))
    observer.invocation_finished(attempt(1), ok(0.3))
    assert sample(metrics, "handler_success_total") == 1
    assert sample(metrics, "function_handler_success_total", function="orders") == 1
    assert sample(metrics, "handler_invocations_total", outcome="success", function="orders", handler="app.h") == 1
    assert sample(metrics, "handler_duration_seconds_count", function="orders", handler="app.h") == 1
    assert sample(metrics, "handler_duration_seconds_sum", function="orders", handler="app.h") == 0.3
    assert sample(metrics, "handler_failure_total") == 0 and sample(metrics, "retries_total") == 0


@pytest.mark.parametrize(("outcome", "label"), [
    (Outcome(ok=False, exit_code=3, duration=0.1, error="exited with code 3"), "failure"),
    (Outcome(ok=False, exit_code=None, duration=5.0, timed_out=True, error="timed out"), "timeout"),
    (Outcome.not_started("secret 'x' is not in the secret store"), "failure"),
])
def test_a_failure_and_a_retry(metrics, observer, outcome, label):
    observer.invocation_started(attempt(2))
    observer.invocation_finished(attempt(2), outcome)
    assert sample(metrics, "handler_failure_total") == 1
    assert sample(metrics, "function_handler_failure_total", function="orders") == 1
    assert sample(metrics, "handler_invocations_total", outcome=label, function="orders", handler="app.h") == 1
    assert sample(metrics, "retries_total") == 1 and sample(metrics, "function_retries_total", function="orders") == 1
    assert sample(metrics, "handler_duration_seconds_count", function="orders", handler="app.h") == 1


def test_an_unreachable_engine_counts_nothing_but_in_flight(metrics, observer):
    observer.invocation_started(attempt(2))
    observer.invocation_finished(attempt(2), Outcome(ok=False, exit_code=None, duration=0.2,
                                                   engine_unavailable=True))
    assert sample(metrics, "in_flight_invocations") == 0
    for name in ("handler_failure_total", "handler_success_total", "retries_total"):
        assert sample(metrics, name) == 0
    assert sample(metrics, "handler_duration_seconds_count", function="orders", handler="app.h") == 0


def test_settled_acks_count_as_processed_only_when_the_settlement_says_so(metrics, observer):
    observer.settled(UNMATCHED, 16)
    observer.settled(Settlement(Verdict.ACK, Cause.DONE, counts_processed=True), 1)
    observer.settled(Settlement(Verdict.ACK, Cause.DONE, counts_processed=False), 1)   # a schedule occurrence
    for settlement in (TRIMMED, OBSOLETE, WAITING, OPEN):
        observer.settled(settlement, 1)
    assert sample(metrics, "events_processed_total") == 17
    assert sample(metrics, "dlq_entries_total") == 0


def test_settled_dead_letters(metrics, observer):
    observer.settled(Settlement(Verdict.DEAD_LETTER, Cause.MALFORMED, reason="bad", attempts=0), 1)
    observer.settled(Settlement(Verdict.DEAD_LETTER, Cause.EXHAUSTED, reason="attempts exhausted for a/h",
                                attempts=3, functions=("audit", "orders")), 1)
    assert sample(metrics, "dlq_entries_total") == 2
    assert sample(metrics, "function_dlq_entries_total", function="audit") == 1
    assert sample(metrics, "function_dlq_entries_total", function="orders") == 1
    assert sample(metrics, "events_processed_total") == 0


def test_expiries_count_per_function(metrics, observer):
    observer.expired("welcome")
    observer.expired("welcome")
    observer.expired("digest")
    assert sample(metrics, "events_expired_total", function="welcome") == 2
    assert sample(metrics, "events_expired_total", function="digest") == 1


def test_a_loaded_function_starts_with_its_expiries_at_zero(metrics):
    metrics.function_loaded("welcome")
    assert metrics.registry.get_sample_value("events_expired_total", {"function": "welcome"}) == 0.0


def test_limit_waits_count_per_function_and_limit(metrics, observer):
    observer.limit_waited("orders", Limit.RATE, 0.25)
    observer.limit_waited("orders", Limit.RATE, 0.0)
    observer.limit_waited("orders", Limit.KEY, 1.5)
    observer.limit_waited("audit", Limit.KEY, 2.0)
    assert sample(metrics, "rate_limit_waits_total", function="orders") == 2
    assert sample(metrics, "rate_limit_wait_seconds_total", function="orders") == 0.25
    assert sample(metrics, "concurrency_key_waits_total", function="orders") == 1
    assert sample(metrics, "concurrency_key_wait_seconds_total", function="orders") == 1.5
    assert sample(metrics, "concurrency_key_waits_total", function="audit") == 1
    assert sample(metrics, "rate_limit_waits_total", function="audit") == 0


def test_observers_pass_every_event_to_each_in_order(metrics):
    class Recorder:
        def __init__(self):
            self.events = []

        def __getattr__(self, name):
            return lambda *args: self.events.append((name, *args))

    recorder = Recorder()
    both = Observers([PrometheusObserver(metrics), recorder])
    both.received(1)
    both.matched("orders")
    both.invocation_started(attempt(1))
    both.invocation_finished(attempt(1), None)
    both.invocation_expired(attempt())
    both.limit_waited("orders", Limit.KEY, 0.5)
    both.settled(UNMATCHED, 1)
    both.expired("orders")
    assert [event[0] for event in recorder.events] == ["received", "matched", "invocation_started",
                                                       "invocation_finished", "invocation_expired", "limit_waited",
                                                       "settled", "expired"]
    assert sample(metrics, "events_received_total") == 1 and sample(metrics, "events_processed_total") == 1
    assert sample(metrics, "events_expired_total", function="orders") == 1


# --- the runtime's and the reconciler's events ------------------------------------------


def test_builds_warm_containers_and_loaded_functions(metrics, observer):
    observer.build_failed("orders")
    observer.image_built("orders", 2.5)
    observer.warm_containers_changed("orders", 3)
    observer.warm_containers_changed("orders", 2)
    observer.image_missing("orders", "relay-fn-orders:0000000000000000")   # counted by the invocation's outcome
    observer.functions_changed([SimpleNamespace(function=SimpleNamespace(name="audit"))])   # a FunctionStatus
    assert sample(metrics, "build_failures_total", function="orders") == 1
    assert sample(metrics, "function_build_seconds_count", function="orders") == 1
    assert sample(metrics, "function_build_seconds_sum", function="orders") == 2.5
    assert sample(metrics, "warm_containers", function="orders") == 2
    assert metrics.registry.get_sample_value("build_failures_total", {"function": "audit"}) == 0   # created at 0
    assert metrics.registry.get_sample_value("function_handler_failure_total", {"function": "audit"}) == 0


def test_runtime_observers_pass_every_event_to_each_in_order_and_take_one_more_later(metrics):
    class Recorder(RuntimeObserver):
        def __init__(self):
            self.events = []

        def image_missing(self, function, image):     # the one event it hears; the others do nothing
            self.events.append((function, image))

    recorder = Recorder()
    events = RuntimeObservers([PrometheusObserver(metrics)])
    events.build_failed("orders")
    events.add(recorder)
    events.image_built("orders", 1.0)
    events.warm_containers_changed("orders", 1)
    events.image_missing("orders", "relay-fn-orders:0000000000000000")
    assert recorder.events == [("orders", "relay-fn-orders:0000000000000000")]
    assert sample(metrics, "build_failures_total", function="orders") == 1
    assert sample(metrics, "warm_containers", function="orders") == 1
