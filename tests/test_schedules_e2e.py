"""Schedules across a fleet: real workers, a real redis-server, real containers."""

import json
import re
import signal
import time
from datetime import UTC, datetime, timedelta

import pytest

from relay.stream.schedules import Occurrence, next_instant, parse_occurrence_id
from tests.support.workers import Worker, engine_env, harness_command, wait_until, write_function

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


CLOCK = """
import os

def handler(event):
    print(f"ran {event['scheduled_at']} forged={event.get('forged', '-')} key={os.environ['RELAY_IDEMPOTENCY_KEY']}",
          flush=True)
"""


def test_a_producer_cannot_run_a_schedule_only_handler(redis_server, redis_client, docker_engine, fleet, tmp_path):
    """Entries a producer adds with a 'schedule' field of its own, naming an occurrence that ran, one never
    published, and one still to come, are dead-lettered unrun; the one to come still runs when it is due."""
    functions = tmp_path / "functions"
    write_function(functions, "clock", """
runtime: python3.14
schedules:
  - handler: jobs.clock.handler
    cron: "*/5 * * * * *"
""", {"jobs/clock.py": CLOCK})
    worker = Worker(harness_command(functions, "worker-a"), engine_env(redis_server), tmp_path, "a")
    fleet.append(worker)
    worker.wait_for("ran ", where="stdout", timeout=120)
    ran = re.search(r"ran (\S+) forged=- key=(\S+)", worker.stdout)
    past = Occurrence("clock", "jobs.clock.handler", datetime.strptime(ran[1], "%Y-%m-%dT%H:%M:%SZ")
                      .replace(tzinfo=UTC))
    assert ran[2] == past.id
    never = Occurrence("clock", "jobs.clock.handler", datetime(2020, 1, 1, tzinfo=UTC))
    future = Occurrence("clock", "jobs.clock.handler",
                        next_instant("*/5 * * * * *", "UTC", datetime.now(UTC) + timedelta(seconds=10)))
    forged = {}      # entry id → (what it forges, the occurrence it names)
    for name, occurrence in (("past", past), ("never", never), ("future", future)):
        event = {"source": "relay.schedule", "scheduled_at": occurrence.scheduled_at, "forged": name}
        entry_id = redis_client.xadd("events", {"event": json.dumps(event), "schedule": occurrence.id}).decode()
        forged[entry_id] = (name, occurrence)
    worker.wait_for(f"ran {future.scheduled_at} forged=- key={future.id}", where="stdout", timeout=60)
    wait_until(lambda: redis_client.xlen("relay:events:dlq") == 3, timeout=10, what="three dead letters")

    assert not re.search(r"forged=(?!-)", worker.stdout)          # the handler never ran for one of them
    letters = {fields[b"original_id"].decode(): fields for _id, fields in redis_client.xrange("relay:events:dlq")}
    assert letters.keys() == forged.keys()
    past_entry = redis_client.get(f"relay:{past.id}").decode()
    expected = {"past": f"{past.id!r} was published as entry {past_entry}",
                "never": f"there is no record of {never.id!r} being published (records are kept 7 days)",
                "future": f"there is no record of {future.id!r} being published (records are kept 7 days)"}
    for entry_id, (name, _occurrence) in forged.items():
        assert letters[entry_id][b"reason"].decode() == (
            f"the 'schedule' field was not written by Relay's scheduler: {expected[name]}")
        assert letters[entry_id][b"attempts"] == b"0"
    assert worker.stop() == 0
    assert redis_client.xpending("events", "relay")["pending"] == 0


def _unix_time(instant):
    return datetime.strptime(instant, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()

