"""The local state database: its file, its schema, and the writer that keeps it.

/var/lib/relay/db.sqlite3 is a read-only view for operators, never a source
of truth: /functions is authoritative and the Prometheus registry holds the
counters. Relay rewrites the whole view whenever it changes (a few rows per
function, one short transaction), so a database that was deleted, emptied or
left from another schema is simply rebuilt on the next write.

    functions       one row per loaded function (ready or pending), with its warm settings and limits
    handlers        its event rules and schedules, in template order
    stats           one row: the global counters and backlog gauges
    function_stats  one row per function that has counters, warm containers or limit waits

The rows are the records of relay.view.records; relay.view.reader reads them
back for ``relay function`` and ``relay stats``. Only the standard library
is imported here: those commands import this module and must start fast.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from relay.config import STATE_DIR
from relay.errors import StateError, reason
from relay.view.records import EVENT, SCHEDULE, Counters, FunctionRecord, FunctionStats, Stats, WarmRecord

DB_PATH = Path(STATE_DIR) / "db.sqlite3"
SCHEMA_VERSION = 3  # 2: functions.warm, function_stats.warm_containers; 3: the limits and their waits
BUSY_TIMEOUT = 2.0  # seconds a reader or the writer waits for the other's lock
MAX_ERROR_LENGTH = 4000

TABLES = ("function_stats", "stats", "handlers", "functions")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS functions (
    name                  TEXT PRIMARY KEY,
    runtime               TEXT NOT NULL,
    status                TEXT NOT NULL CHECK (status IN ('ready', 'pending')),
    image                 TEXT,
    fingerprint           TEXT,
    prepared_at           TEXT,
    last_reconcile_at     TEXT,
    last_reconcile_status TEXT CHECK (last_reconcile_status IN ('success', 'failed')),
    last_error            TEXT,
    updated_at            TEXT NOT NULL,
    env                   TEXT NOT NULL DEFAULT '{}',
    secrets               TEXT NOT NULL DEFAULT '{}',
    warm                  TEXT,
    rate_limit            TEXT,
    concurrency_key       TEXT
);
CREATE TABLE IF NOT EXISTS handlers (
    function_name TEXT NOT NULL REFERENCES functions (name) ON DELETE CASCADE,
    kind          TEXT NOT NULL CHECK (kind IN ('event', 'schedule')),
    position      INTEGER NOT NULL,
    handler       TEXT NOT NULL,
    timeout       TEXT NOT NULL,
    cron          TEXT,
    timezone      TEXT,
    PRIMARY KEY (function_name, kind, position)
);
CREATE TABLE IF NOT EXISTS stats (
    id                         INTEGER PRIMARY KEY CHECK (id = 1),
    events_processed           INTEGER NOT NULL,
    handler_successes          INTEGER NOT NULL,
    handler_failures           INTEGER NOT NULL,
    retries                    INTEGER NOT NULL,
    dlq_entries                INTEGER NOT NULL,
    pending_entries            INTEGER NOT NULL,
    oldest_pending_age_seconds REAL NOT NULL,
    updated_at                 TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS function_stats (
    function_name                TEXT PRIMARY KEY,
    events_processed             INTEGER NOT NULL,
    handler_successes            INTEGER NOT NULL,
    handler_failures             INTEGER NOT NULL,
    retries                      INTEGER NOT NULL,
    dlq_entries                  INTEGER NOT NULL,
    warm_containers              INTEGER NOT NULL DEFAULT 0,
    rate_limit_waits             INTEGER NOT NULL DEFAULT 0,
    rate_limit_wait_seconds      REAL NOT NULL DEFAULT 0,
    concurrency_key_waits        INTEGER NOT NULL DEFAULT 0,
    concurrency_key_wait_seconds REAL NOT NULL DEFAULT 0,
    updated_at                   TEXT NOT NULL
);
"""



# The columns named as the fields of Counters and of LimitWaits they hold.
COUNTER_COLUMNS = ("events_processed", "handler_successes", "handler_failures", "retries", "dlq_entries")
WAIT_COLUMNS = ("rate_limit_waits", "rate_limit_wait_seconds", "concurrency_key_waits",
                "concurrency_key_wait_seconds")


# --- timestamps ---------------------------------------------------------------------


def rfc3339(moment: datetime | None) -> str | None:
    """2026-09-08T12:00:00Z: UTC, whole seconds (how a time column holds a time)."""
    if moment is None:
        return None
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def parse_time(text: str | None) -> datetime | None:
    """The time a column holds, back; None for SQL NULL."""
    return None if text is None else datetime.fromisoformat(text)


# --- writing (relay start) ------------------------------------------------------------


class StateDatabase:
    """The writer's connection. Blocking: call it off the gevent hub (relay.view.writer does).

    Every method opens the file on demand: a missing file (or parent
    directory) is created, a file replaced or deleted behind Relay's back is
    reopened. Errors raise StateError; the caller logs them and carries on.
    """

    def __init__(self, path: str | os.PathLike[str] = DB_PATH) -> None:
        self.path = Path(path)
        self._connection: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None

    def write(self, functions: Sequence[FunctionRecord] | None = None, stats: Stats | None = None,
              function_stats: Mapping[str, FunctionStats] | None = None, *,
              view: Sequence[FunctionRecord] = ()) -> bool:
        """One transaction: the function view when *functions* is given (or the file
        is new or empty, then *view*), and the stats snapshot when *stats* is given.

        *function_stats* maps function name -> FunctionStats. Returns whether
        the function view was written.
        """
        try:
            connection, fresh = self._open()
            if functions is None and view and (fresh or _is_empty(connection)):
                functions = view
            with _transaction(connection):
                if functions is not None:
                    _write_functions(connection, functions)
                if stats is not None:
                    _write_stats(connection, stats, function_stats or {})
            return functions is not None
        except (sqlite3.Error, OSError) as error:
            self.close()
            raise StateError(f"{self.path}: {reason(error, strerror=False)}") from None

    def close(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            except sqlite3.Error:
                pass
        self._connection = self._identity = None

    def _open(self) -> tuple[sqlite3.Connection, bool]:
        """(connection, fresh): fresh when the file had to be (re)created or (re)opened."""
        identity = _identity(self.path)
        if self._connection is not None and identity == self._identity:
            return self._connection, False
        self.close()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None,
                                     check_same_thread=False)
        try:
            _prepare_schema(connection)
        except sqlite3.Error:
            connection.close()
            raise
        self._connection, self._identity = connection, _identity(self.path)
        return connection, True


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


def _prepare_schema(connection: sqlite3.Connection) -> None:
    connection.execute("PRAGMA foreign_keys = ON")
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    with _transaction(connection):
        if version != SCHEMA_VERSION:
            # Everything here is derived data: another schema is dropped, not migrated.
            for table in TABLES:
                connection.execute(f"DROP TABLE IF EXISTS {table}")
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                connection.execute(statement)
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


@contextmanager
def _transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE … COMMIT (the connection is in autocommit mode); ROLLBACK on error."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _is_empty(connection: sqlite3.Connection) -> bool:
    return bool(connection.execute("SELECT NOT EXISTS (SELECT 1 FROM functions)").fetchone()[0] == 1)


def _write_functions(connection: sqlite3.Connection, records: Sequence[FunctionRecord]) -> None:
    connection.execute("DELETE FROM handlers")
    connection.execute("DELETE FROM functions")
    connection.executemany(
        "INSERT INTO functions (name, runtime, status, image, fingerprint, prepared_at, last_reconcile_at, "
        "last_reconcile_status, last_error, updated_at, env, secrets, warm, rate_limit, concurrency_key) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(record.name, record.runtime, record.status, record.image, record.fingerprint,
          rfc3339(record.prepared_at), rfc3339(record.last_reconcile_at), record.last_reconcile_status,
          _bounded(record.last_error), rfc3339(record.updated_at), json.dumps(dict(record.env)),
          json.dumps(dict(record.secrets)), _warm_json(record.warm), record.rate_limit, record.concurrency_key)
         for record in records])
    rows = []
    for record in records:
        for kind in (EVENT, SCHEDULE):
            items = [item for item in record.handlers if item.kind == kind]
            rows += [(record.name, kind, position, item.handler, item.timeout, item.cron, item.timezone)
                     for position, item in enumerate(items)]
    connection.executemany("INSERT INTO handlers (function_name, kind, position, handler, timeout, cron, timezone) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?)", rows)


def _write_stats(connection: sqlite3.Connection, stats: Stats, function_stats: Mapping[str, FunctionStats]) -> None:
    stamp = rfc3339(stats.updated_at)
    counters = stats.counters
    connection.execute(
        f"INSERT OR REPLACE INTO stats (id, {', '.join(COUNTER_COLUMNS)}, pending_entries, "
        "oldest_pending_age_seconds, updated_at) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?)",
        (*_counter_values(counters), stats.pending_entries, stats.oldest_pending_age_seconds, stamp))
    connection.execute("DELETE FROM function_stats")
    connection.executemany(
        f"INSERT INTO function_stats (function_name, {', '.join(COUNTER_COLUMNS)}, warm_containers, "
        f"{', '.join(WAIT_COLUMNS)}, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(name, *_counter_values(values.counters), values.warm_containers,
          *(getattr(values.waits, column) for column in WAIT_COLUMNS), stamp)
         for name, values in sorted(function_stats.items())])


def _counter_values(counters: Counters) -> tuple[int, ...]:
    return tuple(getattr(counters, column) for column in COUNTER_COLUMNS)


def _warm_json(warm: WarmRecord | None) -> str | None:
    """{"containers": 2, "max_invocations": 1000, "idle": "10m0s", "prestart": false}, or None (SQL NULL)."""
    return None if warm is None else json.dumps(asdict(warm))


def _bounded(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_ERROR_LENGTH:
        return text
    return text[:MAX_ERROR_LENGTH - 15] + "\n… (truncated)"
