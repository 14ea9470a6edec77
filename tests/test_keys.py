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
    assert keys.DLQ_SCHEDULE == "schedule" and keys.SCHEDULE_UNRECORDED == "1"
    assert keys.schedule_key("schedule:f:h:t") == keys.SCHEDULE_KEY_PREFIX + "schedule:f:h:t"


def test_a_stream_address_is_one_immutable_value():
    address = StreamAddress("events", "relay", "worker-1")
    assert address == StreamAddress("events", "relay", "worker-1") and len({address, address}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        address.stream = "other"


def _targets(template_text, name="orders"):
    from relay.functions import ActiveFunction, parse_template
    from relay.functions.function import Function
    from relay.functions.rules import Target

    template = parse_template(template_text, f"{name}/template.yaml")
    active = ActiveFunction(Function(name=name, directory=None, template=template, fingerprint="0" * 64), image="")
    return [Target(active, rule) for rule in template.rules]


TWO_RULES = """
runtime: python3.14
events:
  - handler: app.handler
    pattern: {kind: [order]}
  - handler: app.other
    pattern: {kind: [order]}
  - handler: app.handler
    pattern: {kind: [refund]}
"""


def test_an_idempotency_key_is_a_digest_of_the_stream_the_entry_and_the_target():
    first, other, again = _targets(TWO_RULES)
    key = keys.idempotency_key("events", "1-0", first)
    assert len(key) == 32 and int(key, 16) >= 0
    assert key == keys.idempotency_key("events", "1-0", _targets(TWO_RULES)[0])   # any worker, any delivery
    assert key == __import__("hashlib").sha256(b"events\0" b"1-0\0" b"orders/app.handler").hexdigest()[:32]
    others = {keys.idempotency_key("events", "1-1", first), keys.idempotency_key("other", "1-0", first),
              keys.idempotency_key("events", "1-0", other), keys.idempotency_key("events", "1-0", again),
              keys.idempotency_key("events", "1-0", _targets(TWO_RULES, name="refunds")[0])}
    assert len(others) == 5 and key not in others


def test_the_second_rule_with_the_same_handler_has_a_field_and_a_key_of_its_own():
    first, _other, again = _targets(TWO_RULES)
    assert (keys.target_field(first), keys.target_field(again)) == ("orders/app.handler", "orders/app.handler#2")
    assert keys.idempotency_key("events", "1-0", again) == __import__("hashlib").sha256(
        b"events\0" b"1-0\0" b"orders/app.handler#2").hexdigest()[:32]
