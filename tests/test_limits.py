"""Fleet-wide limits against a real redis-server: the GCRA script under worker processes,
the concurrency key's lease, failing open, and the dispatcher with the real limits.

Every assertion counts; the times checked are the Redis server's, returned by the script.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from fractions import Fraction

import gevent
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from relay.durations import MILLISECOND, SECOND
from relay.functions import parse_template
from relay.functions.template import RateLimit
from relay.runtime.invocation import Outcome
from relay.stream.keys import StreamAddress, concurrency_key, rate_key
from relay.stream.limits import (
    DIGEST_LENGTH,
    Blocked,
    FleetLimits,
    KeyLeases,
    Limit,
    Passage,
    RateLimiter,
    burst,
    key_digest,
)
from tests.support.engine import Engine, function
from tests.support.redis_server import free_port
from tests.support.relay_process import ROOT

ADDRESS = StreamAddress("events", "relay", "worker-a")
OTHER = StreamAddress("events", "relay", "worker-b")
KEY = "relay:rate:test:fn"


def template(top):
    return parse_template(top + "runtime: python3.14\nevents:\n  - handler: app.handler\n    pattern: {kind: [x]}\n")


KEYED = template("concurrency_key: id\n")
RATED_AND_KEYED = template("rate_limit: 1/h\nconcurrency_key: id\n")


def lease_key(value, function="keyed"):
    return concurrency_key("events", "relay", function, key_digest(value))


def support(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "tests.support.fleet_limits", *map(str, args)], cwd=ROOT,
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def server_now(client):
    seconds, micros = client.time()
    return seconds * 1_000_000 + micros


# --- the GCRA script ------------------------------------------------------------------


@pytest.mark.parametrize(("count", "unit"), [(20, "s"), (120, "m")])
def test_three_worker_processes_together_start_at_most_the_rate(redis_server, redis_client, count, unit):
    rate = RateLimit(count=count, unit=unit)
    callers = [support("take", redis_server.port, KEY, count, unit) for _ in range(3)]
    assert [caller.stdout.readline().strip() for caller in callers] == ["ready"] * 3
    until = server_now(redis_client) + 3 * 1_000_000
    for caller in callers:
        caller.stdin.write(f"{until}\n")
        caller.stdin.flush()
    admitted = []
    for caller in callers:
        out, _ = caller.communicate(timeout=60)
        assert caller.returncode == 0
        admitted.append(json.loads(out))
    times = sorted(moment for each in admitted for moment in each)

    n, period, allowed = rate.count, rate.period // 1000, burst(rate)   # period in µs, like the times
    per_second = Fraction(n * 1_000_000, period)
    for i in range(len(times)):
        for j in range(i, len(times)):
            window, started = times[j] - times[i], j - i + 1
            assert started <= allowed + window * n // period            # GCRA's own bound
            assert started <= per_second * (Fraction(window, 1_000_000) + 1)   # rate × (T + 1)

    span = times[-1] - times[0]
    assert allowed + span * n // period - 1 <= len(times) <= allowed + span * n // period
    assert span >= 2 * 1_000_000                                      # a long run, not only the burst


@pytest.mark.parametrize(("count", "unit", "allowed"), [(20, "s", 20), (120, "m", 2), (30, "m", 1), (7200, "h", 2),
                                                        (1, "h", 1)])
def test_after_a_quiet_time_at_most_one_seconds_worth_starts_at_once(redis_client, count, unit, allowed):
    limiter, rate = RateLimiter(redis_client), RateLimit(count=count, unit=unit)
    assert burst(rate) == allowed
    permits = [limiter.take(KEY, rate) for _ in range(allowed + 1)]
    assert [permit.admitted for permit in permits] == [True] * allowed + [False]
    interval = rate.period // 1000 / count
    assert 0 < permits[-1].wait <= interval


def test_a_refusal_takes_nothing_and_the_key_expires_when_idle(redis_client):
    limiter, rate = RateLimiter(redis_client), RateLimit(count=1, unit="m")
    assert limiter.take(KEY, rate).admitted
    stored = redis_client.get(KEY)
    refused = [limiter.take(KEY, rate) for _ in range(5)]
    assert not any(permit.admitted for permit in refused) and redis_client.get(KEY) == stored
    assert refused[-1].wait <= refused[0].wait <= 60 * 1_000_000
    assert 0 < redis_client.pttl(KEY) <= 60_001


@pytest.mark.parametrize("stored", [b"garbage", b"12:", b"-5:0", b"1:99999999"])
def test_a_value_the_script_never_writes_counts_as_none(redis_client, stored):
    redis_client.set(KEY, stored)
    assert RateLimiter(redis_client).take(KEY, RateLimit(count=1, unit="h")).admitted


def test_a_time_far_ahead_holds_one_interval_at_most(redis_client):
    """A tampered value, or a server clock that went back, cannot hold a function for ever."""
    redis_client.set(KEY, b"99999999999999999:0")
    rate = RateLimit(count=20, unit="s")
    permit = RateLimiter(redis_client).take(KEY, rate)
    assert not permit.admitted and 0 < permit.wait <= 50_000


def test_the_rate_key_is_named_under_the_stream_and_group():
    assert rate_key("my:stream", "g 1", "orders") == "relay:rate:my%3Astream:g%201:orders"
    assert lease_key("user_1").startswith("relay:concurrency:events:relay:keyed:")
    assert len(lease_key("x" * 100_000)) == len(lease_key(1))


# --- concurrency key values ---------------------------------------------------------------


def test_key_values_compare_as_patterns_do():
    assert key_digest(1) == key_digest(1.0) == key_digest(1.0 * 1) != key_digest("1") != key_digest(True)
    assert key_digest(0) == key_digest(-0.0) and key_digest(0.5) != key_digest(0)
    assert key_digest(10**400) != key_digest(10**400 + 1)            # no digit limit
    assert key_digest("\udc80") != key_digest("\udc81")             # a lone surrogate from JSON
    assert len({key_digest(value) for value in ("a", "b", 2, 2.5, False, True)}) == 6
    assert all(len(key_digest(value)) == DIGEST_LENGTH for value in ("", "x" * 10**6, 1, float("nan")))


# --- the lease ------------------------------------------------------------------------


def test_a_key_is_held_by_one_invocation_at_a_time(redis_client):
    first, second = FleetLimits(redis_client, ADDRESS), FleetLimits(redis_client, OTHER)
    held = first.enter("keyed", KEYED, {"id": "user_1"}, 6 * SECOND)
    assert isinstance(held, Passage) and held.lease is not None
    assert second.enter("keyed", KEYED, {"id": "user_1"}, 6 * SECOND) == Blocked(Limit.KEY, 0.1)
    assert first.enter("keyed", KEYED, {"id": "user_1"}, 6 * SECOND) == Blocked(Limit.KEY, 0.1)
    other = second.enter("keyed", KEYED, {"id": "user_2"}, 6 * SECOND)
    assert isinstance(other, Passage) and other.lease is not None
    assert redis_client.get(lease_key("user_1")).decode().startswith("worker-a/")
    assert 36_000 - 1000 < redis_client.pttl(lease_key("user_1")) <= 36_000      # the timeout + 30 s
    first.leave(held)
    assert redis_client.exists(lease_key("user_1")) == 0
    again = second.enter("keyed", KEYED, {"id": "user_1"}, 6 * SECOND)
    assert isinstance(again, Passage) and again.lease is not None
    for passage in (other, again):
        second.leave(passage)
    assert redis_client.keys("relay:concurrency:*") == []


@pytest.mark.parametrize("event", [{}, {"id": None}, {"id": [1]}, {"id": {"a": 1}}, None])
def test_an_event_without_a_key_value_runs_unkeyed(redis_client, event):
    limits = FleetLimits(redis_client, ADDRESS)
    passages = [limits.enter("keyed", KEYED, event, SECOND) for _ in range(2)]
    assert all(isinstance(passage, Passage) and passage.lease is None for passage in passages)
    assert redis_client.keys("*") == []


def test_a_held_lease_is_renewed_past_its_ttl(redis_client):
    limits = FleetLimits(redis_client, ADDRESS, lease_margin=600 * MILLISECOND)    # TTL 600 ms, renewed every 200
    held = limits.enter("keyed", KEYED, {"id": 7}, 0)
    token = held.lease.token
    gevent.sleep(2.0)
    assert redis_client.get(lease_key(7)).decode() == token
    assert isinstance(FleetLimits(redis_client, OTHER).enter("keyed", KEYED, {"id": 7.0}, 0), Blocked)
    limits.leave(held)
    assert redis_client.exists(lease_key(7)) == 0
    gevent.sleep(0.5)                                          # the keeper has stopped: nothing comes back
    assert redis_client.exists(lease_key(7)) == 0


def test_a_release_never_removes_another_holders_lease(redis_client):
    limits = FleetLimits(redis_client, ADDRESS, lease_margin=60 * SECOND)
    held = limits.enter("keyed", KEYED, {"id": "x"}, 0)
    redis_client.set(lease_key("x"), "worker-b/other")       # lost (expired) and taken meanwhile
    assert not KeyLeases(redis_client, "worker-a").renew(lease_key("x"), held.lease.token, 1000)
    limits.leave(held)
    assert redis_client.get(lease_key("x")) == b"worker-b/other"


def test_a_lease_renewed_by_a_live_worker_is_recovered_after_it_is_killed(redis_server, redis_client):
    holder = support("hold", redis_server.port, "user_9", 1500)       # TTL 1.5 s, renewed every 0.5 s
    try:
        assert holder.stdout.readline().strip() == "held"
        token = redis_client.get(lease_key("user_9"))
        limits = FleetLimits(redis_client, ADDRESS)
        assert isinstance(limits.enter("keyed", KEYED, {"id": "user_9"}, SECOND), Blocked)
        time.sleep(4.0)                                                 # more than two TTLs: renewed
        assert redis_client.get(lease_key("user_9")) == token
        assert isinstance(limits.enter("keyed", KEYED, {"id": "user_9"}, SECOND), Blocked)
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        deadline = time.monotonic() + 15
        passage = limits.enter("keyed", KEYED, {"id": "user_9"}, SECOND)
        while isinstance(passage, Blocked) and time.monotonic() < deadline:
            time.sleep(0.1)
            passage = limits.enter("keyed", KEYED, {"id": "user_9"}, SECOND)
        assert isinstance(passage, Passage) and passage.lease is not None
        assert redis_client.get(lease_key("user_9")).decode() == passage.lease.token != token.decode()
        limits.leave(passage)
    finally:
        holder.kill()
        holder.wait(10)


def test_a_key_taken_when_the_rate_refuses_is_given_back(redis_client):
    limits = FleetLimits(redis_client, ADDRESS)
    first = limits.enter("keyed", RATED_AND_KEYED, {"id": "a"}, SECOND)
    assert isinstance(first, Passage)
    limits.leave(first)
    refused = limits.enter("keyed", RATED_AND_KEYED, {"id": "a"}, SECOND)
    assert refused.limit is Limit.RATE and 3590 < refused.retry_in <= 3600
    assert redis_client.exists(lease_key("a")) == 0


# --- failing open ---------------------------------------------------------------------


def test_redis_unreachable_lets_invocations_run_and_warns_once_per_outage(redis_client, caplog):
    down = redis.Redis(port=free_port(), socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    limits = FleetLimits(down, ADDRESS)
    with caplog.at_level(logging.DEBUG, logger="relay.stream.limits"):
        for _ in range(3):
            passage = limits.enter("keyed", RATED_AND_KEYED, {"id": "a"}, SECOND)
            assert isinstance(passage, Passage) and passage.lease is None
        limits.rates, limits.leases = RateLimiter(redis_client), KeyLeases(redis_client, "worker-a")
        back = limits.enter("keyed", RATED_AND_KEYED, {"id": "a"}, SECOND)
        assert isinstance(back, Passage) and back.lease is not None
        limits.rates = RateLimiter(down)
        assert isinstance(limits.enter("keyed", RATED_AND_KEYED, {"id": "b"}, SECOND), Passage)
    levels = [(record.levelname, record.getMessage()) for record in caplog.records if record.levelno >= logging.INFO]
    warning = "Cannot reach Redis for rate limits and concurrency keys; invocations run without them"
    assert levels == [("WARNING", warning), ("INFO", "Redis reachable again; rate limits and concurrency keys apply"),
                      ("WARNING", warning)]
    down.close()


# --- the dispatcher with the real limits --------------------------------------------------


class OverlapExecutor:
    """Runs each invocation for 0.1 s (yielding to the hub) and records how many run at once per key."""

    def __init__(self):
        self.running = {}
        self.most = {}
        self.calls = []

    def run(self, invocation):
        key = json.loads(invocation.payload)["new_image"]["id"]
        self.calls.append(key)
        self.running[key] = self.running.get(key, 0) + 1
        self.most[key] = max(self.most.get(key, 0), self.running[key])
        self.most["all"] = max(self.most.get("all", 0), sum(self.running.values()))
        gevent.sleep(0.1)
        self.running[key] -= 1
        return Outcome(ok=True, exit_code=0, duration=0.1)


def test_events_of_one_entity_never_run_at_once_and_others_do(redis_client):
    keyed = function("keyed", """
runtime: python3.14
concurrency: 8
concurrency_key: new_image.id
events:
  - handler: app.handler
    pattern: {kind: [keyed]}
""")
    engine = Engine(redis_client, [keyed], limits=None, slot_wait=10)
    executor = engine.dispatcher.executor = OverlapExecutor()
    for key in ("a", "a", "b", "a", "b"):
        engine.publish({"kind": "keyed", "new_image": {"id": key}})
    engine.read()
    assert sorted(executor.calls) == ["a", "a", "a", "b", "b"] and engine.pending() == 0
    assert executor.most["a"] == 1 and executor.most["b"] == 1 and executor.most["all"] == 2
    assert value_of(engine.metrics.concurrency_key_waits, "keyed") == 3
    assert redis_client.keys("relay:concurrency:*") == []


def value_of(metric, *labels):
    return metric.labels(*labels)._value.get()
