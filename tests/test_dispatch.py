"""The dispatcher and consumer against a real redis-server, with a scripted executor.

The engine here (tests/support/engine.py) runs a test double that returns
programmed outcomes, so every state path (ack, no match, abort on first
failure, backoff markers, exhaustion, DLQ, malformed input, busy slots) runs
in milliseconds with a controllable clock. The real executor and Docker are
exercised end to end in test_engine.py.
"""

import json
import time
from datetime import UTC, datetime

import gevent
import pytest

from relay.durations import MINUTE, SECOND
from relay.stream import markers
from relay.stream.deadletters import DeadLetters
from relay.stream.keys import StreamAddress, dlq_stream, idempotency_key
from relay.stream.schedules import Occurrence, Publisher
from tests.support.engine import (
    ADDRESS,
    AUDIT,
    CONSUMER,
    GROUP,
    ORDERS,
    STREAM,
    T0,
    Engine,
    Result,
    function,
    value,
)


@pytest.fixture
def engine(redis_client):
    return Engine(redis_client, [ORDERS, AUDIT])


def test_all_matches_succeed_then_ack(engine):
    message_id = engine.publish({"kind": "order", "event_id": "evt_1", "event_name": "INSERT"})
    engine.read()
    assert engine.handlers_called() == [("audit", "audit.handler"), ("orders", "first.handler"),
                                        ("orders", "second.handler")]
    call = engine.executor.calls[0]
    assert (call.message_id, call.event_id, call.event_name, call.image) == (
        message_id, "evt_1", "INSERT", "relay-fn-audit:0000000000000000")
    assert json.loads(call.payload) == {"kind": "order", "event_id": "evt_1", "event_name": "INSERT"}
    assert engine.pending() == 0 and engine.state(message_id) == {}
    assert value(engine.metrics.events_processed) == 1 and value(engine.metrics.handler_success) == 3


def test_no_match_is_acked_without_running_anything(engine):
    engine.publish({"kind": "other"})
    engine.publish({"kind": "other"})
    engine.read()
    assert engine.executor.calls == [] and engine.pending() == 0
    assert value(engine.metrics.events_processed) == 2


def test_first_failure_aborts_and_records_backoff(engine):
    engine.executor.program("first.handler", Result(ok=False, exit_code=3))
    message_id = engine.publish({"kind": "order"})
    engine.read()
    assert engine.handlers_called() == [("audit", "audit.handler"), ("orders", "first.handler")]
    assert engine.pending() == 1
    assert engine.state(message_id) == {"audit/audit.handler": "ok",
                                        "orders/first.handler": f"next_attempt_at:{T0 + MINUTE}#1"}
    assert engine.client.ttl(markers.state_key(STREAM, GROUP, message_id)) > 6 * 24 * 3600


def test_redelivery_skips_completed_and_waits_for_backoff(engine):
    engine.executor.program("first.handler", Result(ok=False, exit_code=1), Result(ok=False, exit_code=1))
    message_id = engine.publish({"kind": "order"})
    engine.read()
    engine.redeliver(after=30 * SECOND)          # still inside the 1m backoff: nothing runs
    assert len(engine.executor.calls) == 2 and engine.pending() == 1
    engine.redeliver(after=31 * SECOND)          # backoff over: attempt 2 (fails again, waits 2m)
    assert engine.handlers_called()[2:] == [("orders", "first.handler")]
    assert engine.state(message_id)["orders/first.handler"] == f"next_attempt_at:{engine.clock.now + 2 * MINUTE}#2"
    engine.redeliver(after=2 * MINUTE)           # attempt 3 succeeds, then second.handler runs; ack
    assert engine.handlers_called()[3:] == [("orders", "first.handler"), ("orders", "second.handler")]
    assert engine.pending() == 0 and engine.state(message_id) == {}
    assert value(engine.metrics.retries) == 2 and value(engine.metrics.function_retries, "orders") == 2


def test_two_rules_with_one_handler_each_run_once_with_their_own_state(redis_client):
    twins = function("twins", """
runtime: python3.14
events:
  - handler: app.handler
    pattern: {kind: [order]}
  - handler: app.handler
    pattern: {kind: [order]}
    retries: 0
""")
    engine = Engine(redis_client, [twins])
    engine.executor.program("app.handler", Result(ok=True, exit_code=0), Result(ok=False, exit_code=3))
    message_id = engine.publish({"kind": "order"})
    engine.read()                                # the first succeeds, the second fails with no retries
    assert engine.handlers_called() == [("twins", "app.handler"), ("twins", "app.handler")]
    assert len({call.idempotency_key for call in engine.executor.calls}) == 2
    (entry,) = engine.dlq()
    assert entry["reason"] == "attempts exhausted for twins/app.handler#2" and engine.pending() == 0
    assert engine.state(message_id) == {}


def test_exhaustion_routes_to_the_dlq_then_acks(engine):
    engine.executor.program("second.handler", Result(ok=False, exit_code=7, stderr_tail="Traceback\nValueError"))
    message_id = engine.publish({"kind": "order", "event_id": "evt_9"})
    engine.read()                                # second.handler has retries: 0 → exhausted at once
    assert engine.pending() == 0 and engine.state(message_id) == {}
    (entry,) = engine.dlq()
    assert set(entry) == {"original_stream", "original_id", "group", "consumer", "event", "reason", "attempts",
                          "timestamp", "run_id", "run_status", "exit_code", "stderr"}
    last_run = engine.runs()[-1]
    assert (entry["run_id"], entry["run_status"], entry["exit_code"], entry["stderr"]) == (
        last_run.run_id, "failed", "7", "Traceback\nValueError")
    assert (last_run.handler, last_run.settled.value, last_run.reason) == (
        "second.handler", "dead-lettered", entry["reason"])
    assert (entry["original_stream"], entry["original_id"], entry["group"], entry["consumer"]) == (
        STREAM, message_id, GROUP, CONSUMER)
    assert json.loads(entry["event"]) == {"kind": "order", "event_id": "evt_9"}
    assert entry["reason"] == "attempts exhausted for orders/second.handler" and entry["attempts"] == "1"
    assert entry["timestamp"].endswith("Z")
    assert value(engine.metrics.dlq_entries) == 1 and value(engine.metrics.function_dlq_entries, "orders") == 1


def test_every_attempt_and_delivery_of_a_target_has_its_key_and_attempt(engine):
    engine.executor.program("first.handler", Result(ok=False, exit_code=1))
    message_id = engine.publish({"kind": "order"})
    engine.read()
    engine.redeliver(after=MINUTE)               # attempt 2 of first.handler, then second.handler
    calls = [(call.handler, call.attempt, call.idempotency_key) for call in engine.executor.calls]
    key = idempotency_key(STREAM, message_id, engine.catalog.rules().matching({"kind": "order"})[1])
    assert calls[1:] == [("first.handler", 1, key), ("first.handler", 2, key), ("second.handler", 1, calls[-1][2])]
    assert len({key for _handler, _attempt, key in calls}) == 3     # one per target
    assert engine.pending() == 0


def test_another_worker_retrying_the_entry_gives_it_the_same_key(engine):
    engine.executor.program("first.handler", Result(ok=False, exit_code=1))
    message_id = engine.publish({"kind": "order"})
    engine.read()                                # worker-1: attempt 1 fails (then worker-1 is gone)
    other = Engine(engine.client, [ORDERS, AUDIT], address=StreamAddress(STREAM, GROUP, "worker-2"))
    other.redeliver(after=MINUTE)                # worker-2 claims the entry and runs attempt 2
    [first] = [call for call in engine.executor.calls if call.handler == "first.handler"]
    [retry, _second] = [call for call in other.executor.calls if call.function == "orders"]
    assert (retry.handler, retry.message_id, retry.attempt) == ("first.handler", message_id, 2)
    assert retry.idempotency_key == first.idempotency_key and other.pending() == 0


def test_a_redriven_entry_is_a_new_message_with_new_keys(engine):
    engine.executor.program("second.handler", Result(ok=False, exit_code=7))
    first = engine.publish({"kind": "order"})
    engine.read()                                # second.handler has retries: 0 → dead-lettered
    [(dlq_id, _fields)] = engine.client.xrange(dlq_stream(STREAM))
    [(_dlq_id, redriven)] = DeadLetters(engine.client, STREAM).redrive([dlq_id.decode()])
    engine.read()
    before, after = engine.executor.calls[:3], engine.executor.calls[3:]
    assert [call.message_id for call in after] == [redriven] * 3 and redriven != first
    assert [call.attempt for call in after] == [1, 1, 1]
    assert not {call.idempotency_key for call in before} & {call.idempotency_key for call in after}
    assert engine.pending() == 0


def test_a_schedule_occurrence_s_key_is_its_occurrence_id(redis_client):
    nightly = function("nightly", """
runtime: python3.14
schedules:
  - handler: jobs.run
    cron: "0 3 * * *"
""")
    engine = Engine(redis_client, [nightly])
    occurrence = Occurrence("nightly", "jobs.run", datetime(2026, 12, 6, 3, tzinfo=UTC))
    publishers = [Publisher(engine.client, STREAM, engine.metrics) for _worker in range(2)]
    assert [publisher.publish(occurrence) for publisher in publishers] == [True, False]   # one entry
    engine.read()
    [call] = engine.executor.calls
    assert (call.handler, call.attempt) == ("jobs.run", 1)
    assert call.idempotency_key == occurrence.id == "schedule:nightly:jobs.run:2026-12-06T03:00:00Z"


def test_exhaustion_waits_while_another_invocation_is_runnable(engine):
    engine.executor.program("first.handler", *[Result(ok=False, exit_code=1)] * 3)
    message_id = engine.publish({"kind": "order"})
    engine.read()
    engine.redeliver(after=MINUTE)
    engine.redeliver(after=2 * MINUTE)           # attempt 3 of 3 fails: exhausted, but second.handler never ran
    assert engine.state(message_id)["orders/first.handler"] == "exhausted:3"
    assert engine.pending() == 1 and engine.dlq() == []
    engine.redeliver(after=SECOND)               # second.handler runs and succeeds; nothing runnable is left
    assert engine.handlers_called()[-1] == ("orders", "second.handler")
    assert engine.pending() == 0
    (entry,) = engine.dlq()
    assert entry["attempts"] == "3" and entry["reason"] == "attempts exhausted for orders/first.handler"


@pytest.mark.parametrize(("payload", "reason"), [
    (None, "the entry has no 'event' field"),
    (b"\xff\xfe", "the 'event' field is not UTF-8 text"),
    ("{not json", "the 'event' field is not valid JSON"),
    ("[1, 2]", "the event is a JSON list, not an object"),
    ('"text"', "the event is a JSON str, not an object"),
])
def test_malformed_entries_go_straight_to_the_dlq(engine, payload, reason):
    if payload is None:
        message_id = engine.client.xadd(STREAM, {"other": "x"}).decode()
    else:
        message_id = engine.publish(payload)
    engine.read()
    assert engine.executor.calls == [] and engine.pending() == 0
    (entry,) = engine.dlq()
    assert entry["original_id"] == message_id and entry["reason"].startswith(reason) and entry["attempts"] == "0"
    kept = b"" if payload is None else payload if isinstance(payload, bytes) else payload.encode()
    assert entry["event"].encode("utf-8", "surrogateescape") == kept and "truncated" not in entry


def test_dlq_write_failure_leaves_the_entry_pending(engine):
    engine.client.set(dlq_stream(STREAM), "not a stream")      # XADD to it fails with WRONGTYPE
    engine.publish("{broken")
    engine.executor.program("second.handler", Result(ok=False, exit_code=1))
    engine.publish({"kind": "order"})
    engine.read()
    assert engine.pending() == 2
    engine.client.delete(dlq_stream(STREAM))
    engine.redeliver(after=SECOND)
    assert engine.pending() == 0 and len(engine.dlq()) == 2


def test_the_dead_letter_entry_and_the_acknowledgment_are_one_script(engine):
    """Redis replicates and persists a script's writes together: a failover or a crash can never keep
    the dead-letter entry and lose the XACK (which would dead-letter the entry twice)."""
    with engine.client.monitor() as monitor:
        message_id = engine.publish("{broken")
        engine.read()
        commands = []
        while not commands or commands[-1]["command"].split()[0] != "XACK":
            commands.append(monitor.next_command())
    dead_letter = [command for command in commands if command["command"].split()[0] in ("XADD", "XACK")][-2:]
    assert [command["command"].split()[:2] for command in dead_letter] == [
        ["XADD", dlq_stream(STREAM)], ["XACK", STREAM]]
    assert all(command["client_type"] == "lua" for command in dead_letter), dead_letter
    assert engine.pending() == 0 and [entry["original_id"] for entry in engine.dlq()] == [message_id]


def test_a_vanished_function_stops_gating(engine):
    engine.executor.program("first.handler", Result(ok=False, exit_code=1))
    message_id = engine.publish({"kind": "order"})
    engine.read()
    engine.catalog.remove("orders")
    engine.redeliver(after=MINUTE)
    assert engine.pending() == 0 and engine.state(message_id) == {}


def test_a_running_marker_from_another_worker_is_respected(engine):
    message_id = engine.publish({"kind": "refund"})
    key = markers.state_key(STREAM, GROUP, message_id)
    engine.client.hset(key, "audit/audit.handler", markers.running(T0 + 10 * SECOND, 1))
    engine.read()
    assert engine.executor.calls == [] and engine.pending() == 1
    engine.redeliver(after=11 * SECOND)          # that worker died: its deadline passed, attempt 2 runs
    assert engine.handlers_called() == [("audit", "audit.handler")]
    assert engine.pending() == 0


def test_no_free_slot_leaves_the_entry_pending_without_charging(engine):
    held = engine.slots.function_limit("audit", AUDIT.function.template.concurrency)
    for _ in range(AUDIT.function.template.concurrency):
        held.acquire()
    message_id = engine.publish({"kind": "refund"})
    engine.read()
    assert engine.executor.calls == [] and engine.pending() == 1 and engine.state(message_id) == {}
    assert value(engine.metrics.concurrency_waits) == 1
    for _ in range(AUDIT.function.template.concurrency):
        held.release()
    engine.redeliver(after=SECOND)
    assert engine.pending() == 0


def test_an_unreachable_engine_costs_no_attempt(engine):
    """A Docker engine restart must not push events toward the DLQ: the claim
    is undone and the entry waits for the reclaimer with its count intact."""
    unreachable = Result(ok=False, exit_code=None, error="the Docker engine is unreachable", engine_unavailable=True)
    engine.executor.program("second.handler", unreachable, unreachable)    # retries: 0
    message_id = engine.publish({"kind": "order"})
    engine.read()
    assert engine.pending() == 1 and engine.dlq() == []
    assert engine.state(message_id) == {"audit/audit.handler": "ok", "orders/first.handler": "ok"}
    engine.redeliver(after=SECOND)               # engine still down: nothing charged again
    assert engine.pending() == 1 and "orders/second.handler" not in engine.state(message_id)
    engine.redeliver(after=SECOND)               # engine back: the one allowed attempt runs and succeeds
    assert engine.pending() == 0 and engine.dlq() == []
    assert engine.handlers_called().count(("orders", "second.handler")) == 3
    assert value(engine.metrics.handler_failure) == 0


def test_an_unreachable_engine_keeps_a_retry_backoff_in_place(engine):
    engine.executor.program("first.handler", Result(ok=False, exit_code=1),
                            Result(ok=False, exit_code=None, engine_unavailable=True))
    message_id = engine.publish({"kind": "order"})
    engine.read()
    waiting = engine.state(message_id)["orders/first.handler"]
    engine.redeliver(after=MINUTE)               # attempt 2 cannot reach the engine
    assert engine.state(message_id)["orders/first.handler"] == waiting and engine.pending() == 1


def test_an_entry_waits_for_a_matching_function_whose_first_build_failed(redis_client):
    """Acknowledging it without that function would lose its work for good."""
    engine = Engine(redis_client, [AUDIT])
    engine.catalog.mark_waiting(ORDERS.function)
    waiting = engine.publish({"kind": "order"})
    engine.publish({"kind": "refund"})          # matches only the built function
    engine.read()
    assert engine.handlers_called() == [("audit", "audit.handler")] and engine.pending() == 1
    engine.catalog.put(ORDERS)                  # built on a later pass
    engine.redeliver(after=SECOND)
    assert engine.pending() == 0 and engine.state(waiting) == {}
    assert engine.handlers_called()[1:] == [("audit", "audit.handler"), ("orders", "first.handler"),
                                            ("orders", "second.handler")]


def test_missing_secret_fails_the_invocation(redis_client):
    from relay.errors import SecretError

    def environment(fn):
        raise SecretError("secret 'api-key' is not in the secret store")

    engine = Engine(redis_client, [AUDIT], env=environment)
    message_id = engine.publish({"kind": "refund"})
    engine.read()
    assert engine.executor.calls == []
    assert engine.state(message_id)["audit/audit.handler"].startswith("next_attempt_at:")
    assert value(engine.metrics.handler_failure) == 1


def test_buffer_full_stops_reading(redis_client):
    engine = Engine(redis_client, [AUDIT], buffered=2)
    for _ in range(5):
        engine.publish({"kind": "none"})
    engine.consumer.buffer.take(2)                # two entries are being worked on
    assert not engine.consumer.buffer.wait_for_space(timeout=0.01)
    engine.consumer.reclaim_interval = 0.2        # a pass waits half of it for space
    engine.consumer.reclaim_once()
    assert engine.pending() == 0                  # nothing was read or claimed
    engine.consumer.buffer.release(2)
    engine.read()
    assert redis_client.xinfo_groups(STREAM)[0]["entries-read"] == 2   # only the free slots were read


def test_the_reclaimer_skips_an_entry_this_worker_is_still_dispatching(engine):
    from gevent.event import Event

    release, run = Event(), engine.executor.run
    engine.executor.run = lambda invocation: (release.wait(10), run(invocation))[1]
    message_id = engine.publish({"kind": "refund"})
    response = engine.client.xreadgroup(GROUP, CONSUMER, {STREAM: ">"}, count=1)
    engine.consumer.accept(response[0][1])        # the handler is running, the entry idle in Redis
    engine.consumer.reclaim_once()                # min_idle 0: XAUTOCLAIM hands it back to this worker
    assert engine.consumer.buffer.used == 1
    release.set()
    engine.consumer.drain(10)
    assert [call.handler for call in engine.executor.calls] == ["audit.handler"]
    assert value(engine.metrics.function_events, "audit") == 1
    assert engine.pending() == 0 and engine.consumer.buffer.used == 0
    assert message_id not in engine.consumer.in_flight


def test_backlog_gauges_from_xpending(engine):
    from relay.stream.backlog import Backlog

    backlog = Backlog(engine.client, ADDRESS, engine.metrics, clock=lambda: 1_800_000_100.0)
    assert backlog.sample() == (0, 0.0)
    engine.client.xadd(STREAM, {"event": "{}"}, id="1800000000000-0")
    engine.client.xadd(STREAM, {"event": "{}"}, id="1800000050000-0")
    engine.client.xreadgroup(GROUP, CONSUMER, {STREAM: ">"})
    assert backlog.sample() == (2, 100.0)
    assert value(engine.metrics.pending_entries) == 2 and value(engine.metrics.pending_oldest_age) == 100.0


def test_images_are_leased_for_the_whole_dispatch(redis_client):
    from relay.runtime.pins import ImagePins

    engine = Engine(redis_client, [ORDERS, AUDIT])
    engine.dispatcher.pins = pins = ImagePins()
    seen = []
    run = engine.executor.run
    engine.executor.run = lambda invocation: (seen.append(sorted(pins.pinned())), run(invocation))[1]
    engine.publish({"kind": "order"})
    engine.read()
    assert seen == [sorted({AUDIT.image, ORDERS.image})] * 3
    assert not pins.pinned()


def test_an_extra_observer_sees_the_domain_events(redis_client):
    from relay.stream.verdict import Cause

    class Recorder:
        def __init__(self):
            self.events = []

        def __getattr__(self, name):
            return lambda *args: self.events.append((name, *args))

    recorder = Recorder()
    engine = Engine(redis_client, [AUDIT], observers=[recorder])
    engine.executor.program("audit.handler", Result(ok=False, exit_code=1))
    engine.publish({"kind": "refund"})
    engine.publish({"kind": "other"})
    engine.read()
    names = [event[0] for event in recorder.events]
    assert names == ["matched", "received", "settled", "invocation_started", "invocation_finished", "settled"]
    assert recorder.events[0] == ("matched", "audit") and recorder.events[1] == ("received", 2)
    assert recorder.events[2][1].cause is Cause.UNMATCHED and recorder.events[2][2] == 1
    attempt, outcome = recorder.events[4][1:]
    assert (attempt.function, attempt.handler, attempt.number) == ("audit", "audit.handler", 1) and not outcome.ok
    assert recorder.events[5][1].cause is Cause.OPEN
    assert value(engine.metrics.handler_failure) == 1 and value(engine.metrics.events_processed) == 1


# --- stale work: max_event_age and on_expired --------------------------------------------

HOUR = 60 * MINUTE
WELCOME = function("welcome", """
runtime: python3.14
events:
  - handler: app.send
    pattern: {kind: [user]}
    max_event_age: 1h
""")
DIGEST = function("digest", """
runtime: python3.14
max_event_age: 1h
on_expired: drop
events:
  - handler: app.add
    pattern: {kind: [user]}
""")
LEDGER = function("ledger", """
runtime: python3.14
events:
  - handler: app.book
    pattern: {kind: [user]}
    retries: 1
""")


def publish_aged(engine, age, event=None, **fields):
    """XADD an entry whose id says it was added *age* nanoseconds before the engine's clock."""
    milliseconds = (engine.clock.now - age) // 1_000_000
    return engine.client.xadd(STREAM, {"event": json.dumps(event or {"kind": "user"}), **fields},
                              id=f"{milliseconds}-*").decode()


def test_an_entry_older_than_max_event_age_is_dead_lettered_without_running(redis_client):
    engine = Engine(redis_client, [WELCOME])
    message_id = publish_aged(engine, 3 * HOUR + 12 * MINUTE)
    engine.read()
    assert engine.executor.calls == [] and engine.pending() == 0 and engine.state(message_id) == {}
    (entry,) = engine.dlq()
    assert (entry["original_id"], entry["reason"], entry["attempts"]) == (
        message_id, "older than max_event_age (1h): 3h12m", "0")
    assert value(engine.metrics.events_expired, "welcome") == 1 and value(engine.metrics.dlq_entries) == 1
    assert value(engine.metrics.function_dlq_entries, "welcome") == 1
    assert value(engine.metrics.events_processed) == 0


def test_an_entry_younger_than_max_event_age_runs(redis_client):
    engine = Engine(redis_client, [WELCOME])
    publish_aged(engine, 59 * MINUTE)
    engine.read()
    assert engine.handlers_called() == [("welcome", "app.send")] and engine.pending() == 0
    assert engine.dlq() == [] and value(engine.metrics.events_expired, "welcome") == 0


def test_on_expired_drop_acknowledges_the_entry_and_counts_it(redis_client):
    engine = Engine(redis_client, [DIGEST])
    message_id = publish_aged(engine, 2 * HOUR)
    engine.read()
    assert engine.executor.calls == [] and engine.pending() == 0 and engine.state(message_id) == {}
    assert engine.dlq() == []
    assert value(engine.metrics.events_expired, "digest") == 1 and value(engine.metrics.events_processed) == 0


def test_the_other_targets_still_run_and_the_entry_settles_when_all_are_finished(redis_client):
    """digest (drop) and welcome (dead-letter) expire; ledger, with no max_event_age, still runs,
    and fails once: nothing is dead-lettered or counted until its retry has succeeded."""
    engine = Engine(redis_client, [WELCOME, DIGEST, LEDGER])
    engine.executor.program("app.book", Result(ok=False, exit_code=1))
    message_id = publish_aged(engine, 2 * HOUR)
    engine.read()
    assert engine.handlers_called() == [("ledger", "app.book")]
    assert engine.pending() == 1 and engine.dlq() == []
    assert value(engine.metrics.events_expired, "digest") == value(engine.metrics.events_expired, "welcome") == 0
    engine.redeliver(after=MINUTE)
    assert engine.handlers_called() == [("ledger", "app.book")] * 2
    assert engine.pending() == 0 and engine.state(message_id) == {}
    (entry,) = engine.dlq()
    assert (entry["reason"], entry["attempts"]) == ("older than max_event_age (1h): 2h1m", "0")
    assert value(engine.metrics.events_expired, "digest") == value(engine.metrics.events_expired, "welcome") == 1
    assert value(engine.metrics.function_dlq_entries, "ledger") == 1


def test_dropped_and_completed_targets_acknowledge_the_entry(redis_client):
    engine = Engine(redis_client, [DIGEST, LEDGER])
    publish_aged(engine, 2 * HOUR)
    engine.read()
    assert engine.handlers_called() == [("ledger", "app.book")]
    assert engine.pending() == 0 and engine.dlq() == []
    assert value(engine.metrics.events_expired, "digest") == 1 and value(engine.metrics.events_processed) == 0


def test_a_retry_due_after_max_event_age_expires_with_the_attempts_made(redis_client):
    engine = Engine(redis_client, [WELCOME])
    engine.executor.program("app.send", Result(ok=False, exit_code=1))
    publish_aged(engine, 59 * MINUTE + 30 * SECOND)
    engine.read()                                 # attempt 1 fails; attempt 2 is due in 1m
    engine.redeliver(after=MINUTE)                # by then the entry is 1h0m30s old
    assert len(engine.executor.calls) == 1 and engine.pending() == 0
    (entry,) = engine.dlq()
    assert (entry["reason"], entry["attempts"]) == ("older than max_event_age (1h): 1h30s", "1")


def test_a_redriven_entry_is_judged_by_when_it_was_redriven(redis_client):
    engine = Engine(redis_client, [WELCOME])
    publish_aged(engine, 5 * MINUTE, redriven_from=f"{(engine.clock.now - 5 * HOUR) // 1_000_000}-0")
    engine.read()
    assert engine.handlers_called() == [("welcome", "app.send")] and engine.dlq() == []


# --- retry_backoff and retry_jitter -------------------------------------------------------

BACKOFF = function("backoff", """
runtime: python3.14
events:
  - handler: app.flaky
    pattern: {kind: [flaky]}
    retries: 3
    retry_backoff: [10s, 30s]
  - handler: app.jittery
    pattern: {kind: [jittery]}
    retry_backoff: [10s]
    retry_jitter: true
""")


def test_a_rules_retry_backoff_sets_each_delay_and_the_last_repeats(redis_client):
    engine = Engine(redis_client, [BACKOFF])
    engine.executor.program("app.flaky", *[Result(ok=False, exit_code=1)] * 4)
    message_id = engine.publish({"kind": "flaky"})
    engine.read()
    assert engine.state(message_id)["backoff/app.flaky"] == f"next_attempt_at:{T0 + 10 * SECOND}#1"
    engine.redeliver(after=9 * SECOND)            # not due yet
    assert len(engine.executor.calls) == 1
    engine.redeliver(after=SECOND)
    assert engine.state(message_id)["backoff/app.flaky"] == f"next_attempt_at:{engine.clock.now + 30 * SECOND}#2"
    engine.redeliver(after=30 * SECOND)
    assert engine.state(message_id)["backoff/app.flaky"] == f"next_attempt_at:{engine.clock.now + 30 * SECOND}#3"
    engine.redeliver(after=30 * SECOND)           # attempt 4 of 4
    assert len(engine.executor.calls) == 4 and engine.dlq()[0]["attempts"] == "4"


def test_retry_jitter_spreads_the_delay(redis_client):
    engine = Engine(redis_client, [BACKOFF])
    deadlines = []
    for _ in range(5):
        engine.executor.program("app.jittery", Result(ok=False, exit_code=1))
        message_id = engine.publish({"kind": "jittery"})
        engine.read()
        deadlines.append(markers.parse(engine.state(message_id)["backoff/app.jittery"]).deadline - T0)
    assert all(8 * SECOND <= deadline <= 12 * SECOND for deadline in deadlines)
    assert len(set(deadlines)) > 1


# --- a retry due before the reclaimer would come: the worker holds the entry ---------------

QUICK = function("quick", """
runtime: python3.14
events:
  - handler: app.retry
    pattern: {kind: [quick]}
    retries: 2
    retry_backoff: [300ms]
""")


class WallClock:
    """The real time, for the consumer's real waits; ``now`` only for publish_aged (unused here)."""

    def __call__(self):
        return time.time_ns()


def held_engine(redis_client, reclaim_interval=60.0):
    engine = Engine(redis_client, [QUICK], clock=WallClock(), reclaim_interval=reclaim_interval)
    engine.started = []
    run = engine.executor.run
    engine.executor.run = lambda invocation: (engine.started.append(time.time_ns()), run(invocation))[1]
    return engine


def accept_one(engine):
    response = engine.client.xreadgroup(GROUP, CONSUMER, {STREAM: ">"}, count=1)
    engine.consumer.accept(response[0][1])


def wait_for_marker(engine, message_id, prefix):
    deadline = time.monotonic() + 10
    while not engine.state(message_id).get("quick/app.retry", "").startswith(prefix):
        assert time.monotonic() < deadline, engine.state(message_id)
        gevent.sleep(0.01)


def test_a_retry_due_sooner_than_the_reclaimer_is_run_by_this_worker_when_due(redis_client):
    engine = held_engine(redis_client)
    engine.executor.program("app.retry", Result(ok=False, exit_code=1))
    message_id = engine.publish({"kind": "quick"})
    accept_one(engine)
    wait_for_marker(engine, message_id, "next_attempt_at:")
    due = markers.parse(engine.state(message_id)["quick/app.retry"]).deadline
    assert engine.consumer.buffer.used == 1 and message_id in engine.consumer.in_flight   # held, still buffered
    assert engine.consumer.drain(10)
    assert len(engine.started) == 2 and engine.started[1] >= due                          # not before it is due
    assert engine.started[1] - due < 30 * SECOND                                          # nor at a reclaim pass
    assert engine.pending() == 0 and engine.state(message_id) == {}
    assert engine.consumer.buffer.used == 0 and not engine.consumer.in_flight
    assert value(engine.metrics.retries) == 1


@pytest.mark.parametrize("reclaim_interval", [0.2, 0.3])
def test_a_delay_as_long_as_the_reclaim_interval_is_left_to_the_reclaimer(redis_client, reclaim_interval):
    """As Relay's default first backoff (1m) with its reclaim interval (1m): as before, not held."""
    engine = held_engine(redis_client, reclaim_interval=reclaim_interval)
    engine.executor.program("app.retry", Result(ok=False, exit_code=1))
    message_id = engine.publish({"kind": "quick"})
    accept_one(engine)
    assert engine.consumer.drain(10)
    assert len(engine.started) == 1 and engine.pending() == 1
    assert engine.state(message_id)["quick/app.retry"].startswith("next_attempt_at:")
    assert engine.consumer.buffer.used == 0


def test_a_held_entry_stops_waiting_at_once_when_relay_stops(redis_client):
    engine = Engine(redis_client, [function("slow", """
runtime: python3.14
events:
  - handler: app.retry
    pattern: {kind: [quick]}
    retry_backoff: [50s]
""")], clock=WallClock(), reclaim_interval=60.0)
    engine.executor.program("app.retry", Result(ok=False, exit_code=1))
    message_id = engine.publish({"kind": "quick"})
    accept_one(engine)
    deadline = time.monotonic() + 10
    while not engine.state(message_id).get("slow/app.retry", "").startswith("next_attempt_at:"):
        assert time.monotonic() < deadline
        gevent.sleep(0.01)
    gevent.sleep(0.05)
    assert engine.consumer.buffer.used == 1              # held for a retry 50 s away
    engine.consumer.stop()
    assert engine.consumer.drain(2)                      # the drain is not held up by it
    assert engine.pending() == 1 and engine.consumer.buffer.used == 0 and not engine.consumer.in_flight
    assert len(engine.executor.calls) == 1


def test_the_reclaimer_hands_back_a_held_entry_and_it_is_skipped(redis_client):
    engine = held_engine(redis_client)
    engine.executor.program("app.retry", Result(ok=False, exit_code=1))
    message_id = engine.publish({"kind": "quick"})
    accept_one(engine)
    wait_for_marker(engine, message_id, "next_attempt_at:")
    engine.consumer.reclaim_once()                       # min_idle 0: XAUTOCLAIM returns it to this worker
    assert engine.consumer.buffer.used == 1
    assert engine.consumer.drain(10)
    assert len(engine.started) == 2 and engine.pending() == 0


def test_a_held_entry_acknowledged_elsewhere_meanwhile_is_not_run_again(redis_client):
    """Another worker took it over and finished it while it was held: its state is gone, so running
    it from scratch would repeat the work. Claiming it again at the due time finds it settled."""
    engine = held_engine(redis_client)
    engine.executor.program("app.retry", Result(ok=False, exit_code=1))
    message_id = engine.publish({"kind": "quick"})
    accept_one(engine)
    wait_for_marker(engine, message_id, "next_attempt_at:")
    engine.client.xack(STREAM, GROUP, message_id)
    engine.client.delete(markers.state_key(STREAM, GROUP, message_id))
    assert engine.consumer.drain(10)
    assert len(engine.started) == 1 and engine.pending() == 0
    assert engine.consumer.buffer.used == 0


def test_an_entry_whose_retry_another_worker_is_waiting_for_goes_back_to_the_reclaimer(redis_client):
    """Only the worker whose attempt failed holds the entry: one handed over with its retry not yet
    due is left pending, as before, rather than filling the buffer with waits."""
    engine = held_engine(redis_client)
    message_id = engine.publish({"kind": "quick"})
    engine.client.hset(markers.state_key(STREAM, GROUP, message_id), "quick/app.retry",
                       markers.waiting(time.time_ns() + 5 * SECOND, 1))
    accept_one(engine)
    assert engine.consumer.drain(2)
    assert engine.started == [] and engine.pending() == 1 and engine.consumer.buffer.used == 0
