"""Schedules across a fleet: real workers, a real redis-server, real containers."""

import json
import re
import signal
import time
from datetime import UTC, datetime

import pytest

from relay.stream.schedules import parse_occurrence_id
from tests.support.workers import Worker, engine_env, harness_command, write_function

TICK = """
import json, sys, time

def handler(event):
    print(f"tick {event['scheduled_at']} start", flush=True)
    time.sleep(float(__import__('os').environ.get('TICK_SLEEP', '0')))
    print(f"tick {event['scheduled_at']} done", flush=True)
"""


def ticker(root, cron, sleep="0", timeout="10s"):
    return write_function(root, "ticker", f"""
runtime: python3.14
concurrency: 4
env:
  TICK_SLEEP: "{sleep}"
schedules:
  - handler: jobs.tick.handler
    cron: "{cron}"
    timeout: {timeout}
""", {"jobs/tick.py": TICK})


@pytest.fixture
def fleet():
    workers = []
    yield workers
    for worker in workers:
        worker.kill()


def test_three_workers_publish_and_run_each_occurrence_once(redis_server, redis_client, docker_engine, fleet,
                                                            tmp_path):
    functions = tmp_path / "functions"
    ticker(functions, "*/2 * * * * *")
    env = engine_env(redis_server, LOG_LEVEL="DEBUG")
    for name in ("worker-a", "worker-b", "worker-c"):
        fleet.append(Worker(harness_command(functions, name), env, tmp_path, name))
    for worker in fleet:
        worker.wait_for('msg="Relay started"')
    time.sleep(20)
    all_running_until = time.time()
    for worker in fleet:                        # all at once: the fleet shrinks for as short a time as it can
        worker.process.send_signal(signal.SIGTERM)
    for worker in fleet:
        assert worker.stop() == 0
    entries = redis_client.xrange("events")
    occurrence_ids = [fields[b"schedule"].decode() for _id, fields in entries]
    assert len(occurrence_ids) >= 8 and len(set(occurrence_ids)) == len(occurrence_ids)
    instants = sorted(json.loads(fields[b"event"])["scheduled_at"] for _id, fields in entries)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:[0-5][02468]Z", instant) for instant in instants)

    done = [line for worker in fleet for line in worker.stdout.splitlines() if line.endswith(" done")]
    ran = [re.search(r"tick (\S+) done$", line)[1] for line in done]
    assert sorted(ran) == sorted(set(ran))                     # no occurrence ran twice
    assert set(ran) <= set(instants)
    pending_ids = {entry["message_id"] for entry in redis_client.xpending_range("events", "relay", "-", "+", 100)}
    unfinished = {json.loads(fields[b"event"])["scheduled_at"] for entry_id, fields in entries
                  if entry_id in pending_ids}
    assert set(instants) - set(ran) == unfinished              # in flight at the stop: pending, not lost
    assert len(ran) >= len(instants) - 3
    logs = "".join(worker.stderr for worker in fleet)
    published = logs.count('msg="Schedule occurrence published"')
    assert published == len(entries)
    # The other workers evaluated the same ticks: every occurrence due while all three ran was also found
    # already published (a worker busy under load may come to it late, but never skips it).
    duplicated = set(re.findall(r'msg="Schedule occurrence already published" occurrence=(\S+)', logs))
    due_while_all_ran = {occurrence for occurrence in occurrence_ids
                         if _unix_time(parse_occurrence_id(occurrence)[2]) < all_running_until - 2}
    assert len(due_while_all_ran) >= 6 and due_while_all_ran <= duplicated, due_while_all_ran - duplicated


def test_an_occurrence_survives_the_worker_that_received_it(redis_server, redis_client, docker_engine, fleet,
                                                            tmp_path):
    functions = tmp_path / "functions"
    ticker(functions, "0 * * * * *", sleep="4", timeout="8s")       # once a minute, at second 0
    first = Worker(harness_command(functions, "worker-a", reclaim=1, idle=2), engine_env(redis_server), tmp_path,
                   "a")
    fleet.append(first)
    first.wait_for("start", where="stdout", timeout=90)
    scheduled_at = re.search(r"tick (\S+) start", first.stdout)[1]
    first.process.send_signal(signal.SIGKILL)
    first.process.wait()
    second = Worker(harness_command(functions, "worker-b", reclaim=1, idle=2), engine_env(redis_server), tmp_path,
                    "b")
    fleet.append(second)
    second.wait_for(f"tick {scheduled_at} done", where="stdout", timeout=90)
    deadline = time.monotonic() + 30
    while redis_client.xpending("events", "relay")["pending"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert redis_client.xpending("events", "relay")["pending"] == 0
    assert second.stop() == 0


def _unix_time(instant):
    return datetime.strptime(instant, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()

