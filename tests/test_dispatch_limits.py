"""The dispatcher with a function's fleet-wide limits (rate_limit, concurrency_key).

The limits here are a scripted fake (the Lua scripts and leases are tested
against Redis in test_limits.py): it refuses as told, records what it was
asked, and checks the slots it is asked under. The store, the Settler and
the consumer are the real ones on a real redis-server (tests/support/engine.py).
"""

import logging

import gevent
import pytest

from relay.durations import SECOND
from relay.stream import markers
from relay.stream.keys import invocation_key
from relay.stream.limits import Blocked, Limit, Passage
from tests.support.engine import AUDIT, GROUP, STREAM, Engine, Result, function, value

RATED = function("rated", """
runtime: python3.14
concurrency: 1
rate_limit: 20/s
concurrency_key: new_image.id
events:
  - handler: rated.handler
    pattern: {kind: [rated]}
    timeout: 9s
""")


class ScriptedLimits:
    """Refuses with the Blocked answers it is given, in order, then lets every invocation pass."""

    def __init__(self, *refusals, refuse_forever=None):
        self.refusals = list(refusals)
        self.refuse_forever = refuse_forever
        self.entered = []
        self.left = []
        self.on_enter = lambda: None

    def enter(self, function, template, event, timeout):
        self.entered.append((function, event, timeout))
        self.on_enter()
        if self.refuse_forever is not None:
            return self.refuse_forever
        if self.refusals:
            return self.refusals.pop(0)
        passage = Passage()
        self.passed = passage
        return passage

    def leave(self, passage):
        self.left.append(passage)


@pytest.fixture
def limits():
    return ScriptedLimits()


def rated_event(key="user_1"):
    return {"kind": "rated", "new_image": {"id": key}}


def test_a_function_without_limits_never_asks_for_them(redis_client, limits):
    engine = Engine(redis_client, [AUDIT, RATED], limits=limits)
    engine.publish({"kind": "refund"})
    engine.read()
    assert engine.handlers_called() == [("audit", "audit.handler")] and engine.pending() == 0
    assert limits.entered == []


def test_a_refused_invocation_waits_then_runs_on_its_first_attempt(redis_client):
    limits = ScriptedLimits(Blocked(Limit.RATE, 0.01), Blocked(Limit.RATE, 0.01), Blocked(Limit.KEY, 0.01))
    engine = Engine(redis_client, [RATED], limits=limits, slot_wait=5)
    engine.publish(rated_event())
    engine.read()
    assert engine.handlers_called() == [("rated", "rated.handler")] and engine.pending() == 0
    assert [call[1:] for call in limits.entered] == [(rated_event(), 9 * SECOND)] * 4
    assert limits.left == [limits.passed]
    assert value(engine.metrics.handler_success) == 1 and value(engine.metrics.retries) == 0
    assert value(engine.metrics.rate_limit_waits, "rated") == 1
    assert value(engine.metrics.concurrency_key_waits, "rated") == 1
    assert value(engine.metrics.rate_limit_wait_seconds, "rated") >= 0.02
    assert value(engine.metrics.concurrency_key_wait_seconds, "rated") >= 0.01


def test_the_limits_are_asked_holding_the_slots_and_the_slots_are_free_while_refused(redis_client):
    """A check spawned when the limit refuses runs while the dispatcher waits: the worker's
    and the function's slots are free then, and were held while the limit was asked."""
    limits = ScriptedLimits(Blocked(Limit.RATE, 0.05))
    engine = Engine(redis_client, [AUDIT, RATED], max_concurrency=1, limits=limits, slot_wait=5)
    held_when_asked, free_while_waiting = [], []

    def free():
        return engine.slots._global.counter, engine.slots.function_limit("rated", 1).counter

    def on_enter():
        held_when_asked.append(free())
        if len(held_when_asked) == 1:
            gevent.spawn(lambda: free_while_waiting.append(free()))

    limits.on_enter = on_enter
    engine.publish(rated_event())
    engine.publish({"kind": "refund"})
    engine.read()
    assert held_when_asked == [(0, 0), (0, 0)] and free_while_waiting == [(1, 1)]
    assert sorted(engine.handlers_called()) == [("audit", "audit.handler"), ("rated", "rated.handler")]
    assert engine.pending() == 0


def test_a_limit_that_stays_refused_leaves_the_entry_pending_uncharged(redis_client, caplog):
    limits = ScriptedLimits(refuse_forever=Blocked(Limit.KEY, 0.01))
    engine = Engine(redis_client, [RATED], limits=limits, slot_wait=0.1)
    message_id = engine.publish(rated_event())
    with caplog.at_level(logging.INFO, logger="relay.stream.dispatcher"):
        engine.read()
    assert engine.executor.calls == [] and engine.pending() == 1 and engine.state(message_id) == {}
    assert len(limits.entered) >= 2 and limits.left == []
    assert [record.getMessage() for record in caplog.records] == [
        "Concurrency key held by another invocation; entry left pending"]
    assert value(engine.metrics.concurrency_key_waits, "rated") == 1
    assert value(engine.metrics.rate_limit_waits, "rated") == 0

    limits.refuse_forever = None
    engine.redeliver(after=SECOND)
    assert engine.handlers_called() == [("rated", "rated.handler")] and engine.pending() == 0
    assert engine.dlq() == [] and value(engine.metrics.retries) == 0


def test_a_wait_past_the_slot_wait_gives_up_at_once(redis_client, caplog):
    limits = ScriptedLimits(refuse_forever=Blocked(Limit.RATE, 60.0))
    engine = Engine(redis_client, [RATED], limits=limits, slot_wait=5)
    with caplog.at_level(logging.INFO, logger="relay.stream.dispatcher"):
        engine.publish(rated_event())
        engine.read()
    assert len(limits.entered) == 1 and engine.executor.calls == [] and engine.pending() == 1
    assert "Rate limit reached; entry left pending" in caplog.messages
    assert value(engine.metrics.rate_limit_waits, "rated") == 1
    assert value(engine.metrics.rate_limit_wait_seconds, "rated") == 0


def test_busy_slots_of_a_limited_function_are_reported_as_before(redis_client, limits, caplog):
    engine = Engine(redis_client, [RATED], limits=limits)
    engine.slots.function_limit("rated", 1).acquire()
    with caplog.at_level(logging.INFO, logger="relay.stream.dispatcher"):
        engine.publish(rated_event())
        engine.read()
    assert limits.entered == [] and engine.pending() == 1
    assert "No concurrency slot free; entry left pending" in caplog.messages


@pytest.mark.parametrize("outcome", [Result(ok=False, exit_code=1),
                                     Result(ok=False, exit_code=None, engine_unavailable=True)])
def test_the_passage_is_left_whatever_the_invocation_did(redis_client, limits, outcome):
    engine = Engine(redis_client, [RATED], limits=limits)
    engine.executor.program("rated.handler", outcome)
    engine.publish(rated_event())
    engine.read()
    assert len(engine.executor.calls) == 1 and limits.left == [limits.passed]


def test_the_passage_is_left_when_another_worker_claims_the_attempt_meanwhile(redis_client, limits):
    engine = Engine(redis_client, [RATED], limits=limits)
    message_id = engine.publish(rated_event())
    claim = markers.running(engine.clock.now + 9 * SECOND, 1)
    limits.on_enter = lambda: redis_client.hset(invocation_key(STREAM, GROUP, message_id), "rated/rated.handler",
                                                claim)
    engine.read()
    assert engine.executor.calls == [] and limits.left == [limits.passed] and engine.pending() == 1
