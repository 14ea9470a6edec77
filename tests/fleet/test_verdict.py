"""The fleet verdict's judgement of malformed entries, on dead letters the real consumer wrote."""

import pytest

from tests.fleet.functions import MALFORMED, MALFORMED_REASONS
from tests.fleet.verdict import judge
from tests.test_dispatch import STREAM, Engine


@pytest.fixture
def burst(redis_client):
    """One fleet burst, read by a real consumer with no functions: every entry is dead-lettered."""
    engine = Engine(redis_client, [], buffered=len(MALFORMED))
    ids = [redis_client.xadd(STREAM, fields).decode() for fields in MALFORMED]
    engine.read()
    return engine, ids


def test_every_malformed_kind_is_expected_in_the_dlq_with_its_reason(burst):
    engine, _ids = burst
    verdict = judge(client=engine.client, produced={}, output_paths=[], hostnames=["worker-1"])
    assert verdict.problems == []
    assert (verdict.malformed, verdict.dlq, verdict.dlq_expected) == (8, 8, 8)
    reasons = [fields[b"reason"].decode() for _id, fields in engine.client.xrange(f"relay:{STREAM}:dlq")]
    assert [reason for _fields, reason in MALFORMED_REASONS][5:] == [
        "the event nests deeper than 64 levels", "event is 2097178 bytes, over MAX_EVENT_BYTES (1048576)",
        "the 'event' field is not UTF-8 text"]
    assert reasons[5:7] == [reason for _fields, reason in MALFORMED_REASONS][5:7]


@pytest.mark.parametrize(("index", "field", "value", "problem"), [
    (5, "reason", "the 'event' field is not valid JSON: too deep", "DLQ reason"),
    (6, "truncated", "false", "DLQ truncated"),
    (6, "event", "x" * 4096, "DLQ event"),
    (7, "event", "", "DLQ event"),
])
def test_a_wrong_dead_letter_fails_the_verdict(burst, index, field, value, problem):
    engine, ids = burst
    dlq = f"relay:{STREAM}:dlq"
    for entry_id, fields in engine.client.xrange(dlq):
        if fields[b"original_id"].decode() == ids[index]:
            engine.client.xdel(dlq, entry_id)
            engine.client.xadd(dlq, {**fields, field.encode(): value.encode()})
    verdict = judge(client=engine.client, produced={}, output_paths=[], hostnames=["worker-1"])
    assert [text for text in verdict.problems if text.startswith(f"malformed entry {ids[index]}: {problem}")]
