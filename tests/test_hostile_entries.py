"""Hostile stream entries and tampered state against the real consumer and a real redis-server.

No entry, however deep, large, binary or broken, may end the read loop or the
reclaimer: each one is dead-lettered with a reason and acknowledged, and the
entries after it in the batch are handled as usual. The handlers are the
scripted executor of tests/support/engine.py; test_hostile_input_e2e.py runs the same
inputs through ``relay start``. Each test runs with orjson and without it
(tests/support/decoders.py).
"""

import json
import logging

import pytest

from relay.stream import markers
from relay.stream.plans import KEPT_PREFIX_BYTES, MAX_EVENT_DEPTH, TOO_DEEP
from relay.stream.settle import dlq_stream
from tests.support.decoders import DECODERS, use_decoder
from tests.support.engine import AUDIT, GROUP, ORDERS, STREAM, Engine, Result

ORDER = {"kind": "order"}


@pytest.fixture(autouse=True, params=DECODERS)
def decoder(request, monkeypatch):
    """Every hostile entry gets the same verdict and reason whichever JSON decoder Relay has."""
    return use_decoder(request.param, monkeypatch)


@pytest.fixture
def engine(redis_client):
    return Engine(redis_client, [ORDERS, AUDIT])


def nested(depth):
    """An event object whose nesting is *depth* levels, itself included."""
    return '{"kind": "order", "x": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def raw_dlq(engine):
    return [{key.decode(): value for key, value in fields.items()}
            for _id, fields in engine.client.xrange(dlq_stream(STREAM))]


def handled(engine):
    return [json.loads(call.payload) for call in engine.executor.calls]


def test_a_thousand_levels_deep_event_is_dead_lettered_and_the_batch_goes_on(engine):
    poison = "[" * 1000 + "]" * 1000
    poison_id = engine.publish(poison)
    engine.publish(ORDER)
    engine.read()
    (entry,) = engine.dlq()
    assert (entry["original_id"], entry["reason"], entry["event"], entry["attempts"]) == (
        poison_id, TOO_DEEP, poison, "0")
    assert TOO_DEEP == "the event nests deeper than 64 levels"
    assert handled(engine) == [ORDER, ORDER, ORDER] and engine.pending() == 0


def test_the_reclaimer_dead_letters_a_poison_entry_and_goes_on(engine):
    poison_id = engine.publish('{"kind": "order", "x": ' + "{\"a\": " * 5000 + "1" + "}" * 5000 + "}")
    engine.publish(ORDER)
    engine.client.xreadgroup(GROUP, "a-worker-that-died", {STREAM: ">"})
    engine.consumer.reclaim_once()
    engine.consumer.drain(10)
    assert [(entry["original_id"], entry["reason"]) for entry in engine.dlq()] == [(poison_id, TOO_DEEP)]
    assert len(handled(engine)) == 3 and engine.pending() == 0
    assert engine.consumer.buffer.used == 0


@pytest.mark.parametrize(("depth", "dead_lettered"), [(MAX_EVENT_DEPTH, False), (MAX_EVENT_DEPTH + 1, True)])
def test_the_nesting_limit_is_exact(engine, depth, dead_lettered):
    engine.publish(nested(depth))
    engine.read()
    assert [entry["reason"] for entry in engine.dlq()] == ([TOO_DEEP] if dead_lettered else [])
    assert len(engine.executor.calls) == (0 if dead_lettered else 3) and engine.pending() == 0


def test_a_deep_event_that_matches_nothing_is_acknowledged_like_any_other(engine):
    """The limit guards what a handler is given; an unmatched event goes nowhere."""
    engine.publish(nested(MAX_EVENT_DEPTH + 1).replace('"order"', '"other"'))
    engine.read()
    assert engine.dlq() == [] and engine.executor.calls == [] and engine.pending() == 0


def test_a_deep_event_is_not_handed_to_a_function_still_building(redis_client):
    engine = Engine(redis_client, [])
    engine.catalog.mark_waiting(ORDERS.function)        # matches, but has no image yet: no targets
    engine.publish(nested(MAX_EVENT_DEPTH + 1))
    engine.read()
    assert [entry["reason"] for entry in engine.dlq()] == [TOO_DEEP] and engine.pending() == 0


def test_brackets_inside_strings_do_not_count_as_nesting(engine):
    engine.publish({"kind": "order", "note": "[" * 500 + "{" * 500})
    engine.read()
    assert engine.dlq() == [] and len(engine.executor.calls) == 3


def test_any_exception_while_matching_dead_letters_only_that_entry(engine, monkeypatch):
    matching = type(engine.catalog.rules()).matching

    def exploding(rules, event):
        if "boom" in event:
            raise KeyError("boom")
        return matching(rules, event)

    monkeypatch.setattr(type(engine.catalog.rules()), "matching", exploding)
    boom_id = engine.publish({"kind": "order", "boom": 1})
    engine.publish(ORDER)
    engine.read()
    (entry,) = engine.dlq()
    assert (entry["original_id"], entry["reason"]) == (boom_id, "KeyError: 'boom'")
    assert json.loads(entry["event"]) == {"kind": "order", "boom": 1}
    assert handled(engine) == [ORDER, ORDER, ORDER] and engine.pending() == 0


def test_an_event_over_two_mebibytes_is_dead_lettered_unread_with_its_first_four_kibibytes(engine):
    huge = ('{"kind": "order", "blob": "' + "\u00e9" * (1024 * 1024) + '"}').encode()   # é is 2 bytes
    assert len(huge) > 2 * 1024 * 1024
    huge_id = engine.client.xadd(STREAM, {"event": huge}).decode()
    engine.publish(ORDER)
    engine.read()
    (entry,) = raw_dlq(engine)
    assert entry["original_id"] == huge_id.encode()
    assert entry["reason"] == f"event is {len(huge)} bytes, over MAX_EVENT_BYTES (1048576)".encode()
    assert entry["event"] == huge[:KEPT_PREFIX_BYTES] and KEPT_PREFIX_BYTES == 4096
    assert (entry["truncated"], entry["event_bytes"], entry["attempts"]) == (b"true", str(len(huge)).encode(), b"0")
    with pytest.raises(UnicodeDecodeError):
        entry["event"].decode()          # the cut fell inside a character, and nothing minded
    assert handled(engine) == [ORDER, ORDER, ORDER] and engine.pending() == 0


def test_max_event_bytes_is_the_largest_event_read(engine):
    engine.consumer.max_event_bytes = 100
    start = '{"kind": "order", "pad": "'
    fits = start + "x" * (100 - len(start) - 2) + '"}'
    assert len(fits) == 100 and json.loads(fits)
    engine.publish(fits)
    over_id = engine.publish(fits[:-2] + 'x"}')
    engine.read()
    (entry,) = engine.dlq()
    assert (entry["original_id"], entry["reason"]) == (over_id, "event is 101 bytes, over MAX_EVENT_BYTES (100)")
    assert (entry["truncated"], entry["event_bytes"]) == ("true", "101")
    assert len(engine.executor.calls) == 3 and engine.pending() == 0


def test_an_event_that_is_not_utf8_keeps_its_bytes_in_the_dlq(engine):
    binary = b'{"kind": "order", "name": "\xff\xfe"}'
    binary_id = engine.client.xadd(STREAM, {"event": binary}).decode()
    engine.read()
    (entry,) = raw_dlq(engine)
    assert entry["original_id"] == binary_id.encode() and entry["event"] == binary
    assert entry["reason"].startswith(b"the 'event' field is not UTF-8 text: ") and b"0xff" in entry["reason"]
    assert "truncated" not in entry and engine.pending() == 0


# --- tampered invocation state ----------------------------------------------------


@pytest.mark.parametrize("tampered", ["exhausted:\u00b2".encode(), "running:\u00b2#1".encode(), b"\xff\xfe",
                                      b"running:" + b"9" * 5000 + b"#1"])
def test_a_tampered_marker_is_treated_as_absent_and_the_invocation_runs(engine, tampered, caplog):
    message_id = engine.publish(ORDER)
    engine.client.hset(markers.state_key(STREAM, GROUP, message_id), "orders/first.handler", tampered)
    with caplog.at_level(logging.WARNING, logger="relay.stream.invocations"):
        engine.read()
    assert engine.handlers_called() == [("audit", "audit.handler"), ("orders", "first.handler"),
                                        ("orders", "second.handler")]
    assert engine.pending() == 0 and engine.state(message_id) == {}
    (warning,) = [record for record in caplog.records if record.name == "relay.stream.invocations"]
    assert warning.getMessage() == "Invocation state Relay cannot read; treating it as absent"
    assert (warning.message_id, warning.fields) == (message_id, "orders/first.handler")


def test_tampered_state_is_logged_once_per_entry_across_deliveries(engine, caplog):
    """first.handler keeps failing, so second.handler's tampered field is read on every
    delivery without being replaced; it is logged once all the same, and never crashes."""
    engine.executor.program("first.handler", Result(ok=False, exit_code=1), Result(ok=False, exit_code=1))
    message_id = engine.publish(ORDER)
    key = markers.state_key(STREAM, GROUP, message_id)
    engine.client.hset(key, "orders/second.handler", "exhausted:\u00b2".encode())
    with caplog.at_level(logging.WARNING, logger="relay.stream.invocations"):
        engine.read()
        engine.redeliver(after=61 * 10**9)
        engine.redeliver(after=121 * 10**9)      # attempt 3 of first.handler succeeds; second.handler runs
    warnings = [record for record in caplog.records if record.name == "relay.stream.invocations"]
    assert len(warnings) == 1 and warnings[0].message_id == message_id
    assert engine.handlers_called()[-2:] == [("orders", "first.handler"), ("orders", "second.handler")]
    assert engine.pending() == 0
