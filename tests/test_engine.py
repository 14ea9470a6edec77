"""The engine end to end: real Relay processes, a real redis-server, real containers."""

import json
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from relay.durations import HOUR, MINUTE, SECOND
from relay.stream import markers
from relay.stream.retention import Retention, trim_interval
from relay.stream.settle import dlq_stream
from tests.support.redis_server import RedisServer
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

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "functions"
EXAMPLE_EVENT = {"event_id": "evt_123", "event_name": "INSERT", "table_name": "users",
                 "new_image": {"id": "user_123", "name": "John Doe", "email": "john@example.com"}}
SLEEPY = """
import time

def handler(event):
    print(f"start {event['n']} {time.time():.3f}", flush=True)
    time.sleep(event.get("sleep", 1))
    print(f"end {event['n']} {time.time():.3f}", flush=True)
"""


def sleepy(root, name, concurrency=2, timeout="20s", match="sleepy"):
    return write_function(root, name, f"""
runtime: python3.14
concurrency: {concurrency}
events:
  - handler: app.handler
    pattern: {{kind: [{match}]}}
    timeout: {timeout}
""", {"app.py": SLEEPY})


def start(workers, *args, **kwargs):
    worker = Worker(*args, **kwargs)
    workers.append(worker)
    return worker


def test_the_reference_example_runs_through_both_functions(redis_server, redis_client, docker_engine, workers,
                                                           tmp_path):
    functions = tmp_path / "functions"
    shutil.copytree(EXAMPLES, functions)
    (tmp_path / "state").mkdir()
    relay = start(workers, namespaced_relay_command(functions, tmp_path / "state", "relay-e2e-example"),
                  engine_env(redis_server), tmp_path, "relay")
    relay.wait_for('msg="Relay started"')
    assert "functions=2" in relay.stderr and "consumer=relay-e2e-example" in relay.stderr
    message_id = publish(redis_client, EXAMPLE_EVENT)
    relay.wait_for("Sending welcome email to john@example.com", where="stdout")
    wait_until(lambda: pending(redis_client) == 0, what="the entry to be acknowledged")
    lines = relay.stdout.splitlines()
    assert (f'relay: function "user-events-python" handler "events.created.handler" message "{message_id}" '
            f'event "evt_123": User created: user_123') in lines
    assert (f'relay: function "welcome-email-node" handler "handler.handler" message "{message_id}" '
            f'event "evt_123": Sending welcome email to john@example.com') in lines
    executed = [line for line in relay.stderr.splitlines() if 'msg="Handler executed"' in line]
    assert [re.search(r"function=(\S+)", line)[1] for line in executed] == ["user-events-python",
                                                                           "welcome-email-node"]
    assert all(f"message_id={message_id}" in line and "exit_code=0" in line for line in executed)
    assert redis_client.exists(markers.state_key("events", "relay", message_id)) == 0
    assert relay.stop() == 0


def test_failures_record_backoff_and_exhaustion_dead_letters(redis_server, redis_client, docker_engine, workers,
                                                             tmp_path):
    write_function(tmp_path / "functions", "flaky", """
runtime: python3.14
events:
  - handler: app.handler
    pattern: {kind: [retry]}
    retries: 2
  - handler: app.handler
    pattern: {kind: [final]}
    retries: 0
""", {"app.py": "import sys\n\ndef handler(event):\n    print('failing', flush=True)\n    sys.exit(3)\n"})
    worker = start(workers, harness_command(tmp_path / "functions", "worker-1"), engine_env(redis_server),
                   tmp_path, "worker")
    worker.wait_for('msg="Relay started"')
    retried = publish(redis_client, {"kind": "retry", "event_id": "evt_r"})
    worker.wait_for('msg="Handler failed; will retry"')
    state = redis_client.hgetall(markers.state_key("events", "relay", retried))
    marker = markers.parse(state[b"flaky/app.handler"])
    assert (marker.kind, marker.attempts) == ("next_attempt_at", 1)
    assert 50 * SECOND < marker.deadline - time.time_ns() <= MINUTE
    assert "exit_code=3" in worker.stderr and "retry_in=1m0s" in worker.stderr
    assert pending(redis_client) == 1

    final = publish(redis_client, {"kind": "final", "event_id": "evt_f"})
    worker.wait_for('msg="Entry dead-lettered"')
    (dead,) = [fields for _id, fields in redis_client.xrange(dlq_stream("events"))]
    assert dead[b"original_id"].decode() == final and dead[b"attempts"] == b"1"
    assert dead[b"consumer"] == b"worker-1" and json.loads(dead[b"event"]) == {"kind": "final", "event_id": "evt_f"}
    wait_until(lambda: pending(redis_client) == 1, what="only the retrying entry to stay pending")
    assert worker.stop() == 0


def _overlaps(stdout, names):
    """The most handlers of *names* (function names) that were running at the same instant."""
    spans = []
    for line in stdout.splitlines():
        found = re.match(r'relay: function "([^"]+)".*: (start|end) (\d+) ([\d.]+)$', line)
        if found and found[1] in names:
            spans.append((float(found[4]), 1 if found[2] == "start" else -1))
    running = peak = 0
    for _instant, step in sorted(spans, key=lambda item: (item[0], item[1])):
        running += step
        peak = max(peak, running)
    return peak


def test_global_and_per_function_limits_are_never_exceeded(redis_server, redis_client, docker_engine, workers,
                                                           tmp_path):
    functions = tmp_path / "functions"
    sleepy(functions, "slow-a", concurrency=2, match="a")
    sleepy(functions, "slow-b", concurrency=2, match="b")
    worker = start(workers, harness_command(functions, "worker-1"),
                   engine_env(redis_server, MAX_CONCURRENCY="3"), tmp_path, "worker")
    worker.wait_for('msg="Relay started"')
    for number in range(6):
        publish(redis_client, {"kind": "a", "n": number, "sleep": 1.5})
        publish(redis_client, {"kind": "b", "n": number, "sleep": 1.5})
    worker.wait_for(": end ", where="stdout", count=12, timeout=180)
    assert _overlaps(worker.stdout, {"slow-a"}) == 2
    assert _overlaps(worker.stdout, {"slow-b"}) == 2
    assert _overlaps(worker.stdout, {"slow-a", "slow-b"}) == 3
    wait_until(lambda: pending(redis_client) == 0, what="every entry to be acknowledged")
    assert worker.stop() == 0


def test_a_second_worker_finishes_what_a_killed_one_started(redis_server, redis_client, docker_engine, workers,
                                                            tmp_path):
    functions = tmp_path / "functions"
    sleepy(functions, "slow", timeout="6s")
    first = start(workers, harness_command(functions, "worker-a"), engine_env(redis_server), tmp_path, "a")
    first.wait_for('msg="Relay started"')
    message_id = publish(redis_client, {"kind": "sleepy", "n": 1, "sleep": 3})
    first.wait_for(": start 1 ", where="stdout")
    first.process.send_signal(signal.SIGKILL)
    first.process.wait()
    second = start(workers, harness_command(functions, "worker-b"), engine_env(redis_server), tmp_path, "b")
    second.wait_for(": end 1 ", where="stdout", timeout=90)
    wait_until(lambda: pending(redis_client) == 0, what="the reclaimed entry to be acknowledged")
    executed = [line for line in second.stderr.splitlines() if 'msg="Handler executed"' in line]
    assert len(executed) == 1 and "attempt=2" in executed[0] and f"message_id={message_id}" in executed[0]
    assert second.stop() == 0


@pytest.fixture
def durable_redis(tmp_path):
    server = RedisServer(tmp_path / "durable")
    server.directory.mkdir()
    server.extra_args = ["--appendonly", "yes", "--appendfsync", "always"]
    server.start()
    yield server
    server.stop()


def test_nothing_is_lost_across_a_redis_restart(durable_redis, docker_engine, workers, tmp_path):
    functions = tmp_path / "functions"
    write_function(functions, "echo", """
runtime: python3.14
concurrency: 4
events:
  - handler: app.handler
    pattern: {kind: [echo]}
""", {"app.py": "def handler(event):\n    print(f\"seen {event['n']}\", flush=True)\n"})
    worker = start(workers, harness_command(functions, "worker-1"), engine_env(durable_redis), tmp_path, "worker")
    worker.wait_for('msg="Relay started"')
    client = durable_redis.client()
    for number in range(12):
        publish(client, {"kind": "echo", "n": number})
    worker.wait_for("seen ", where="stdout", count=3, timeout=120)
    durable_redis.stop()
    time.sleep(1)
    durable_redis.start()
    client = durable_redis.client()
    for number in range(12, 16):
        publish(client, {"kind": "echo", "n": number})
    wait_until(lambda: {int(n) for n in re.findall(r": seen (\d+)$", worker.stdout, re.MULTILINE)} == set(range(16)),
               timeout=180, what="every event to run")
    wait_until(lambda: pending(client) == 0, timeout=120, what="every entry to be acknowledged")
    assert 'msg="Redis unreachable; retrying with backoff"' in worker.stderr
    assert 'msg="Redis reachable again"' in worker.stderr
    assert worker.stop() == 0


def test_sigterm_lets_a_running_handler_finish(redis_server, redis_client, docker_engine, workers, tmp_path):
    functions = tmp_path / "functions"
    sleepy(functions, "slow")
    worker = start(workers, harness_command(functions, "worker-1"), engine_env(redis_server), tmp_path, "worker")
    worker.wait_for('msg="Relay started"')
    publish(redis_client, {"kind": "sleepy", "n": 7, "sleep": 3})
    worker.wait_for(": start 7 ", where="stdout")
    assert worker.stop(signal.SIGTERM) == 0
    assert ": end 7 " in worker.stdout
    assert pending(redis_client) == 0


def test_retention_trims_only_entries_older_than_the_window(redis_client):
    now = time.time_ns()
    old_ms = (now - 2 * HOUR) // 1_000_000
    for sequence in range(300):
        redis_client.xadd("events", {"event": "{}"}, id=f"{old_ms}-{sequence + 1}")
    fresh = [redis_client.xadd("events", {"event": "{}"}) for _ in range(10)]
    retention = Retention(redis_client, "events", HOUR, clock=lambda: now)
    assert retention.cutoff_id() == f"{(now - HOUR) // 1_000_000}-0"
    for _ in range(3):
        retention.trim_once()
    remaining = [entry_id for entry_id, _ in redis_client.xrange("events")]
    assert set(fresh) <= set(remaining)
    assert len(remaining) < 300          # whole old nodes went; Redis keeps a node shared with newer entries


@pytest.mark.parametrize(("retention", "interval"), [
    (6 * HOUR, 15 * 60), (HOUR, 150), (10 * MINUTE, 60), (48 * HOUR, 3600), (24 * HOUR, 3600), (12 * HOUR, 30 * 60),
])
def test_trim_interval_is_retention_over_24_clamped(retention, interval):
    assert trim_interval(retention) == interval
