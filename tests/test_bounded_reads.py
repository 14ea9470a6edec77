"""What one worker holds is bounded whatever producers write, against a real redis-server.

An entry's fields but its event may hold 64 KiB together; over that, or
over MAX_EVENT_BYTES, it is dead-lettered with what can be kept of its
event. The engine here runs on a client whose replies are capped at
1 MiB, as ``relay start``'s are at a full buffer's worth (relay.reply_cap),
so a path that brought a large entry into the worker would fail: the
reclaimer and a read dropped for its size claim entries through the script
that measures them in Redis (relay.stream.claims), and the small entries
of that read run as usual.
"""

import json
import logging

import gevent
import pytest
from gevent.event import Event

from relay.reply_cap import cap_replies
from relay.stream.plans import KEPT_PREFIX_BYTES, MAX_OTHER_FIELD_BYTES
from tests.support.engine import AUDIT, GROUP, ORDERS, STREAM, Engine

ORDER = json.dumps({"kind": "order"})
CAP = 1024 * 1024
TWO_MIB = b'{"kind": "order", "blob": "' + b"x" * (2 * 1024 * 1024) + b'"}'


@pytest.fixture
def capped(redis_server, redis_client):
    client = cap_replies(redis_server.client(), CAP)
    yield client
    client.close()


@pytest.fixture
def engine(capped):
    return Engine(capped, [ORDERS, AUDIT])


def dead_letters(engine):
    return {fields[b"original_id"].decode(): fields for _id, fields in engine.client.xrange(f"relay:{STREAM}:dlq")}


def handled(engine):
    return len(engine.executor.calls) // 3      # each order runs three handlers


def add(engine, **fields):
    return engine.client.xadd(STREAM, fields).decode()


def read(engine):
    engine.consumer.read_once()
    engine.consumer.drain(10)


def test_other_fields_over_64_kib_dead_letter_the_entry_with_its_event_whole(engine):
    over = add(engine, event=ORDER, blob=b"b" * (MAX_OTHER_FIELD_BYTES - len("blob") + 1))
    at_limit = add(engine, event=ORDER, blob=b"b" * (MAX_OTHER_FIELD_BYTES - len("blob")))
    read(engine)
    letters = dead_letters(engine)
    assert list(letters) == [over] and at_limit not in letters
    assert letters[over][b"reason"] == b"the fields other than 'event' hold 65537 bytes, over the 65536 Relay reads"
    assert letters[over][b"event"] == ORDER.encode() and b"truncated" not in letters[over]
    assert handled(engine) == 1 and engine.pending() == 0


def test_a_read_past_the_cap_is_claimed_again_measured_and_its_small_entries_run(engine, caplog):
    first = add(engine, event=ORDER)
    huge = add(engine, event=TWO_MIB)
    wide = add(engine, event=ORDER, blob=b"b" * (2 * 1024 * 1024))
    last = add(engine, event=ORDER)
    with caplog.at_level(logging.WARNING, logger="relay.stream.consumer"):
        assert engine.consumer.read_once() == 4
    engine.consumer.drain(10)
    assert "A read brought more than this worker holds" in caplog.text
    letters = dead_letters(engine)
    assert sorted(letters) == sorted([huge, wide])
    assert letters[huge][b"reason"] == f"event is {len(TWO_MIB)} bytes, over MAX_EVENT_BYTES (1048576)".encode()
    assert (letters[huge][b"event"], letters[huge][b"truncated"], letters[huge][b"event_bytes"]) == (
        TWO_MIB[:KEPT_PREFIX_BYTES], b"true", str(len(TWO_MIB)).encode())
    assert letters[wide][b"reason"].startswith(b"the fields other than 'event' hold 2097156 bytes")
    assert letters[wide][b"event"] == ORDER.encode()
    assert handled(engine) == 2 and engine.pending() == 0
    assert {call.message_id for call in engine.executor.calls} == {first, last}
    assert engine.consumer.buffer.used == 0


def test_an_entry_still_running_here_is_not_run_again_after_a_dropped_read(engine, monkeypatch):
    release, run = Event(), engine.executor.run

    def slow(invocation):
        release.wait(10)
        return run(invocation)

    monkeypatch.setattr(engine.executor, "run", slow)
    running = add(engine, event=ORDER)
    engine.consumer.read_once()
    gevent.sleep(0)                               # its dispatch waits in the executor, delivered just now
    huge = add(engine, event=TWO_MIB)
    engine.consumer.read_once()                   # dropped for its size, then claimed again measured
    release.set()
    engine.consumer.drain(10)
    assert list(dead_letters(engine)) == [huge]
    assert [call.message_id for call in engine.executor.calls] == [running] * 3 and engine.pending() == 0


def test_the_reclaimer_measures_entries_before_they_leave_redis(engine, redis_client):
    pipe = redis_client.pipeline(transaction=True)      # uncapped: as a worker that died holding them
    pipe.xadd(STREAM, {"event": TWO_MIB})
    pipe.xadd(STREAM, {"event": ORDER, "blob": b"b" * (2 * 1024 * 1024)})
    pipe.xadd(STREAM, {"event": ORDER})
    pipe.xreadgroup(GROUP, "a-worker-that-died", {STREAM: ">"})
    huge, wide, small, _read = pipe.execute()
    engine.redeliver(0)
    assert sorted(dead_letters(engine)) == sorted([huge.decode(), wide.decode()])
    assert [call.message_id for call in engine.executor.calls][:1] == [small.decode()]
    assert handled(engine) == 1 and engine.pending() == 0


def test_the_reclaimer_pages_through_more_idle_entries_than_the_buffer_holds(capped):
    engine = Engine(capped, [ORDERS, AUDIT], buffered=2)
    pipe = engine.client.pipeline(transaction=True)
    for _ in range(5):
        pipe.xadd(STREAM, {"event": ORDER})
    pipe.xreadgroup(GROUP, "a-worker-that-died", {STREAM: ">"})
    pipe.execute()
    engine.redeliver(0)
    assert handled(engine) == 5 and engine.pending() == 0
