"""Stale work and retry_backoff against a real ``relay start``, real Redis and real containers.

One Relay runs through everything, to keep the test short: entries added
3h12m ago to functions with ``max_event_age: 1h`` are dead-lettered (with
the reason and 0 attempts) or, with ``on_expired: drop``, acknowledged,
and both are counted in events_expired_total; an old event sent back with
``relay dlq redrive`` is a new entry and runs; and a handler that fails
with ``retry_backoff: [1s]`` is run again about a second later by the same
worker, well before its reclaimer's first pass (a minute after the start),
with the same RELAY_IDEMPOTENCY_KEY and RELAY_ATTEMPT 2, matched through an
``$or`` with a ``wildcard``. It runs from the source tree and from relay.pyz.
"""

import json
import re
import sys
import time

import pytest

from relay.stream.deadletters import DeadLetters
from relay.stream.settle import dlq_stream
from tests.support.redis_server import free_port
from tests.support.workers import (
    Worker,
    engine_env,
    namespaced_relay_command,
    pending,
    publish,
    wait_until,
    write_function,
)
from tests.test_metrics_e2e import sample, scrape

HANDLERS = """
import sys
import time


def welcome(event):
    print(f"welcome sent {event['n']}", flush=True)


def digest(event):
    print(f"digest added {event['n']}", flush=True)


def flaky(event):
    import os
    print(f"flaky attempt at {time.time():.3f} key {os.environ['RELAY_IDEMPOTENCY_KEY']} "
          f"attempt {os.environ['RELAY_ATTEMPT']}", flush=True)
    sys.exit(1)
"""
WELCOME = """
runtime: python3.14
events:
  - handler: app.welcome
    pattern: {kind: [welcome]}
    max_event_age: 1h
  - handler: app.flaky
    pattern:
      $or:
        - kind: [flaky]
        - kind: {wildcard: ["flaky-*"]}
    retries: 1
    retry_backoff: [1s]
"""
DIGEST = """
runtime: python3.14
max_event_age: 1h
on_expired: drop
events:
  - handler: app.digest
    pattern: {kind: [digest]}
"""
AGE_MS = (3 * 3600 + 12 * 60) * 1000


def dead_letters(client):
    return {fields[b"original_id"].decode(): fields for _id, fields in client.xrange(dlq_stream("events"))}


@pytest.mark.parametrize("program", ["module", "pyz"])
def test_stale_entries_expire_a_redriven_one_runs_and_a_retry_runs_when_due(redis_server, redis_client,
                                                                            docker_engine, workers, tmp_path,
                                                                            program, request):
    command = (sys.executable, "-m", "relay") if program == "module" else (sys.executable,
                                                                          str(request.getfixturevalue("pyz")))
    functions = tmp_path / "functions"
    write_function(functions, "welcome", WELCOME, {"app.py": HANDLERS})
    write_function(functions, "digest", DIGEST, {"app.py": HANDLERS})
    (tmp_path / "state").mkdir()
    added = int(time.time() * 1000) - AGE_MS       # published during an outage, 3h12m ago
    old_welcome = redis_client.xadd("events", {"event": json.dumps({"kind": "welcome", "n": 1})},
                                    id=f"{added}-0").decode()
    old_digest = redis_client.xadd("events", {"event": json.dumps({"kind": "digest", "n": 2})},
                                   id=f"{added}-1").decode()
    dlq_id = redis_client.xadd(dlq_stream("events"), {
        "original_stream": "events", "original_id": f"{added}-2", "group": "relay", "consumer": "gone",
        "event": json.dumps({"kind": "welcome", "n": 3}), "reason": "attempts exhausted for welcome/app.welcome",
        "attempts": "5", "timestamp": "2026-01-01T00:00:00Z"}).decode()
    port = free_port()
    relay = Worker(namespaced_relay_command(functions, tmp_path / "state", "relay-e2e-expiry", command),
                   engine_env(redis_server, METRICS_ADDR=f"127.0.0.1:{port}", LOG_LEVEL="DEBUG"), tmp_path, "relay")
    workers.append(relay)
    relay.wait_for('msg="Relay started"', timeout=300)

    # Stale work: neither handler runs; welcome's entry is dead-lettered, digest's acknowledged.
    wait_until(lambda: old_welcome in dead_letters(redis_client), what="the old welcome entry to be dead-lettered")
    letter = dead_letters(redis_client)[old_welcome]
    assert re.fullmatch(r"older than max_event_age \(1h\): 3h1\dm(\d{1,2}s)?", letter[b"reason"].decode())
    assert letter[b"attempts"] == b"0"
    assert old_digest not in dead_letters(redis_client)
    assert "welcome sent 1" not in relay.stdout and "digest added 2" not in relay.stdout

    # A redriven entry is new: judged by when it was redriven, it runs.
    ((_, redriven),) = DeadLetters(redis_client, "events").redrive([dlq_id])
    relay.wait_for("welcome sent 3", where="stdout")

    # retry_backoff: [1s]: attempt 2 runs about a second after attempt 1 failed, on this worker.
    flaky = publish(redis_client, {"kind": "flaky-signup", "n": 4})
    relay.wait_for('msg="Handler failed; attempts exhausted"')
    wait_until(lambda: pending(redis_client) == 0, what="every entry to be settled")
    assert dead_letters(redis_client)[flaky][b"attempts"] == b"2"
    (first, key, one), (second, same_key, two) = re.findall(r"flaky attempt at ([\d.]+) key (\w+) attempt (\d)",
                                                            relay.stdout)
    assert 1.0 <= float(second) - float(first) < 30      # not before the backoff; far sooner than the reclaimer
    assert (one, two) == ("1", "2") and key == same_key and len(key) == 32
    log = relay.stderr
    failed = log.index(f'msg="Handler failed; will retry" function=welcome handler=app.flaky message_id={flaky}')
    held = log.index(f'msg="Entry held for its retry" message_id={flaky}', failed)
    assert "retry_in=1s" in log[failed:held]
    exhausted = log.index('msg="Handler failed; attempts exhausted"', held)
    assert "attempt=2" in log[exhausted:].splitlines()[0]
    assert 'msg="Reclaimed entries"' not in log

    families = scrape(port)
    assert sample(families, "events_expired", function="welcome") == 1
    assert sample(families, "events_expired", function="digest") == 1
    assert sample(families, "dlq_entries") == 2              # the old welcome entry and the flaky one
    assert 'msg="Entry older than max_event_age; handler not run" function=digest' in log
    assert redriven not in dead_letters(redis_client)
    assert relay.stop() == 0
