"""``relay start`` holds no more than its limits whatever producers write.

The stream holds eight 64 MiB events and an entry with a 64 MiB field
beside a small event, then a small event for a real handler. The worker
dead-letters the nine as it always dead-lettered an event over
MAX_EVENT_BYTES (its first 4 KiB kept) or, for the wide entry, with its
event whole; it runs the handler for the last event; and its peak resident
set stays at or under 200 MB. Before the cap, one XREADGROUP brought the
whole 576 MiB into the worker.
"""

import json

from relay.stream.settle import dlq_stream
from tests.support.workers import (
    Worker,
    engine_env,
    namespaced_relay_command,
    pending,
    publish,
    wait_until,
    write_function,
)

MIB = 1024 * 1024
PEAK_LIMIT = 200 * 1000 * 1000      # bytes, as the issue states it (200 MB)
SMALL = json.dumps({"kind": "ok", "n": 0})


def peak_rss(pid):
    """The process's peak resident set (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc")


def test_a_worker_stays_under_200_mb_while_the_stream_holds_gigantic_entries(redis_server, redis_client,
                                                                             docker_engine, workers, tmp_path):
    functions = tmp_path / "functions"
    write_function(functions, "echo", "runtime: python3.14\nevents:\n  - handler: app.handler\n"
                   "    pattern: {kind: [ok]}\n",
                   {"app.py": "def handler(event):\n    print(f\"handled {event['n']}\", flush=True)\n"})
    (tmp_path / "state").mkdir()
    redis_client.xgroup_create("events", "relay", id="0", mkstream=True)
    huge = [redis_client.xadd("events", {"event": bytes([ord("a") + index]) * (64 * MIB)}).decode()
            for index in range(8)]
    wide = redis_client.xadd("events", {"event": SMALL, "blob": b"w" * (64 * MIB)}).decode()
    publish(redis_client, {"kind": "ok", "n": 1})

    relay = Worker(namespaced_relay_command(functions, tmp_path / "state", "relay-e2e-memory"),
                   engine_env(redis_server), tmp_path, "relay")
    workers.append(relay)
    relay.wait_for("handled 1", where="stdout")
    wait_until(lambda: pending(redis_client) == 0, what="every entry to be settled")
    peak = peak_rss(relay.process.pid)
    assert peak <= PEAK_LIMIT, f"peak resident set {peak / 1e6:.0f} MB (limit {PEAK_LIMIT / 1e6:.0f} MB)"

    letters = {fields[b"original_id"].decode(): fields for _id, fields in redis_client.xrange(dlq_stream("events"))}
    assert sorted(letters) == sorted([*huge, wide])
    for index, message_id in enumerate(huge):
        letter = letters[message_id]
        assert letter[b"reason"] == f"event is {64 * MIB} bytes, over MAX_EVENT_BYTES (1048576)".encode()
        assert letter[b"event"] == bytes([ord("a") + index]) * 4096
        assert (letter[b"truncated"], letter[b"event_bytes"], letter[b"attempts"]) == (
            b"true", str(64 * MIB).encode(), b"0")
    assert letters[wide][b"reason"] == f"the fields other than 'event' hold {64 * MIB + 4} bytes, " \
                                       "over the 65536 Relay reads".encode()
    assert letters[wide][b"event"] == SMALL.encode() and b"truncated" not in letters[wide]
    assert "handled 0" not in relay.stdout
    assert relay.stop() == 0
