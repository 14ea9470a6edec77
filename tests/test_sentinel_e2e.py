"""``relay start`` on ``redis+sentinel://`` follows three failovers without a restart.

One Relay process, one primary, one replica and three Sentinels, the data
nodes and the Sentinels each behind a password. Between the faults a
producer (through the Sentinels, counting an event once ``WAIT 1`` says a
replica has it) adds events for a rate-limited function and a failing one;
after each fault the same Relay process runs the new events on the new
primary:

1. the primary is killed (SIGKILL): connections refused until Sentinel promotes the replica;
2. after the old primary rejoined as a replica, an operator's ``SENTINEL FAILOVER`` moves the
   role back: the old primary is demoted under Relay's open connections (``READONLY``);
3. the primary freezes (SIGSTOP): it keeps every connection open and answers nothing, so only
   Relay's command timeout lets it leave for the new primary.

The Lua scripts Relay uses were never loaded on a promoted replica: Redis
answers ``NOSCRIPT`` and Relay loads them again. At the end every event ran,
each failing one is in the dead-letter stream exactly once, nothing is
pending, and ``relay health`` and ``relay dlq ls`` find the primary through
the Sentinels too.
"""

import hashlib
import json
import re
import sys
import time

import pytest
import redis

from relay.stream.invocations import _TRY_START
from relay.stream.limits import _GCRA
from relay.stream.settle import dlq_stream
from tests.support.relay_process import base_env, run_relay
from tests.support.sentinel import SentinelRedis
from tests.support.workers import Worker, namespaced_relay_command, wait_until, write_function

pytestmark = pytest.mark.integration

PASSWORD, SENTINEL_PASSWORD = "data-pw", "sentinel-pw"
HANDLERS = """
def tally(event):
    print(f"tally {event['n']}", flush=True)


def poison(event):
    raise RuntimeError(f"poison {event['n']}")
"""
TEMPLATE = """
runtime: python3.14
warm: {containers: 1}
rate_limit: 200/s
events:
  - handler: app.tally
    pattern: {kind: [tally]}
  - handler: app.poison
    pattern: {kind: [poison]}
    retries: 0
"""


@pytest.fixture
def sentinels(tmp_path):
    deployment = SentinelRedis(tmp_path / "redis", password=PASSWORD, sentinel_password=SENTINEL_PASSWORD).start()
    yield deployment
    deployment.stop()


class Producer:
    """Adds events through the Sentinels; an event counts once a replica has it (WAIT 1)."""

    def __init__(self, deployment):
        self.client = deployment.sentinel_client(socket_timeout=3, socket_connect_timeout=2)

    def add(self, event, replicas=1, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            try:
                pipe = self.client.pipeline(transaction=False)
                pipe.xadd("events", {"event": json.dumps(event)})
                pipe.wait(replicas, 1000)
                message_id, replicated = pipe.execute()
                if replicated >= replicas:
                    return message_id.decode()
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"could not add {event} through the Sentinels within {timeout}s")
            time.sleep(0.2)


def script_loaded(client, script):
    return client.script_exists(hashlib.sha1(script.encode()).hexdigest())[0]


def test_relay_follows_three_failovers_without_a_restart(sentinels, docker_engine, workers, tmp_path):
    functions = tmp_path / "functions"
    write_function(functions, "ledger", TEMPLATE, {"app.py": HANDLERS})
    (tmp_path / "state").mkdir()
    env = base_env(REDIS_URI=sentinels.uri(login=f":{PASSWORD}"), REDIS_SENTINEL_PASSWORD=SENTINEL_PASSWORD,
                   REDIS_STREAM="events", REDIS_GROUP="relay", LOG_LEVEL="INFO")
    relay = Worker(namespaced_relay_command(functions, tmp_path / "state", "relay-sentinel", (sys.executable, "-m",
                                                                                             "relay")),
                   env, tmp_path, "relay")
    workers.append(relay)
    relay.wait_for('msg="Relay started"', timeout=300)
    assert PASSWORD not in relay.stderr and SENTINEL_PASSWORD not in relay.stderr
    producer = Producer(sentinels)
    count, poisons = 0, []

    def round_of_events(size=5, replicas=1):
        nonlocal count
        for _ in range(size):
            count += 1
            producer.add({"kind": "tally", "n": count}, replicas)
        poisons.append(producer.add({"kind": "poison", "n": count}, replicas))
        relay.wait_for(f"tally {count}\n", where="stdout", timeout=120)
        wait_until(lambda: dead_lettered(sentinels) >= len(poisons), timeout=60, what="the poison to be dead-lettered")
        wait_until(lambda: pending(sentinels) == 0, timeout=60, what="every entry to be settled")

    round_of_events()
    for script in (_TRY_START, _GCRA):
        assert script_loaded(sentinels.client(), script)
        assert not script_loaded(sentinels.client(sentinels.replica()), script)

    # 1. SIGKILL of the primary: Sentinel promotes the replica, which never loaded Relay's scripts.
    killed = sentinels.kill_primary()
    sentinels.wait_failover(killed)
    killed.start()                          # back as a replica: the producer's WAIT 1 needs one
    sentinels.wait_settled()
    round_of_events()
    for script in (_TRY_START, _GCRA):
        assert script_loaded(sentinels.client(), script)       # loaded again after NOSCRIPT

    # 2. SENTINEL FAILOVER back to the first node: the primary Relay is connected to is demoted.
    sentinels.failover()
    round_of_events()
    sentinels.wait_settled()

    # 3. A frozen primary keeps Relay's connections open and never answers.
    frozen = sentinels.primary()
    frozen.freeze()
    sentinels.wait_failover(frozen)
    round_of_events(replicas=0)             # no replica to wait for while the old primary is frozen
    frozen.thaw()                           # demoted by the Sentinels as soon as it answers again
    sentinels.wait_settled()

    assert relay.process.poll() is None                         # the same process all along
    assert {int(n) for n in re.findall(r"tally (\d+)$", relay.stdout, re.M)} == set(range(1, count + 1))
    letters = [fields for _, fields in sentinels.client().xrange(dlq_stream("events"))]
    assert sorted(fields[b"original_id"].decode() for fields in letters) == sorted(poisons)   # each exactly once
    log = relay.stderr
    assert log.count('msg="Redis unreachable; retrying with backoff"') >= 3
    assert 'level=ERROR msg="Cannot' not in log

    admin_env = {**env, "REDIS_STREAM": "events"}
    health = run_relay("health", env=admin_env)
    assert health.returncode == 0, health.stderr
    assert f"primary 127.0.0.1:{sentinels.primary().port})" in health.stdout
    listed = run_relay("dlq", "ls", "--json", env=admin_env)
    assert listed.returncode == 0, listed.stderr
    assert sorted(json.loads(line)["original_id"] for line in listed.stdout.splitlines()) == sorted(poisons)
    assert relay.stop() == 0


def dead_lettered(deployment):
    try:
        return deployment.client().xlen(dlq_stream("events"))
    except (redis.RedisError, StopIteration):
        return -1


def pending(deployment):
    try:
        return deployment.client().xpending("events", "relay")["pending"]
    except (redis.RedisError, StopIteration):
        return -1
