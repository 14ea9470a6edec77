"""A state database as Relay's schema version 1 left it (before warm settings), for upgrade tests."""

import sqlite3

SCHEMA_1 = """
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
    secrets               TEXT NOT NULL DEFAULT '{}'
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
    function_name     TEXT PRIMARY KEY,
    events_processed  INTEGER NOT NULL,
    handler_successes INTEGER NOT NULL,
    handler_failures  INTEGER NOT NULL,
    retries           INTEGER NOT NULL,
    dlq_entries       INTEGER NOT NULL,
    updated_at        TEXT NOT NULL
);
"""


def write_schema_1_database(path, names):
    """A version-1 file holding one ready function per name, with counters, as the last release wrote it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path)
    try:
        connection.executescript(SCHEMA_1)
        for name in names:
            connection.execute("INSERT INTO functions (name, runtime, status, updated_at) "
                               "VALUES (?, 'node24', 'ready', '2026-09-08T12:00:00Z')", (name,))
            connection.execute("INSERT INTO function_stats VALUES (?, 1, 1, 0, 0, 0, '2026-09-08T12:00:00Z')",
                               (name,))
        connection.execute("PRAGMA user_version = 1")
        connection.commit()
    finally:
        connection.close()
