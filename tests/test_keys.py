"""Redis key and field names: operators, docs and other tools read them, so they never drift."""

import dataclasses

import pytest

from relay.stream import keys, markers, schedules
from relay.stream.keys import StreamAddress
from relay.stream.settle import dlq_stream


def test_key_names():
    assert keys.invocation_key("my:stream", "g/1 x", "2-5") == "relay:invocation:my%3Astream:g%2F1%20x:2-5"
    assert keys.invocation_field("orders", "app.handler") == "orders/app.handler"
    assert keys.dlq_stream("events") == "relay:events:dlq"
    assert keys.schedule_key("schedule:f:h:2026-01-01T00:00:00Z") == "relay:schedule:f:h:2026-01-01T00:00:00Z"


def test_the_old_names_are_the_same_functions():
    assert markers.state_key is keys.invocation_key
    assert dlq_stream is keys.dlq_stream


def test_entry_fields():
    assert (keys.EVENT, keys.SCHEDULE, keys.EVENT_FIELD, keys.SCHEDULE_FIELD) == (
        "event", "schedule", b"event", b"schedule")
    assert "'XADD', KEYS[2], '*', 'event', ARGV[3], 'schedule', ARGV[2]" in schedules._PUBLISH_IF_NEW


def test_a_stream_address_is_one_immutable_value():
    address = StreamAddress("events", "relay", "worker-1")
    assert address == StreamAddress("events", "relay", "worker-1") and len({address, address}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        address.stream = "other"
