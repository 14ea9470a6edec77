"""The state database: schema, whole-view writes, rebuilding, and the read-only side."""

import os
import re
import sqlite3
from datetime import UTC, datetime

import pytest

from relay.errors import StateError
from relay.view.database import StateDatabase, rfc3339
from relay.view.reader import StateReader
from relay.view.records import (
    EVENT,
    FAILED,
    PENDING,
    READY,
    SCHEDULE,
    SUCCESS,
    Counters,
    FunctionRecord,
    FunctionStats,
    HandlerRecord,
    LimitWaits,
    Stats,
    WarmRecord,
)
from tests.support.state import write_schema_1_database

T0 = datetime(2026, 9, 8, 12, 0, 0, tzinfo=UTC)
T1 = datetime(2026, 9, 8, 12, 0, 5, tzinfo=UTC)
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")

READY_ONE = FunctionRecord(
    name="user-events-python", runtime="python3.14", status=READY, updated_at=T0,
    image="relay-fn-user-events-python:0123456789abcdef", fingerprint="0123456789abcdef" + "0" * 48,
    prepared_at=T0, last_reconcile_at=T1, last_reconcile_status=FAILED, last_error="line one\n  line two",
    env={"API_URL": "https://api.example.com", "MODE": "fast"}, secrets={"DATABASE_URL": "database-url"},
    handlers=(HandlerRecord("events.created.handler", "6s"), HandlerRecord("events.updated.handler", "20s"),
              HandlerRecord("jobs.cleanup.handler", "6s", SCHEDULE, "0 3 * * *", "UTC")),
    warm=WarmRecord(containers=2, max_invocations=1000, idle="10m0s", prestart=True))
PENDING_ONE = FunctionRecord(name="welcome-email-node", runtime="node24", status=PENDING, updated_at=T1,
                             handlers=(HandlerRecord("handler.handler", "6s"),))
STATS = Stats(Counters(152934, 152801, 133, 82, 4), pending_entries=17, oldest_pending_age_seconds=134.7,
              updated_at=T1)


@pytest.fixture
def path(tmp_path):
    return tmp_path / "var" / "lib" / "relay" / "db.sqlite3"


def test_round_trip_creates_the_parent_and_keeps_every_field(path):
    database = StateDatabase(path)
    busy = FunctionStats(Counters(12493, 12470, 23, 17, 2), warm_containers=1)
    assert database.write([PENDING_ONE, READY_ONE], STATS, {"user-events-python": busy})
    reader = StateReader(path)
    assert reader.functions() == [READY_ONE, PENDING_ONE]
    assert reader.function("welcome-email-node") == PENDING_ONE and PENDING_ONE.warm is None
    assert reader.function("missing") is None
    assert reader.stats() == STATS
    assert reader.function_stats("user-events-python") == busy
    assert reader.function_stats("welcome-email-node") == FunctionStats()
    assert list(reader.function("user-events-python").env) == ["API_URL", "MODE"], "template order is kept"


def test_columns_are_the_references_with_rfc3339_times_and_json_mappings(path):
    StateDatabase(path).write([READY_ONE, PENDING_ONE], STATS, {"welcome-email-node": FunctionStats(warm_containers=2)})
    with sqlite3.connect(path) as connection:
        connection.row_factory = sqlite3.Row
        row, pending = connection.execute("SELECT * FROM functions ORDER BY name").fetchall()
        assert set(row.keys()) >= {"name", "runtime", "status", "image", "fingerprint", "prepared_at",
                                   "last_reconcile_at", "last_reconcile_status", "last_error", "updated_at", "env",
                                   "secrets", "warm"}
        assert all(RFC3339.fullmatch(row[column]) for column in ("prepared_at", "last_reconcile_at", "updated_at"))
        assert row["secrets"] == '{"DATABASE_URL": "database-url"}'
        assert row["warm"] == '{"containers": 2, "max_invocations": 1000, "idle": "10m0s", "prestart": true}'
        assert pending["warm"] is None, "a function without warm: has NULL"
        handlers = connection.execute("SELECT function_name, handler, timeout, kind FROM handlers "
                                      "WHERE function_name = 'user-events-python' ORDER BY kind, position").fetchall()
        assert [tuple(item) for item in handlers] == [
            ("user-events-python", "events.created.handler", "6s", EVENT),
            ("user-events-python", "events.updated.handler", "20s", EVENT),
            ("user-events-python", "jobs.cleanup.handler", "6s", SCHEDULE)]
        stats = connection.execute("SELECT * FROM stats").fetchone()
        assert set(stats.keys()) >= {"events_processed", "handler_successes", "handler_failures", "retries",
                                     "dlq_entries", "pending_entries", "oldest_pending_age_seconds", "updated_at"}
        assert RFC3339.fullmatch(stats["updated_at"])
        assert {column for (_cid, column, *_rest) in connection.execute("PRAGMA table_info(function_stats)")} >= {
            "function_name", "events_processed", "handler_successes", "handler_failures", "retries", "dlq_entries",
            "warm_containers", "updated_at"}
        assert tuple(connection.execute("SELECT function_name, events_processed, warm_containers "
                                        "FROM function_stats").fetchone()) == ("welcome-email-node", 0, 2)
        assert connection.execute("PRAGMA user_version").fetchone()[0] == 3


def test_limits_and_their_waits_round_trip(path):
    limited = FunctionRecord(name="limited", runtime="node24", status=PENDING, updated_at=T1,
                             handlers=(HandlerRecord("handler.handler", "6s"),), rate_limit="20/s",
                             concurrency_key="new_image.id")
    waited = FunctionStats(Counters(3, 3, 0, 0, 0), waits=LimitWaits(4, 1.25, 2, 0.5))
    StateDatabase(path).write([limited, READY_ONE], STATS, {"limited": waited})
    reader = StateReader(path)
    assert reader.function("limited") == limited and reader.function_stats("limited") == waited
    assert (READY_ONE.rate_limit, READY_ONE.concurrency_key) == (None, None)
    assert reader.function("user-events-python") == READY_ONE
    with sqlite3.connect(path) as connection:
        assert connection.execute("SELECT rate_limit, concurrency_key FROM functions ORDER BY name").fetchall() == [
            ("20/s", "new_image.id"), (None, None)]
        assert connection.execute("SELECT rate_limit_waits, rate_limit_wait_seconds, concurrency_key_waits, "
                                  "concurrency_key_wait_seconds FROM function_stats").fetchall() == [(4, 1.25, 2, 0.5)]


def test_each_write_replaces_the_whole_view(path):
    database = StateDatabase(path)
    database.write([READY_ONE, PENDING_ONE])
    database.write([PENDING_ONE], STATS, {"gone": FunctionStats(Counters(1, 1, 0, 0, 0), warm_containers=1)})
    database.write(None, STATS, {})
    reader = StateReader(path)
    assert [record.name for record in reader.functions()] == ["welcome-email-node"]
    assert reader.function_stats("gone") == FunctionStats()


def test_a_deleted_file_is_recreated_with_the_whole_view(path):
    database = StateDatabase(path)
    database.write([READY_ONE])
    os.unlink(path)
    assert database.write(None, STATS, {}, view=[READY_ONE]), "the view is written into the new file"
    reader = StateReader(path)
    assert [record.name for record in reader.functions()] == ["user-events-python"]
    assert reader.stats() == STATS


def test_an_emptied_database_is_rebuilt_on_the_next_write(path):
    database = StateDatabase(path)
    database.write([READY_ONE])
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM handlers")
        connection.execute("DELETE FROM functions")
    assert not database.write(None, STATS, {}), "an unchanged view with rows left is not rewritten"
    database.write(None, STATS, {}, view=[READY_ONE])
    assert StateReader(path).function("user-events-python") == READY_ONE


def test_another_schema_is_replaced(path):
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE functions (name TEXT)")
        connection.execute("INSERT INTO functions VALUES ('old')")
    StateDatabase(path).write([PENDING_ONE])
    assert StateReader(path).functions() == [PENDING_ONE]


def test_the_version_1_schema_is_replaced_by_the_first_write(path):
    write_schema_1_database(path, ["old"])
    StateDatabase(path).write([READY_ONE], STATS, {"user-events-python": FunctionStats(warm_containers=2)})
    reader = StateReader(path)
    assert reader.functions() == [READY_ONE], "derived data is dropped, not migrated"
    assert reader.function_stats("old") == FunctionStats()
    assert reader.function_stats("user-events-python").warm_containers == 2


def test_reading_a_database_of_another_schema_version_says_so(path):
    write_schema_1_database(path, ["old"])
    reader = StateReader(path)
    for read in (reader.functions, lambda: reader.function("old"), lambda: reader.function_stats("old"),
                 reader.stats):
        with pytest.raises(StateError, match=r"has schema version 1 and this Relay reads version 3; "
                                             r"it is rebuilt when this version of Relay starts"):
            read()
    assert reader.function_names() == {"old"}, "the names survive an upgrade, for the startup image GC"


def test_a_broken_file_is_an_error_for_both_sides_until_it_is_removed(path):
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not a database" * 100)
    database = StateDatabase(path)
    with pytest.raises(StateError, match="file is not a database"):
        database.write([READY_ONE])
    with pytest.raises(StateError, match="cannot read the state database"):
        StateReader(path).functions()
    path.unlink()
    database.write([READY_ONE])
    assert StateReader(path).function("user-events-python") == READY_ONE


def test_an_unwritable_location_is_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StateError):
        StateDatabase(blocker / "db.sqlite3").write([READY_ONE])


def test_reading_a_missing_database_is_empty_and_creates_nothing(path):
    reader = StateReader(path)
    assert reader.functions() == [] and reader.function("x") is None
    assert reader.stats() == Stats() and reader.stats().updated_at is None
    assert reader.function_stats("x") == FunctionStats() and reader.function_names() == set()
    assert not path.exists() and not path.parent.exists()


def test_reading_a_foreign_database_says_so(path):
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE things (x)")
    with pytest.raises(StateError, match="not a Relay state database"):
        StateReader(path).stats()


def test_the_reader_never_writes(path):
    StateDatabase(path).write([READY_ONE], STATS, {})
    path.chmod(0o444)
    try:
        before = path.read_bytes()
        StateReader(path).functions()
        StateReader(path).stats()
        assert path.read_bytes() == before
    finally:
        path.chmod(0o644)


def test_long_errors_are_bounded(path):
    record = FunctionRecord(name="big", runtime="node24", status=PENDING, updated_at=T0,
                            last_reconcile_status=FAILED, last_reconcile_at=T0, last_error="x" * 100_000)
    StateDatabase(path).write([record])
    stored = StateReader(path).function("big").last_error
    assert len(stored) <= 4000 and stored.endswith("(truncated)")


def test_rfc3339_is_utc_with_z():
    assert rfc3339(datetime(2026, 9, 8, 14, 0, 0, 123456, tzinfo=UTC)) == "2026-09-08T14:00:00Z"
    assert rfc3339(datetime.fromisoformat("2026-09-08T14:00:00+02:00")) == "2026-09-08T12:00:00Z"
    assert SUCCESS == "success"
