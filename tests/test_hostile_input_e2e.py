"""Hostile entries against a real Relay: a poison entry never ends the read loop or the reclaimer.

``relay start`` reads an event nested 1,000 levels deep, a 2 MiB event and
one that is not UTF-8, dead-letters each with its reason, and goes on to run
the handler for the events after them. The reclaimer, run with short test
timings by tests/support/harness.py, does the same with poison entries a dead
worker left pending, pass after pass.
"""

from relay.stream.plans import TOO_DEEP
from relay.stream.settle import dlq_stream
from tests.support.workers import (
    Worker,
    engine_env,
    harness_command,
    namespaced_relay_command,
    pending,
    publish,
    wait_until,
    write_function,
)

NESTED = "[" * 1000 + "]" * 1000
TWO_MIB = ('{"kind": "ok", "n": 0, "blob": "' + "x" * (2 * 1024 * 1024) + '"}').encode()
NOT_UTF8 = b'{"kind": "ok", "n": "\xff\xfe"}'
HANDLER = """
def handler(event):
    print(f"handled {event['n']}", flush=True)
"""


def echo_function(root):
    write_function(root, "echo", """
runtime: python3.14
events:
  - handler: app.handler
    pattern: {kind: [ok]}
""", {"app.py": HANDLER})


def dead_letters(client):
    return {fields[b"original_id"].decode(): fields for _id, fields in client.xrange(dlq_stream("events"))}


def as_a_dead_worker(client, *entries):
    """XADD *entries* and read them as another consumer in one transaction, so they sit
    pending for a worker that is gone and only the reclaimer can take them."""
    pipe = client.pipeline(transaction=True)
    for fields in entries:
        pipe.xadd("events", fields)
    pipe.xreadgroup("relay", "a-worker-that-died", {"events": ">"})
    *ids, _read = pipe.execute()
    return [message_id.decode() for message_id in ids]


def test_relay_start_dead_letters_hostile_entries_and_keeps_reading(redis_server, redis_client, docker_engine,
                                                                    workers, tmp_path):
    functions = tmp_path / "functions"
    echo_function(functions)
    (tmp_path / "state").mkdir()
    relay = Worker(namespaced_relay_command(functions, tmp_path / "state", "relay-e2e-hostile"),
                   engine_env(redis_server), tmp_path, "relay")
    workers.append(relay)
    relay.wait_for('msg="Relay started"')
    nested_id = redis_client.xadd("events", {"event": NESTED}).decode()
    huge_id = redis_client.xadd("events", {"event": TWO_MIB}).decode()
    binary_id = redis_client.xadd("events", {"event": NOT_UTF8}).decode()
    publish(redis_client, {"kind": "ok", "n": 1})
    relay.wait_for("handled 1", where="stdout")
    wait_until(lambda: pending(redis_client) == 0, what="every entry to be acknowledged")

    letters = dead_letters(redis_client)
    assert sorted(letters) == sorted([nested_id, huge_id, binary_id])
    assert letters[nested_id][b"reason"].decode() == TOO_DEEP
    assert letters[nested_id][b"event"] == NESTED.encode() and letters[nested_id][b"attempts"] == b"0"
    huge = letters[huge_id]
    assert huge[b"reason"].decode() == f"event is {len(TWO_MIB)} bytes, over MAX_EVENT_BYTES (1048576)"
    assert (huge[b"event"], huge[b"truncated"], huge[b"event_bytes"]) == (
        TWO_MIB[:4096], b"true", str(len(TWO_MIB)).encode())
    assert letters[binary_id][b"reason"].startswith(b"the 'event' field is not UTF-8 text")
    assert letters[binary_id][b"event"] == NOT_UTF8

    publish(redis_client, {"kind": "ok", "n": 2})      # the read loop is still reading
    relay.wait_for("handled 2", where="stdout")
    assert relay.stderr.count('msg="Malformed entry; it can never succeed"') == 3
    assert relay.stop() == 0


def test_the_reclaimer_dead_letters_poison_entries_pass_after_pass(redis_server, redis_client, docker_engine,
                                                                   workers, tmp_path):
    functions = tmp_path / "functions"
    echo_function(functions)
    poison = '{"kind": "ok", "n": ' + '{"a": ' * 1000 + "1" + "}" * 1000 + "}"
    big = ('{"kind": "ok", "n": 0, "blob": "' + "y" * (100 * 1024) + '"}').encode()
    redis_client.xgroup_create("events", "relay", id="0", mkstream=True)
    poison_id, big_id, _ = as_a_dead_worker(redis_client, {"event": poison}, {"event": big},
                                            {"event": '{"kind": "ok", "n": 1}'})
    worker = Worker(harness_command(functions, "worker-1"), engine_env(redis_server, MAX_EVENT_BYTES="65536"),
                    tmp_path, "worker")
    workers.append(worker)
    worker.wait_for('msg="Relay started"')
    worker.wait_for("handled 1", where="stdout")
    wait_until(lambda: pending(redis_client) == 0, what="the reclaimed entries to be settled")
    letters = dead_letters(redis_client)
    assert letters[poison_id][b"reason"].decode() == TOO_DEEP
    assert letters[big_id][b"reason"].decode() == f"event is {len(big)} bytes, over MAX_EVENT_BYTES (65536)"
    assert letters[big_id][b"event"] == big[:4096] and letters[big_id][b"truncated"] == b"true"

    second_poison, _ = as_a_dead_worker(redis_client, {"event": NESTED}, {"event": '{"kind": "ok", "n": 2}'})
    worker.wait_for("handled 2", where="stdout")     # a later pass: the reclaimer lived through the first
    wait_until(lambda: pending(redis_client) == 0, what="the second batch to be settled")
    assert dead_letters(redis_client)[second_poison][b"reason"].decode() == TOO_DEEP
    assert worker.stop() == 0
