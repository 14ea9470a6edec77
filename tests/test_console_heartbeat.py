"""Worker heartbeats (relay.console.heartbeat) against a real redis-server."""

import json
import logging
import threading

import redis

from relay.console.heartbeat import FunctionState, Heartbeat, Pulse, read_workers
from relay.stream.keys import HEARTBEAT_TTL_S, worker_key, workers_key


class Clock:
    def __init__(self, now=1_700_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


def pulse():
    return Pulse(functions=[FunctionState("orders", ready=True, outcome="succeeded",
                                          rules=(("app.handler", '{"type": ["order"]}'),),
                                          schedules=(("app.nightly", "0 3 * * *", "UTC"),)),
                            FunctionState("broken", ready=False, outcome="failed", error="pip failed: <b>")],
                 warm_containers=2, in_flight=3, buffered=4)


def test_a_beat_is_read_back_with_its_functions(redis_client):
    clock = Clock()
    beat = Heartbeat(redis_client, "events", host="w1", pid=42, version="0.1.0", pulse=pulse, clock=clock)
    clock.now += 30
    beat.beat()
    [worker] = read_workers(redis_client, "events")
    assert (worker.worker, worker.host, worker.pid, worker.version) == ("w1/42", "w1", "42", "0.1.0")
    assert (worker.functions_loaded, worker.warm_containers, worker.in_flight, worker.buffered) == (2, 2, 3, 4)
    assert worker.uptime_s() == 30
    assert worker.functions[0].rules == (("app.handler", '{"type": ["order"]}'),)
    assert worker.functions[0].schedules == (("app.nightly", "0 3 * * *", "UTC"),)
    assert worker.functions[1].error == "pip failed: <b>"
    now_ms = int(clock.now * 1000)
    assert not worker.gone(now_ms)
    assert not worker.gone(now_ms + 15_000)
    assert worker.gone(now_ms + 15_001)       # silent for three beats
    assert 0 < redis_client.ttl(worker_key("events", "w1/42")) <= HEARTBEAT_TTL_S
    assert 0 < redis_client.ttl(workers_key("events")) <= HEARTBEAT_TTL_S


def test_a_worker_silent_for_an_hour_leaves_the_set(redis_client):
    clock = Clock()
    old = Heartbeat(redis_client, "events", host="old", pid=1, version="0.1.0", pulse=Pulse, clock=clock)
    old.beat()
    clock.now += HEARTBEAT_TTL_S + 1
    Heartbeat(redis_client, "events", host="new", pid=2, version="0.1.0", pulse=Pulse, clock=clock).beat()
    assert [worker.worker for worker in read_workers(redis_client, "events")] == ["new/2"]


def test_the_loop_beats_then_says_it_stopped(redis_client):
    beat = Heartbeat(redis_client, "events", host="w", pid=7, version="0.1.0", pulse=pulse, interval=0.05)
    thread = threading.Thread(target=beat.loop)
    thread.start()
    try:
        deadline = threading.Event()
        while not redis_client.exists(worker_key("events", "w/7")):
            deadline.wait(0.01)
    finally:
        beat.stop()
        thread.join(5)
    [worker] = read_workers(redis_client, "events")
    assert worker.stopped and worker.gone(worker.beat_ms)


def test_hostile_heartbeat_fields_are_read_without_failing(redis_client):
    redis_client.zadd(workers_key("events"), {"x/1": 1})
    redis_client.hset(worker_key("events", "x/1"), mapping={
        "beat": "٣", "pid": "<script>", "functions": json.dumps([1, {"name": 5, "rules": "x"}, {"name": "ok"}])})
    [worker] = read_workers(redis_client, "events")
    assert worker.beat_ms is None and worker.gone(0)
    assert [state.name for state in worker.functions] == ["", "ok"]
    redis_client.hset(worker_key("events", "x/1"), "functions", "{not json")
    assert read_workers(redis_client, "events")[0].functions == ()


def test_redis_down_is_one_warning_and_the_loop_goes_on(caplog):
    client = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    beat = Heartbeat(client, "events", host="w", pid=1, version="0.1.0", pulse=Pulse, interval=0.01)
    calls = []

    def counted():
        calls.append(1)
        if len(calls) == 3:
            beat.stop()
        return Pulse()

    beat.pulse = counted
    with caplog.at_level(logging.WARNING, "relay.console.heartbeat"):
        beat.loop()
    assert len(calls) >= 3
    assert len([record for record in caplog.records if record.levelno == logging.WARNING]) == 1
