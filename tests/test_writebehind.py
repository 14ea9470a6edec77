"""Bookkeeping that met a Redis outage is written when Redis answers again (relay.stream.writebehind).

The engine tests kill a real redis-server (append-only file, fsync on every
write) while a handler runs, start it again from its file, and check that
what the dispatch could not write lands without a reclaim: no handler runs
twice. The unit tests drive one WriteBehind against a real Redis.
"""

from dataclasses import replace

import pytest

from relay.stream import markers
from relay.stream.keys import StreamAddress, invocation_key
from relay.stream.writebehind import Counters, WriteBehind
from tests.support.engine import AUDIT, CONSUMER, GROUP, ORDERS, STREAM, Engine, Result, value
from tests.support.redis_server import RedisServer

MINUTE = 60 * 10**9
ADDRESS = StreamAddress(STREAM, GROUP, CONSUMER)


@pytest.fixture
def durable_redis(tmp_path):
    """A redis-server of its own that a test may SIGKILL and start again from its append-only file."""
    server = RedisServer(tmp_path)
    server.extra_args = ["--appendonly", "yes", "--appendfsync", "always"]
    server.start()
    yield server
    server.stop()


def relay_client(server):
    """A client that fails at once, as Relay's does (relay.clients: redis-py's own retries off)."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis(host="127.0.0.1", port=server.port, retry=Retry(NoBackoff(), 0))


def written_once_redis_answers(write_behind, timeout=30):
    """Flush until Redis answers, as the write-behind's loop does: a restarted server loads its
    append-only file first, answering LOADING (a connection error to redis-py) meanwhile."""
    import time

    deadline = time.monotonic() + timeout
    while not write_behind.flush():
        assert time.monotonic() < deadline, "Redis did not answer"
        time.sleep(0.1)
    return True


def wait_loaded(client, timeout=30):
    """Until a restarted server has loaded its append-only file."""
    import time

    deadline = time.monotonic() + timeout
    while client.info("persistence")["loading"]:
        assert time.monotonic() < deadline, "Redis did not load its append-only file"
        time.sleep(0.1)


def kill(server):
    server.process.kill()
    server.process.wait(10)


class OutageDuring:
    """An executor step: the handler's run SIGKILLs Redis, then succeeds (or answers *result*)."""

    def __init__(self, server, result=None):
        self.server = server
        self.result = result or Result(ok=True)

    def __call__(self):
        kill(self.server)
        return self.result


def run_with_outage(engine, handler, server, result=None):
    """Program *handler* to kill Redis while it runs."""
    original = engine.executor.run

    def run(invocation):
        if invocation.handler == handler and server.process.poll() is None:
            engine.executor.calls.append(invocation)
            return OutageDuring(server, result)()
        return original(invocation)

    engine.executor.run = run


def test_an_acknowledgment_that_met_an_outage_is_written_when_redis_is_back(durable_redis):
    client = relay_client(durable_redis)
    engine = Engine(client, [AUDIT])
    message_id = engine.publish({"kind": "refund"})
    run_with_outage(engine, "audit.handler", durable_redis)
    engine.read()
    assert engine.write_behind.owed[message_id].ack
    assert not engine.write_behind.flush()        # Redis still down: kept
    durable_redis.start()
    assert written_once_redis_answers(engine.write_behind)
    assert engine.pending() == 0 and engine.state(message_id) == {}
    assert [run.entry for run in engine.runs()] == [message_id]      # its run record went with it
    assert value(engine.metrics.bookkeeping_deferred, "ack") == 1 and value(engine.metrics.runs_unrecorded) == 0
    engine.redeliver(after=MINUTE)
    assert engine.handlers_called() == [("audit", "audit.handler")]


def test_a_completion_marker_that_met_an_outage_keeps_the_handler_from_running_again(durable_redis):
    client = relay_client(durable_redis)
    engine = Engine(client, [ORDERS])
    message_id = engine.publish({"kind": "order"})
    # first.handler kills Redis and succeeds; its marker, second.handler's claim and failure cannot be written
    run_with_outage(engine, "first.handler", durable_redis)
    engine.executor.program("second.handler", Result(ok=False, exit_code=1))
    engine.read()
    assert [mark.field for mark in engine.write_behind.owed[message_id].marks] == [
        "orders/first.handler", "orders/second.handler"]
    durable_redis.start()
    assert written_once_redis_answers(engine.write_behind)
    state = engine.state(message_id)
    assert state["orders/first.handler"] == "ok"
    assert markers.parse(state["orders/second.handler"]).kind == markers.RUNNING   # its claim, written late
    engine.redeliver(after=MINUTE)      # second.handler's claim is past its deadline: it is exhausted
    assert engine.handlers_called() == [("orders", "first.handler"), ("orders", "second.handler")]
    assert engine.pending() == 0 and [entry["original_id"] for entry in engine.dlq()] == [message_id]


def write_behind(client, clock=None, capacity=100, reclaim_after=60.0):
    counts = {"late": 0, "lost": 0}
    counters = Counters(late=lambda: counts.__setitem__("late", counts["late"] + 1),
                        lost=lambda: counts.__setitem__("lost", counts["lost"] + 1))
    owed = WriteBehind(client, ADDRESS, reclaim_after=reclaim_after, capacity=capacity, counters=counters,
                       **({"clock": clock} if clock else {}))
    return owed, counts


def pending_entry(client):
    client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    message_id = client.xadd(STREAM, {"event": "{}"}).decode()
    client.xreadgroup(GROUP, CONSUMER, {STREAM: ">"})
    return message_id


def test_a_marker_owed_for_an_entry_acknowledged_meanwhile_is_never_written(redis_client):
    message_id = pending_entry(redis_client)
    owed, _ = write_behind(redis_client)
    owed.complete(message_id, "audit/audit.handler")
    redis_client.xack(STREAM, GROUP, message_id)          # another worker settled it
    assert owed.flush()
    assert redis_client.exists(invocation_key(STREAM, GROUP, message_id)) == 0   # no stale state left


def test_an_owed_claim_never_overwrites_what_the_attempt_wrote_since(redis_client):
    message_id = pending_entry(redis_client)
    key = invocation_key(STREAM, GROUP, message_id)
    owed, _ = write_behind(redis_client)
    owed.claim(message_id, "audit/audit.handler", None, markers.running(10**19, 1))
    owed.claim(message_id, "orders/first.handler", b"next_attempt_at:1#1", markers.running(10**19, 2))
    redis_client.hset(key, mapping={"audit/audit.handler": "ok", "orders/first.handler": "next_attempt_at:1#1"})
    assert owed.flush()
    assert redis_client.hget(key, "audit/audit.handler") == b"ok"
    assert markers.parse(redis_client.hget(key, "orders/first.handler")).attempts == 2


def test_a_write_that_lands_after_the_reclaim_idle_time_is_counted_late(redis_client):
    message_id = pending_entry(redis_client)
    now = [100.0]
    owed, counts = write_behind(redis_client, clock=lambda: now[0])
    owed.acknowledge(message_id)
    now[0] += 61
    assert owed.flush() and counts["late"] == 1 and redis_client.xpending(STREAM, GROUP)["pending"] == 0


def test_past_its_capacity_the_oldest_is_given_up_and_counted(redis_client):
    owed, counts = write_behind(redis_client, capacity=2)
    for message_id in ("1-1", "1-2", "1-3"):
        owed.acknowledge(message_id)
    assert list(owed.owed) == ["1-2", "1-3"] and counts["lost"] == 1


def test_a_write_that_went_through_drops_what_was_owed_for_its_field(redis_client):
    owed, _ = write_behind(redis_client)
    owed.claim("1-1", "audit/audit.handler", None, markers.running(10**19, 1))
    owed.written("1-1", "audit/audit.handler", markers.OK)
    assert owed.owed == {}
    owed.complete("1-2", "orders/first.handler")
    owed.acknowledge("1-2")
    owed.complete("1-2", "orders/second.handler")      # moot: the acknowledgment clears the state
    assert owed.owed["1-2"].ack and owed.owed["1-2"].marks == ()


def test_after_a_failover_the_latest_acknowledgments_are_sent_again(tmp_path):
    """The primary acknowledged an entry its replica never got, then died: the replica promoted in its
    place holds the entry pending, until the worker's write-behind sends the XACK again."""
    from redis.sentinel import Sentinel

    from tests.support.sentinel import SentinelRedis

    deployment = SentinelRedis(tmp_path, persistent=True).start()
    try:
        sentinel = Sentinel([node.address for node in deployment.sentinels], socket_timeout=1.0)
        client = sentinel.master_for(deployment.master, socket_timeout=2.0)
        message_id = pending_entry(client)
        assert client.wait(1, 5000) == 1                         # the replica has the delivery
        owed, _ = write_behind(client)
        replica, primary = deployment.replica(), deployment.primary()
        replica.freeze()
        deployment.client(primary).client_kill_filter(_type="replica")   # nothing more reaches the replica
        client.xack(STREAM, GROUP, message_id)                   # as the Settler does, then tells the write-behind
        owed.settled(message_id)
        primary.kill()
        replica.thaw()
        deployment.wait_failover(primary)
        promoted = deployment.client(replica)
        assert promoted.xpending(STREAM, GROUP)["pending"] == 1  # the acknowledgment was lost with the primary
        wait_answered(client)                                    # the client finds the new primary
        assert owed.catch_up()
        assert promoted.xpending(STREAM, GROUP)["pending"] == 0
    finally:
        deployment.stop()


def wait_answered(client, timeout=30):
    import time

    import redis

    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.ping()
        except redis.RedisError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_a_run_on_an_entry_another_worker_acknowledged_meanwhile_is_counted_as_ran_twice(redis_client, caplog):
    engine = Engine(redis_client, [AUDIT])
    message_id = engine.publish({"kind": "refund"})
    original = engine.executor.run

    def run(invocation):
        redis_client.xack(STREAM, GROUP, message_id)       # the worker it was reclaimed from settled it
        return original(invocation)

    engine.executor.run = run
    engine.read()
    assert value(engine.metrics.duplicate_runs, "audit") == 1
    assert "Entry acknowledged by another worker while it ran here: its handlers ran twice" in caplog.messages
    engine.executor.run = original
    engine.publish({"kind": "refund"})
    engine.read()
    assert value(engine.metrics.duplicate_runs, "audit") == 1


def test_records_owed_with_an_acknowledgment_that_had_landed_are_not_written_twice(redis_client):
    from relay.stream.keys import runs_stream

    message_id = pending_entry(redis_client)
    owed, _ = write_behind(redis_client)
    owed.runs_max_entries = 1000
    record = {"kind": "run", "entry": message_id, "status": "succeeded"}
    redis_client.xack(STREAM, GROUP, message_id)          # the acknowledgment had landed; its reply was lost
    owed.acknowledge(message_id, records=[record])
    assert owed.flush() and redis_client.xlen(runs_stream(STREAM)) == 0
    other = redis_client.xadd(STREAM, {"event": "{}"}).decode()
    redis_client.xreadgroup(GROUP, CONSUMER, {STREAM: ">"})
    owed.acknowledge(other, records=[record])
    assert owed.flush() and redis_client.xlen(runs_stream(STREAM)) == 1 and owed.record_bytes == 0


def test_records_past_the_budget_are_counted_not_kept(redis_client, monkeypatch):
    from relay.stream import writebehind

    monkeypatch.setattr(writebehind, "RECORD_BYTES", 100)
    unrecorded = []
    owed = WriteBehind(redis_client, ADDRESS, reclaim_after=60, runs_max_entries=1000,
                       counters=Counters(unrecorded=unrecorded.append))
    owed.acknowledge("1-1", records=[{"stdout": "x" * 60}])
    owed.acknowledge("1-2", records=[{"stdout": "y" * 60}, {"stdout": "z"}])
    assert len(owed.owed["1-1"].records) == 1 and owed.owed["1-2"].records == () and unrecorded == [2]


def test_a_worker_killed_before_redis_answered_writes_what_it_owed_when_it_starts_again(durable_redis, tmp_path):
    journal = tmp_path / "owed-worker-1.jsonl"
    client = relay_client(durable_redis)
    engine = Engine(client, [AUDIT], journal=journal)
    message_id = engine.publish({"kind": "refund"})
    run_with_outage(engine, "audit.handler", durable_redis)
    engine.read()
    assert journal.stat().st_size > 0                    # then the worker is SIGKILLed: its memory is gone
    durable_redis.start()
    wait_loaded(client)
    restarted = Engine(client, [AUDIT], journal=journal)
    restarted.write_behind.recover()
    assert list(restarted.write_behind.owed) == [message_id]
    assert written_once_redis_answers(restarted.write_behind)
    assert restarted.pending() == 0 and restarted.state(message_id) == {} and journal.stat().st_size == 0
    assert [(run.entry, run.function) for run in restarted.runs()] == [(message_id, "audit")]


def test_what_is_still_owed_at_stop_stays_in_the_journal_for_the_next_start(redis_client, tmp_path, monkeypatch):
    from relay.stream.journal import Journal

    journal = Journal(tmp_path / "owed.jsonl")
    owed = WriteBehind(redis_client, ADDRESS, reclaim_after=60, grace=0, journal=journal)
    owed.claim("1-1", "audit/audit.handler", b"\xff\x00not text", markers.running(10**19, 2))
    owed.complete("1-1", "orders/first.handler")
    owed.acknowledge("1-2", records=[{"kind": "run", "stdout": "caf\u00e9 \udcff"}])
    monkeypatch.setattr(owed, "flush", lambda: False)     # Redis never answers
    owed.stop()
    owed.loop()
    assert Journal(journal.path).load() == {
        "1-1": replace(owed.owed["1-1"], since=0.0), "1-2": replace(owed.owed["1-2"], since=0.0)}


def test_a_journal_that_cannot_be_written_leaves_the_write_behind_in_memory(redis_client, tmp_path, caplog):
    from relay.stream.journal import Journal

    (tmp_path / "owed.jsonl").mkdir()                     # not a file it can open
    owed = WriteBehind(redis_client, ADDRESS, reclaim_after=60, journal=Journal(tmp_path / "owed.jsonl"))
    owed.acknowledge("1-1")
    owed.acknowledge("1-2")
    assert list(owed.owed) == ["1-1", "1-2"]
    assert caplog.messages.count(
        "Cannot write the write-behind's journal; what is owed to Redis is kept in memory only") == 1


def test_unreadable_journal_lines_are_skipped(redis_client, tmp_path):
    from relay.stream.journal import Journal

    path = tmp_path / "owed.jsonl"
    path.write_bytes(b'{"id":"1-1","ack":true,"clear":true,"marks":[]}\nnot json\n{"id": 3}\n\xff\xfe\n')
    assert list(Journal(path).load()) == ["1-1"]
