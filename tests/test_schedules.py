"""Schedules: occurrence times across DST, identity, publish-if-new, and their dispatch."""

import json
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import gevent
import pytest

from relay.durations import MINUTE
from relay.live.catalog import Catalog
from relay.metrics.prometheus import Metrics
from relay.stream.deadletters import DeadLetters
from relay.stream.keys import dlq_stream
from relay.stream.schedules import Occurrence, Publisher, Scheduler, next_instant, parse_occurrence_id
from tests.support.engine import STREAM, Engine, Result, function, value


def occurrences(cron, zone, start, count):
    found, after = [], start
    for _ in range(count):
        after = next_instant(cron, zone, after)
        found.append(after)
    return found


def test_five_field_cron_in_utc():
    start = datetime(2026, 1, 1, 2, 59, 30, tzinfo=UTC)
    assert occurrences("0 3 * * *", "UTC", start, 2) == [datetime(2026, 1, 1, 3, tzinfo=UTC),
                                                         datetime(2026, 1, 2, 3, tzinfo=UTC)]
    assert next_instant("0 3 * * *", "UTC", datetime(2026, 1, 1, 3, tzinfo=UTC)) == datetime(2026, 1, 2, 3, tzinfo=UTC)


def test_six_field_cron_has_seconds_first():
    start = datetime(2026, 1, 1, 0, 0, 1, 500000, tzinfo=UTC)
    assert occurrences("*/2 * * * * *", "UTC", start, 3) == [
        datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC), datetime(2026, 1, 1, 0, 0, 4, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 0, 6, tzinfo=UTC)]
    assert next_instant("30 0 3 * * *", "UTC", start) == datetime(2026, 1, 1, 3, 0, 30, tzinfo=UTC)


def test_timezone_decides_when_not_identity():
    start = datetime(2026, 6, 1, tzinfo=UTC)
    rome = next_instant("0 8 * * 1-5", "Europe/Rome", start)
    assert rome == datetime(2026, 6, 1, 6, tzinfo=UTC)          # 08:00 CEST on Monday 1 June
    occurrence = Occurrence("reports", "jobs.report.handler", rome)
    assert occurrence.id == "schedule:reports:jobs.report.handler:2026-06-01T06:00:00Z"


@pytest.mark.parametrize(("day_start", "expected_local"), [
    # spring forward, 29 March 2026: 02:00-03:00 does not exist in Rome
    (datetime(2026, 3, 28, 23, tzinfo=UTC), ["00:30+01", "01:30+01", "03:30+02", "04:30+02"]),
    # fall back, 25 October 2026: 02:00-03:00 happens twice
    (datetime(2026, 10, 24, 22, tzinfo=UTC), ["00:30+02", "01:30+02", "02:30+02", "03:30+01", "04:30+01"]),
])
def test_rome_across_dst_changes_neither_skips_nor_doubles(day_start, expected_local):
    from zoneinfo import ZoneInfo

    hourly = occurrences("30 * * * *", "Europe/Rome", day_start, len(expected_local))
    local = [moment.astimezone(ZoneInfo("Europe/Rome")).strftime("%H:%M%z")[:-2] for moment in hourly]
    assert local == expected_local
    identities = [Occurrence("f", "h", moment).id for moment in hourly]
    assert len(set(identities)) == len(identities) and identities == sorted(identities)


@pytest.mark.parametrize("day", [datetime(2026, 3, 28, tzinfo=UTC), datetime(2026, 10, 24, tzinfo=UTC)])
def test_a_daily_job_in_the_changing_hour_fires_once_a_day(day):
    daily = occurrences("30 2 * * *", "Europe/Rome", day, 3)
    assert [moment.date() for moment in daily] == [day.date() + timedelta(days=offset) for offset in range(3)]


@pytest.mark.parametrize(("zone", "start"), [
    ("Europe/Rome", datetime(2026, 3, 28, tzinfo=UTC)), ("Europe/Rome", datetime(2026, 10, 24, tzinfo=UTC)),
    ("Australia/Sydney", datetime(2026, 4, 3, tzinfo=UTC)), ("Australia/Sydney", datetime(2026, 10, 2, tzinfo=UTC)),
    ("America/Sao_Paulo", datetime(2026, 1, 1, tzinfo=UTC)), ("UTC", datetime(2026, 1, 1, tzinfo=UTC)),
])
def test_every_fifteen_minutes_across_a_change_is_strictly_increasing(zone, start):
    moments = occurrences("*/15 * * * *", zone, start, 4 * 24 * 3)
    assert all(earlier < later for earlier, later in pairwise(moments))
    assert all(later - earlier <= timedelta(hours=1, minutes=15) for earlier, later in pairwise(moments))


def test_occurrence_id_round_trip():
    occurrence = Occurrence("jobs.v2", "jobs.cleanup.handler", datetime(2026, 9, 13, 3, tzinfo=UTC))
    assert occurrence.scheduled_at == "2026-09-13T03:00:00Z"
    assert parse_occurrence_id(occurrence.id) == ("jobs.v2", "jobs.cleanup.handler", "2026-09-13T03:00:00Z")
    assert json.loads(occurrence.payload) == {"source": "relay.schedule", "scheduled_at": "2026-09-13T03:00:00Z"}
    assert parse_occurrence_id("schedule:x") is None and parse_occurrence_id("other:a:b:c") is None


def test_publish_if_new_publishes_once(redis_client):
    metrics = Metrics()
    first, second = Publisher(redis_client, STREAM, metrics), Publisher(redis_client, STREAM, metrics)
    occurrence = Occurrence("cleanup", "jobs.cleanup.handler", datetime(2026, 9, 13, 3, tzinfo=UTC))
    assert first.publish(occurrence) is True
    assert second.publish(occurrence) is False
    ((_id, fields),) = redis_client.xrange(STREAM)
    assert fields == {b"event": occurrence.payload.encode(), b"schedule": occurrence.id.encode()}
    ttl = redis_client.ttl(f"relay:{occurrence.id}")
    assert 7 * 24 * 3600 - 10 < ttl <= 7 * 24 * 3600
    assert value(metrics.schedule_published) == 1 and value(metrics.schedule_duplicates) == 1


def test_publish_failure_is_counted(redis_client):
    metrics = Metrics()
    redis_client.set(STREAM, "not a stream")
    occurrence = Occurrence("cleanup", "jobs.cleanup.handler", datetime(2026, 9, 13, 3, tzinfo=UTC))
    assert Publisher(redis_client, STREAM, metrics).publish(occurrence) is None
    assert value(metrics.schedule_failures) == 1


TICKER = function("ticker", """
runtime: python3.14
schedules:
  - handler: jobs.tick.handler
    cron: "* * * * * *"
    timeout: 10s
""")


def test_two_schedulers_publish_each_occurrence_once(redis_client):
    metrics = Metrics()
    schedulers = [Scheduler(Catalog([TICKER]), Publisher(redis_client, STREAM, metrics), sync_interval=0.1)
                  for _ in range(2)]
    loops = [gevent.spawn(scheduler.loop) for scheduler in schedulers]
    gevent.sleep(3.2)
    for scheduler in schedulers:
        scheduler.stop()
    gevent.joinall(loops, timeout=5)
    ids = [fields[b"schedule"] for _id, fields in redis_client.xrange(STREAM)]
    assert 2 <= len(ids) <= 4 and len(set(ids)) == len(ids)
    assert value(metrics.schedule_published) == len(ids)
    assert value(metrics.schedule_duplicates) == len(ids)


def test_scheduler_follows_the_catalog(redis_client):
    catalog = Catalog([TICKER])
    scheduler = Scheduler(catalog, Publisher(redis_client, STREAM, Metrics()), sync_interval=0.05)
    loop = gevent.spawn(scheduler.loop)
    gevent.sleep(0.2)
    assert list(scheduler.jobs) == [("ticker", "jobs.tick.handler", "* * * * * *", "UTC")]
    catalog.remove("ticker")
    gevent.sleep(0.2)
    assert scheduler.jobs == {}
    scheduler.stop()
    loop.join(timeout=5)


def test_a_scheduled_entry_runs_exactly_its_handler(redis_client):
    engine = Engine(redis_client, [TICKER])
    occurrence = Occurrence("ticker", "jobs.tick.handler", datetime(2026, 9, 13, 3, tzinfo=UTC))
    Publisher(redis_client, STREAM, engine.metrics).publish(occurrence)
    engine.read()
    (call,) = engine.executor.calls
    assert (call.function, call.handler, call.timeout) == ("ticker", "jobs.tick.handler", 10 * 10**9)
    assert json.loads(call.payload) == {"source": "relay.schedule", "scheduled_at": "2026-09-13T03:00:00Z"}
    assert engine.pending() == 0
    assert value(engine.metrics.events_received) == 0 and value(engine.metrics.events_processed) == 0
    assert value(engine.metrics.handler_success) == 1


def test_an_occurrence_of_a_removed_schedule_is_acked_as_obsolete(redis_client):
    engine = Engine(redis_client, [TICKER])
    Publisher(redis_client, STREAM, engine.metrics).publish(
        Occurrence("ticker", "jobs.gone.handler", datetime(2026, 9, 13, 3, tzinfo=UTC)))
    Publisher(redis_client, STREAM, engine.metrics).publish(
        Occurrence("vanished", "jobs.tick.handler", datetime(2026, 9, 13, 3, tzinfo=UTC)))
    engine.read()
    assert engine.executor.calls == [] and engine.pending() == 0 and engine.dlq() == []


# --- only the entry the scheduler published runs -------------------------------------------------------

NOT_PUBLISHED = "the 'schedule' field was not written by Relay's scheduler: "


def forge(client, occurrence_id, event):
    """A producer's entry with a hand-written 'schedule' field; its id. *event* is a dict, or the field's text."""
    text = event if isinstance(event, str) else json.dumps(event)
    return client.xadd(STREAM, {"event": text, "schedule": occurrence_id}).decode()


def test_publishing_records_the_entry_id_in_the_dedup_key(redis_client):
    occurrence = Occurrence("cleanup", "jobs.cleanup.handler", datetime(2026, 9, 13, 3, tzinfo=UTC))
    assert Publisher(redis_client, STREAM, Metrics()).publish(occurrence) is True
    ((entry_id, _fields),) = redis_client.xrange(STREAM)
    assert redis_client.get(f"relay:{occurrence.id}") == entry_id


def test_a_failed_publish_leaves_no_dedup_key(redis_client):
    redis_client.set(STREAM, "not a stream")
    occurrence = Occurrence("cleanup", "jobs.cleanup.handler", datetime(2026, 9, 13, 3, tzinfo=UTC))
    assert Publisher(redis_client, STREAM, Metrics()).publish(occurrence) is None
    assert not redis_client.exists(f"relay:{occurrence.id}")      # the next worker's try still publishes it


def test_hand_written_schedule_fields_are_dead_lettered_unrun_and_the_real_occurrence_still_runs(redis_client):
    engine = Engine(redis_client, [TICKER])
    publisher = Publisher(redis_client, STREAM, engine.metrics)
    past = Occurrence("ticker", "jobs.tick.handler", datetime(2026, 9, 13, 3, tzinfo=UTC))
    future = Occurrence("ticker", "jobs.tick.handler", datetime(2026, 9, 13, 4, tzinfo=UTC))
    publisher.publish(past)
    engine.read()                                           # the real past occurrence runs
    [real] = engine.executor.calls
    past_entry = redis_client.get(f"relay:{past.id}").decode()
    assert real.message_id == past_entry
    forged_past = forge(redis_client, past.id, {"source": "producer", "n": 1})
    forged_copy = forge(redis_client, past.id, past.payload)    # even its very payload
    forged_future = forge(redis_client, future.id, {"source": "producer", "n": 2})
    engine.read()
    assert engine.executor.calls == [real] and engine.pending() == 0
    letters = {entry["original_id"]: entry for entry in engine.dlq()}
    assert set(letters) == {forged_past, forged_copy, forged_future}
    assert letters[forged_past]["reason"] == letters[forged_copy]["reason"] == (
        f"{NOT_PUBLISHED}{past.id!r} was published as entry {past_entry}")
    assert letters[forged_future]["reason"] == (
        f"{NOT_PUBLISHED}there is no record of {future.id!r} being published (records are kept 7 days)")
    assert {entry["attempts"] for entry in letters.values()} == {"0"}
    assert not any("schedule" in entry for entry in letters.values())      # a redrive sends back an event
    assert value(engine.metrics.dlq_entries) == 3 and value(engine.metrics.handler_failure) == 0
    assert engine.state(forged_future) == {}

    assert publisher.publish(future) is True                # the forged one claimed nothing
    engine.read()
    [_real, later] = engine.executor.calls
    assert json.loads(later.payload)["scheduled_at"] == "2026-09-13T04:00:00Z"
    assert (later.attempt, later.idempotency_key) == (1, future.id)
    assert engine.pending() == 0 and len(engine.dlq()) == 3


def test_an_occurrence_an_earlier_relay_published_runs_once_with_its_own_payload(redis_client):
    """Before it recorded entry ids, the scheduler set the dedup key to 1: such an occurrence, still
    pending at an upgrade, runs if its event is the occurrence's own, and its entry then takes the key."""
    engine = Engine(redis_client, [TICKER])
    occurrence = Occurrence("ticker", "jobs.tick.handler", datetime(2026, 9, 13, 3, tzinfo=UTC))
    other = Occurrence("ticker", "jobs.tick.handler", datetime(2026, 9, 13, 4, tzinfo=UTC))
    for earlier in (occurrence, other):
        redis_client.set(f"relay:{earlier.id}", "1", ex=3600)
    published = forge(redis_client, occurrence.id, occurrence.payload)     # as the old script wrote it
    engine.read()
    [call] = engine.executor.calls
    assert (call.message_id, call.idempotency_key) == (published, occurrence.id)
    assert redis_client.get(f"relay:{occurrence.id}").decode() == published
    assert 3500 < redis_client.ttl(f"relay:{occurrence.id}") <= 3600

    again = forge(redis_client, occurrence.id, occurrence.payload)
    changed = forge(redis_client, other.id, {"source": "producer"})
    engine.read()
    assert engine.executor.calls == [call] and engine.pending() == 0
    reasons = {entry["original_id"]: entry["reason"] for entry in engine.dlq()}
    assert reasons == {again: f"{NOT_PUBLISHED}{occurrence.id!r} was published as entry {published}",
                       changed: f"{NOT_PUBLISHED}the event is not the one published for {other.id!r}"}
    assert redis_client.get(f"relay:{other.id}") == b"1"


def test_an_occurrence_is_left_pending_when_redis_cannot_say_who_published_it(redis_client):
    engine = Engine(redis_client, [TICKER])
    occurrence = Occurrence("ticker", "jobs.tick.handler", datetime(2026, 9, 13, 3, tzinfo=UTC))
    redis_client.hset(f"relay:{occurrence.id}", "not", "a string")      # GET fails: WRONGTYPE
    forge(redis_client, occurrence.id, occurrence.payload)
    engine.read()
    assert engine.executor.calls == [] and engine.dlq() == [] and engine.pending() == 1


def _exhaust(engine, occurrence):
    """Publish *occurrence* and fail every attempt it gets, until it is dead-lettered; its dead-letter id."""
    engine.executor.program("jobs.tick.handler", *[Result(ok=False, exit_code=1)] * 5)
    Publisher(engine.client, STREAM, engine.metrics).publish(occurrence)
    engine.read()
    for backoff in (1, 2, 5, 10):
        engine.redeliver(after=backoff * MINUTE)
    [(dlq_id, _fields)] = engine.client.xrange(dlq_stream(STREAM))
    return dlq_id.decode()


def test_a_redriven_occurrence_runs_again(redis_client):
    engine = Engine(redis_client, [TICKER])
    occurrence = Occurrence("ticker", "jobs.tick.handler", datetime(2026, 9, 13, 3, tzinfo=UTC))
    dlq_id = _exhaust(engine, occurrence)
    [letter] = engine.dlq()
    assert (letter["reason"], letter["attempts"]) == ("attempts exhausted for ticker/jobs.tick.handler", "5")
    assert letter["schedule"] == occurrence.id
    [(_dlq_id, redriven)] = DeadLetters(redis_client, STREAM).redrive([dlq_id])
    assert redis_client.get(f"relay:{occurrence.id}").decode() == redriven
    assert redis_client.ttl(f"relay:{occurrence.id}") > 7 * 24 * 3600 - 60       # its TTL kept
    engine.read()
    last = engine.executor.calls[-1]
    assert (last.message_id, last.attempt, last.idempotency_key) == (redriven, 1, occurrence.id)
    assert json.loads(last.payload) == json.loads(occurrence.payload)
    assert engine.pending() == 0 and engine.dlq() == []


def test_a_redriven_occurrence_whose_record_is_gone_is_dead_lettered_again_unrun(redis_client):
    engine = Engine(redis_client, [TICKER])
    occurrence = Occurrence("ticker", "jobs.tick.handler", datetime(2026, 9, 13, 3, tzinfo=UTC))
    dlq_id = _exhaust(engine, occurrence)
    redis_client.delete(f"relay:{occurrence.id}")               # expired, 7 days after it was published
    [(_dlq_id, redriven)] = DeadLetters(redis_client, STREAM).redrive([dlq_id])
    calls = len(engine.executor.calls)
    engine.read()
    assert len(engine.executor.calls) == calls and engine.pending() == 0
    [letter] = engine.dlq()
    assert letter["original_id"] == redriven and letter["reason"].startswith(NOT_PUBLISHED)
    assert not redis_client.exists(f"relay:{occurrence.id}")    # a redrive never claims an occurrence


def test_a_redriven_forgery_is_an_ordinary_event(redis_client):
    engine = Engine(redis_client, [TICKER])
    future = Occurrence("ticker", "jobs.tick.handler", datetime(2026, 9, 13, 4, tzinfo=UTC))
    forge(redis_client, future.id, future.payload)
    engine.read()
    [(dlq_id, _fields)] = redis_client.xrange(dlq_stream(STREAM))
    [(_dlq_id, redriven)] = DeadLetters(redis_client, STREAM).redrive([dlq_id.decode()])
    assert redis_client.xrange(STREAM, redriven, redriven)[0][1].keys() == {b"event", b"redriven_from"}
    engine.read()                                               # matches no rule: acknowledged
    assert engine.executor.calls == [] and engine.pending() == 0 and engine.dlq() == []
    assert not redis_client.exists(f"relay:{future.id}")
