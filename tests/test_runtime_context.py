"""The handler context: the RELAY_* variables of an invocation, cold and in a warm request."""

import json
from datetime import UTC, datetime

from relay.durations import SECOND
from relay.runtime import context
from relay.runtime.invocation import Invocation
from relay.runtime.warm import request


def invocation(**fields):
    values = {"function": "orders", "handler": "app.handler", "image": "relay-fn-orders:0", "payload": b"{}",
              "timeout": 6 * SECOND, "env": {"GREETING": "hello"}, "message_id": "1700000000000-0",
              "event_id": "evt_1", "attempt": 2, "idempotency_key": "ab" * 16}
    return Invocation(**{**values, **fields})


DEADLINE = datetime(2026, 12, 6, 10, 0, 6, 250999, tzinfo=UTC).timestamp()


def test_a_cold_container_gets_the_function_s_variables_and_the_whole_context():
    assert context.environment(invocation(), DEADLINE) == {
        "GREETING": "hello", "RELAY_FUNCTION": "orders", "RELAY_HANDLER": "app.handler",
        "RELAY_MESSAGE_ID": "1700000000000-0", "RELAY_EVENT_ID": "evt_1", "RELAY_ATTEMPT": "2",
        "RELAY_DEADLINE": "2026-12-06T10:00:06.250Z", "RELAY_IDEMPOTENCY_KEY": "ab" * 16}


def test_a_warm_request_carries_all_but_the_function_and_the_handler():
    variables = context.request_variables(invocation(), DEADLINE)
    assert set(variables) == set(context.NAMES) - {"RELAY_FUNCTION", "RELAY_HANDLER"}
    encoded = (b'{"RELAY_MESSAGE_ID":"1700000000000-0","RELAY_EVENT_ID":"evt_1","RELAY_ATTEMPT":"2",'
               b'"RELAY_DEADLINE":"2026-12-06T10:00:06.250Z","RELAY_IDEMPOTENCY_KEY":"abababababababababababababababab"}')
    assert len(encoded) < 200     # what a warm request adds per invocation
    nonce = b"ab" * 16
    assert request(b"7", nonce, "app.handler", variables, b'{"n":1}') == b"invoke 7 %s app.handler %d 7\n%s%s" % (
        nonce, len(encoded), encoded, b'{"n":1}')


def test_the_deadline_is_rfc_3339_in_utc_cut_to_the_millisecond():
    assert context.rfc3339(0) == "1970-01-01T00:00:00.000Z"
    assert context.rfc3339(DEADLINE) == "2026-12-06T10:00:06.250Z"
    assert datetime.fromisoformat(context.rfc3339(DEADLINE)).timestamp() <= DEADLINE


def test_a_variable_without_a_value_is_unset():
    variables = context.request_variables(invocation(event_id=None, message_id=None, idempotency_key=None),
                                          DEADLINE)
    assert variables == {"RELAY_ATTEMPT": "2", "RELAY_DEADLINE": "2026-12-06T10:00:06.250Z"}


def test_an_event_id_no_environment_variable_can_hold_is_left_out():
    for event_id in ("a\0b", "\ud800", "x" * (context.MAX_VALUE_BYTES + 1), "é" * (context.MAX_VALUE_BYTES // 2 + 1)):
        assert "RELAY_EVENT_ID" not in context.request_variables(invocation(event_id=event_id), DEADLINE)
    for event_id in ("evt 1\nnext", "x" * context.MAX_VALUE_BYTES, json.dumps({"id": 1}), "é"):
        assert context.request_variables(invocation(event_id=event_id), DEADLINE)["RELAY_EVENT_ID"] == event_id
