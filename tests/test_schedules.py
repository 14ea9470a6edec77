"""Schedules: occurrence times across DST, identity, publish-if-new, and their dispatch."""

import json
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import gevent
import pytest

from relay.live.catalog import Catalog
from relay.metrics.prometheus import Metrics
from relay.stream.schedules import Occurrence, Publisher, Scheduler, next_instant, parse_occurrence_id
from tests.test_dispatch import STREAM, Engine, function, value


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
