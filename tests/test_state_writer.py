"""The state writer: counters from the Prometheus registry, the view on change, off the hub."""

import logging
import threading
import time
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import gevent
import pytest

from relay.errors import StateError
from relay.functions import Function, parse_template
from relay.live.status import FunctionStatus, Outcome
from relay.metrics.prometheus import Metrics, PrometheusObserver
from relay.stream.limits import Limit
from relay.view.database import StateDatabase
from relay.view.reader import StateReader
from relay.view.records import (
    FAILED,
    PENDING,
    READY,
    SUCCESS,
    Counters,
    FunctionRecord,
    FunctionStats,
    HandlerRecord,
    LimitWaits,
    WarmRecord,
)
from relay.view.writer import StateWriter, function_record, previous_functions, stats_snapshot
from tests.support.state import write_schema_1_database

T0 = datetime(2026, 9, 8, 12, 0, 0, tzinfo=UTC)
T1 = datetime(2026, 9, 8, 12, 0, 5, tzinfo=UTC)
TEMPLATE = """
runtime: python3.14
events:
  - handler: app.handler
    pattern: {kind: [a]}
schedules:
  - handler: jobs.report
    cron: "0 8 * * 1-5"
    timezone: Europe/Rome
    timeout: 20s
env:
  API_URL: https://api.example.com
secrets:
  DATABASE_URL: database-url
"""
FUNCTION = Function(name="fn", directory=Path("/functions/fn"), template=parse_template(TEMPLATE),
                    fingerprint="f" * 64)
STATUS = FunctionStatus(FUNCTION, ready=False, updated_at=T0)
RECORD = function_record(STATUS)


def busy_metrics():
    metrics = Metrics()
    metrics.events_processed.inc(7)
    metrics.handler_success.inc(5)
    metrics.handler_failure.inc(2)
    metrics.retries.inc(1)
    metrics.dlq_entries.inc(1)
    metrics.pending_entries.set(3)
    metrics.pending_oldest_age.set(134.5)
    for name, events in (("a", 4), ("b", 3)):
        metrics.function_events.labels(name).inc(events)
    metrics.function_success.labels("a").inc(3)
    metrics.function_failure.labels("b").inc(2)
    metrics.function_retries.labels("b").inc(1)
    metrics.function_dlq_entries.labels("b").inc(1)
    metrics.warm_containers.labels("a").set(2)
    metrics.warm_containers.labels("prestarted").set(1)   # warm containers, no event yet
    return metrics


def test_a_pending_function_s_row_has_its_template_and_no_image_or_fingerprint():
    assert RECORD == FunctionRecord(
        name="fn", runtime="python3.14", status=PENDING, updated_at=T0,
        env={"API_URL": "https://api.example.com"}, secrets={"DATABASE_URL": "database-url"},
        handlers=(HandlerRecord(handler="app.handler", timeout="6s"),
                  HandlerRecord(handler="jobs.report", timeout="20s", kind="schedule", cron="0 8 * * 1-5",
                                timezone="Europe/Rome")))


def test_a_warm_function_s_row_has_its_settings_with_idle_as_a_go_duration():
    template = parse_template(TEMPLATE + "concurrency: 4\nwarm:\n  containers: 3\n  idle: 90s\n")
    warm = Function(name="fn", directory=Path("/functions/fn"), template=template, fingerprint="f" * 64)
    record = function_record(FunctionStatus(warm, ready=False, updated_at=T0))
    assert record.warm == WarmRecord(containers=3, max_invocations=1000, idle="1m30s", prestart=False)
    assert RECORD.warm is None, "no warm: in the template, no settings"


def test_a_limited_function_s_row_has_its_limits_as_written():
    template = parse_template(TEMPLATE + "rate_limit: 020/m\nconcurrency_key: new_image.id\n")
    limited = Function(name="fn", directory=Path("/functions/fn"), template=template, fingerprint="f" * 64)
    record = function_record(FunctionStatus(limited, ready=False, updated_at=T0))
    assert (record.rate_limit, record.concurrency_key) == ("20/m", "new_image.id")
    assert (RECORD.rate_limit, RECORD.concurrency_key) == (None, None)


def test_the_snapshot_has_the_limit_waits_of_each_function():
    metrics = busy_metrics()
    observer = PrometheusObserver(metrics)
    observer.limit_waited("a", Limit.RATE, 1.5)
    observer.limit_waited("a", Limit.RATE, 0.25)
    observer.limit_waited("keyed", Limit.KEY, 2.0)              # a function with no other counter yet
    _stats, per_function = stats_snapshot(metrics, T0)
    assert per_function["a"] == FunctionStats(Counters(4, 3, 0, 0, 0), warm_containers=2,
                                              waits=LimitWaits(rate_limit_waits=2, rate_limit_wait_seconds=1.75))
    assert per_function["keyed"] == FunctionStats(waits=LimitWaits(concurrency_key_waits=1,
                                                                   concurrency_key_wait_seconds=2.0))
    assert per_function["b"].waits == LimitWaits()


def test_a_ready_function_s_row_has_its_image_fingerprint_and_last_reconcile():
    status = FunctionStatus(FUNCTION, ready=True, updated_at=T1, image="relay-fn-fn:ffff", prepared_at=T1,
                            last_reconcile_at=T1, last_outcome=Outcome.SUCCEEDED)
    record = function_record(status)
    assert (record.status, record.image, record.fingerprint, record.prepared_at) == (
        READY, "relay-fn-fn:ffff", "f" * 64, T1)
    assert (record.last_reconcile_at, record.last_reconcile_status, record.last_error) == (T1, SUCCESS, None)
    failed = function_record(FunctionStatus(FUNCTION, ready=False, updated_at=T1, last_reconcile_at=T1,
                                            last_outcome=Outcome.FAILED, last_error="boom"))
    assert (failed.status, failed.fingerprint, failed.last_reconcile_status, failed.last_error) == (
        PENDING, None, FAILED, "boom")


def test_the_snapshot_is_the_registry_s_absolute_values():
    stats, per_function = stats_snapshot(busy_metrics(), T0)
    assert stats.counters == Counters(7, 5, 2, 1, 1)
    assert (stats.pending_entries, stats.oldest_pending_age_seconds, stats.updated_at) == (3, 134.5, T0)
    assert per_function == {"a": FunctionStats(Counters(4, 3, 0, 0, 0), warm_containers=2),
                            "b": FunctionStats(Counters(3, 0, 2, 1, 1)),
                            "prestarted": FunctionStats(warm_containers=1)}


def test_the_snapshot_follows_the_warm_containers_gauge_down_to_zero():
    metrics = busy_metrics()
    metrics.warm_containers.labels("a").set(0)
    _stats, per_function = stats_snapshot(metrics, T0)
    assert per_function["a"] == FunctionStats(Counters(4, 3, 0, 0, 0), warm_containers=0)


def test_a_fresh_registry_snapshots_zeros():
    stats, per_function = stats_snapshot(Metrics(), T0)
    assert stats.counters == Counters() and stats.pending_entries == 0 and per_function == {}


def test_the_loop_writes_the_view_at_once_and_the_counters_every_interval(tmp_path):
    path = tmp_path / "db.sqlite3"
    metrics = busy_metrics()
    writer = StateWriter(StateDatabase(path), metrics, interval=0.2)
    loop = gevent.spawn(writer.loop)
    writer.functions_changed([STATUS])
    gevent.sleep(0.1)
    reader = StateReader(path)
    assert reader.functions() == [RECORD] and reader.stats().updated_at is None
    gevent.sleep(0.25)
    assert reader.stats().counters == Counters(7, 5, 2, 1, 1)
    metrics.events_processed.inc(10)
    gevent.sleep(0.25)
    assert reader.stats().counters.events_processed == 17
    assert reader.function_stats("a") == FunctionStats(Counters(4, 3, 0, 0, 0), warm_containers=2)
    writer.stop()
    loop.get(timeout=2)


def test_a_flush_stores_the_warm_containers_of_each_function(tmp_path):
    path = tmp_path / "db.sqlite3"
    metrics = busy_metrics()
    writer = StateWriter(StateDatabase(path), metrics, interval=60)
    writer.flush()
    reader = StateReader(path)
    assert reader.function_stats("prestarted") == FunctionStats(warm_containers=1)
    metrics.warm_containers.labels("a").set(1)
    writer.flush()
    assert reader.function_stats("a") == FunctionStats(Counters(4, 3, 0, 0, 0), warm_containers=1)


def test_the_final_flush_writes_the_latest_and_closes(tmp_path):
    path = tmp_path / "db.sqlite3"
    metrics = busy_metrics()
    writer = StateWriter(StateDatabase(path), metrics, interval=60)
    writer.functions_changed([STATUS])
    metrics.dlq_entries.inc(5)
    writer.final_flush(timeout=5)
    reader = StateReader(path)
    assert reader.functions() == [RECORD] and reader.stats().counters.dlq_entries == 6
    assert writer.database._connection is None


class SlowDatabase:
    """A database whose writes block their (real) thread for *seconds*."""

    path = "slow.sqlite3"

    def __init__(self, seconds):
        self.seconds = seconds
        self.writes = 0
        self.threads = set()

    def write(self, functions=None, stats=None, function_stats=None, *, view=()):
        self.threads.add(threading.get_ident())
        time.sleep(self.seconds)
        self.writes += 1
        return functions is not None

    def close(self):
        pass


def test_a_slow_write_never_blocks_the_hub():
    database = SlowDatabase(0.5)
    writer = StateWriter(database, Metrics(), interval=0.05)
    ticks = []

    def tick():
        for _ in range(60):
            ticks.append(time.monotonic())
            gevent.sleep(0.01)

    loop = gevent.spawn(writer.loop)
    gevent.spawn(tick).get(timeout=10)
    writer.stop()
    loop.join(timeout=2)
    gaps = [later - earlier for earlier, later in pairwise(ticks)]
    assert database.writes >= 1 and threading.get_ident() not in database.threads
    assert max(gaps) < 0.1, f"the hub stalled for {max(gaps):.3f}s"


def test_the_final_flush_is_bounded(caplog):
    writer = StateWriter(SlowDatabase(1.5), Metrics())
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="relay.view.writer"):
        writer.final_flush(timeout=0.3)
    assert time.monotonic() - started < 1.5
    assert "Final state flush did not finish in time" in caplog.text


def test_an_unusable_database_is_logged_once_and_retried(tmp_path, caplog):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    database = StateDatabase(blocker / "db.sqlite3")
    writer = StateWriter(database, Metrics(), interval=60)
    writer.functions_changed([STATUS])
    with caplog.at_level(logging.INFO, logger="relay.view.writer"):
        writer.flush()
        writer.flush()
        assert caplog.text.count("State database unavailable") == 1
        blocker.unlink()
        writer.flush()
    assert "State database writable again" in caplog.text
    assert StateReader(blocker / "db.sqlite3").functions() == [RECORD], "the view that failed is written later"


def test_errors_surface_as_state_errors(tmp_path):
    with pytest.raises(StateError):
        StateDatabase(tmp_path).write([RECORD])


def test_the_names_an_earlier_run_left_behind(tmp_path):
    path = tmp_path / "db.sqlite3"
    assert previous_functions(path) == set()
    StateDatabase(path).write([RECORD])
    assert previous_functions(path) == {"fn"}
    path.write_bytes(b"garbage" * 100)
    assert previous_functions(path) == set()


def test_the_names_an_earlier_release_left_behind_survive_the_schema_change(tmp_path):
    path = tmp_path / "db.sqlite3"
    write_schema_1_database(path, ["deleted-while-stopped", "kept"])
    assert previous_functions(path) == {"deleted-while-stopped", "kept"}
