"""The local state database: Relay's current view of its functions and counters.

/var/lib/relay/db.sqlite3 is a read-only view for operators, never a source
of truth: /functions is authoritative and the Prometheus registry holds the
counters. Relay rewrites the whole view whenever it changes (a few rows per
function, one short transaction), so a database that was deleted, emptied or
left from another schema is simply rebuilt on the next write.

    functions       one row per loaded function (ready or pending), with its warm settings and limits
    handlers        its event rules and schedules, in template order
    stats           one row: the global counters and backlog gauges
    function_stats  one row per function that has counters, warm containers or limit waits

Only the standard library is imported here: ``relay function`` and ``relay
stats`` read through this module and must start fast.
"""

import json
import os
import sqlite3
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from relay.config import STATE_DIR
from relay.errors import StateError, reason

DB_PATH = Path(STATE_DIR) / "db.sqlite3"
SCHEMA_VERSION = 3  # 2: functions.warm, function_stats.warm_containers; 3: the limits and their waits
BUSY_TIMEOUT = 2.0  # seconds a reader or the writer waits for the other's lock
MAX_ERROR_LENGTH = 4000

READY, PENDING = "ready", "pending"
SUCCESS, FAILED = "success", "failed"
EVENT, SCHEDULE = "event", "schedule"

_TABLES = ("function_stats", "stats", "handlers", "functions")
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


# --- records ------------------------------------------------------------------------


@dataclass(frozen=True)
class HandlerRecord:
    """One event rule (kind "event") or schedule (kind "schedule") of a function."""

    handler: str
    timeout: str                  # a Go duration, "6s"
    kind: str = EVENT
    cron: str | None = None       # schedules only
    timezone: str | None = None   # schedules only


@dataclass(frozen=True)
class WarmRecord:
    """The template's ``warm:`` settings, as ``relay function inspect`` shows them."""

    containers: int               # per worker
    max_invocations: int
    idle: str                     # a Go duration, "10m0s"
    prestart: bool


@dataclass(frozen=True)
class FunctionRecord:
    name: str
    runtime: str
    status: str                   # READY: an active version serves; PENDING: loaded, never built
    updated_at: datetime
    image: str | None = None
    fingerprint: str | None = None
    prepared_at: datetime | None = None
    last_reconcile_at: datetime | None = None
    last_reconcile_status: str | None = None  # SUCCESS or FAILED; None until an outcome
    last_error: str | None = None
    env: dict = field(default_factory=dict)
    secrets: dict = field(default_factory=dict)   # variable -> secret name, never a value
    handlers: tuple = ()
    warm: WarmRecord | None = None  # None: a new container per invocation
    rate_limit: str | None = None       # the template's rate_limit as written ("20/s"), or None
    concurrency_key: str | None = None  # the template's concurrency_key ("new_image.id"), or None

    @property
    def events(self):
        return tuple(item for item in self.handlers if item.kind == EVENT)

    @property
    def schedules(self):
        return tuple(item for item in self.handlers if item.kind == SCHEDULE)


@dataclass(frozen=True)
class Counters:
    events_processed: int = 0
    handler_successes: int = 0
    handler_failures: int = 0
    retries: int = 0
    dlq_entries: int = 0


@dataclass(frozen=True)
class LimitWaits:
    """Invocations of one function that its rate_limit or concurrency_key held back, and the time they waited."""

    rate_limit_waits: int = 0
    rate_limit_wait_seconds: float = 0.0
    concurrency_key_waits: int = 0
    concurrency_key_wait_seconds: float = 0.0


@dataclass(frozen=True)
class FunctionStats:
    """One function's latest snapshot: its counters, the warm containers this worker had then,
    and its waits for its limits."""

    counters: Counters = Counters()
    warm_containers: int = 0
    waits: LimitWaits = LimitWaits()


@dataclass(frozen=True)
class Stats:
    """The global snapshot; ``updated_at`` None means never written."""

    counters: Counters = Counters()
    pending_entries: int = 0
    oldest_pending_age_seconds: float = 0.0
    updated_at: datetime | None = None


_COUNTER_COLUMNS = ("events_processed", "handler_successes", "handler_failures", "retries", "dlq_entries")
_WAIT_COLUMNS = ("rate_limit_waits", "rate_limit_wait_seconds", "concurrency_key_waits",
                 "concurrency_key_wait_seconds")


# --- timestamps ---------------------------------------------------------------------


def now():
    return datetime.now(UTC).replace(microsecond=0)


def rfc3339(moment):
    """2026-09-08T12:00:00Z: UTC, whole seconds."""
    if moment is None:
        return None
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def parse_time(text):
    return None if text is None else datetime.fromisoformat(text)


# --- writing (relay start) ------------------------------------------------------------


class StateDatabase:
    """The writer's connection. Blocking: call it off the gevent hub (see state_writer).

    Every method opens the file on demand: a missing file (or parent
    directory) is created, a file replaced or deleted behind Relay's back is
    reopened. Errors raise StateError; the caller logs them and carries on.
    """

    def __init__(self, path=DB_PATH):
        self.path = Path(path)
        self._connection = None
        self._identity = None

    def write(self, functions=None, stats=None, function_stats=None, *, view=()):
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

    def close(self):
        if self._connection is not None:
            try:
                self._connection.close()
            except sqlite3.Error:
                pass
        self._connection = self._identity = None

    def _open(self):
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


def _identity(path):
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


def _prepare_schema(connection):
    connection.execute("PRAGMA foreign_keys = ON")
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    with _transaction(connection):
        if version != SCHEMA_VERSION:
            # Everything here is derived data: another schema is dropped, not migrated.
            for table in _TABLES:
                connection.execute(f"DROP TABLE IF EXISTS {table}")
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                connection.execute(statement)
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


@contextmanager
def _transaction(connection):
    """BEGIN IMMEDIATE … COMMIT (the connection is in autocommit mode); ROLLBACK on error."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _is_empty(connection):
    return connection.execute("SELECT NOT EXISTS (SELECT 1 FROM functions)").fetchone()[0] == 1


def _write_functions(connection, records):
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


def _write_stats(connection, stats, function_stats):
    stamp = rfc3339(stats.updated_at)
    counters = stats.counters
    connection.execute(
        f"INSERT OR REPLACE INTO stats (id, {', '.join(_COUNTER_COLUMNS)}, pending_entries, "
        "oldest_pending_age_seconds, updated_at) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?)",
        (*_counter_values(counters), stats.pending_entries, stats.oldest_pending_age_seconds, stamp))
    connection.execute("DELETE FROM function_stats")
    connection.executemany(
        f"INSERT INTO function_stats (function_name, {', '.join(_COUNTER_COLUMNS)}, warm_containers, "
        f"{', '.join(_WAIT_COLUMNS)}, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(name, *_counter_values(values.counters), values.warm_containers,
          *(getattr(values.waits, column) for column in _WAIT_COLUMNS), stamp)
         for name, values in sorted(function_stats.items())])


def _counter_values(counters):
    return tuple(getattr(counters, column) for column in _COUNTER_COLUMNS)


def _warm_json(warm):
    """{"containers": 2, "max_invocations": 1000, "idle": "10m0s", "prestart": false}, or None (SQL NULL)."""
    return None if warm is None else json.dumps(asdict(warm))


def _bounded(text):
    if text is None or len(text) <= MAX_ERROR_LENGTH:
        return text
    return text[:MAX_ERROR_LENGTH - 15] + "\n… (truncated)"


class StateReader:
    """Read-only access for ``relay function`` and ``relay stats``.

    A missing file reads as an empty database (Relay has not written one
    yet); it is never created here. A file that is not a Relay state
    database raises StateError.
    """

    def __init__(self, path=DB_PATH):
        self.path = Path(path)

    def functions(self):
        """Every function, sorted by name."""
        with self._connect() as connection:
            if connection is None:
                return []
            rows = connection.execute("SELECT * FROM functions ORDER BY name").fetchall()
            handlers = _handlers_by_function(connection.execute(
                "SELECT * FROM handlers ORDER BY function_name, kind = 'schedule', position").fetchall())
        return [_function(row, handlers.get(row["name"], ())) for row in rows]

    def function_names(self):
        """The names of the functions, from a database of any schema version (the names of the
        previous run survive an upgrade: the startup image GC needs them before the file is rebuilt)."""
        with _ReadConnection(self.path, any_version=True) as connection:
            if connection is None:
                return set()
            return {row["name"] for row in connection.execute("SELECT name FROM functions")}

    def function(self, name):
        """One function, or None."""
        with self._connect() as connection:
            if connection is None:
                return None
            row = connection.execute("SELECT * FROM functions WHERE name = ?", (name,)).fetchone()
            if row is None:
                return None
            handlers = connection.execute("SELECT * FROM handlers WHERE function_name = ? "
                                          "ORDER BY kind = 'schedule', position", (name,)).fetchall()
        return _function(row, _handlers_by_function(handlers).get(name, ()))

    def function_stats(self, name):
        """The latest persisted FunctionStats of one function; zeros when it has none yet."""
        with self._connect() as connection:
            row = None if connection is None else connection.execute(
                "SELECT * FROM function_stats WHERE function_name = ?", (name,)).fetchone()
        if row is None:
            return FunctionStats()
        return FunctionStats(counters=Counters(*(row[column] for column in _COUNTER_COLUMNS)),
                             warm_containers=row["warm_containers"],
                             waits=LimitWaits(*(row[column] for column in _WAIT_COLUMNS)))

    def stats(self):
        with self._connect() as connection:
            row = None if connection is None else connection.execute("SELECT * FROM stats WHERE id = 1").fetchone()
        if row is None:
            return Stats()
        return Stats(counters=Counters(*(row[column] for column in _COUNTER_COLUMNS)),
                     pending_entries=row["pending_entries"],
                     oldest_pending_age_seconds=row["oldest_pending_age_seconds"],
                     updated_at=parse_time(row["updated_at"]))

    @property
    def missing(self):
        """Whether there is no database file at all: Relay has not run here (or runs in a container).
        Raises StateError when this user may not look (see _ReadConnection)."""
        return not _exists(self.path)

    def _connect(self):
        return _ReadConnection(self.path)


def _exists(path):
    """Whether *path* exists; StateError when this user may not even look.

    On the shipped systemd unit (DynamicUser, StateDirectoryMode=0700) an
    operator who is not root cannot reach the file: that is one line saying
    so and what to do, not a traceback.
    """
    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return False
    except PermissionError:
        raise StateError(_unreadable(path)) from None
    if not os.access(path, os.R_OK):
        raise StateError(_unreadable(path))
    return True


def _unreadable(path):
    return (f"the state database {path} is not readable by user {_user()}: read it as root "
            f"(sudo relay ...), or as a member of the group that owns {path.parent}")


def _user():
    """This process's user by its uid, not by $USER (setpriv and su keep the caller's); "uid N" without a name."""
    import pwd

    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


class _ReadConnection:
    """A context manager yielding a read-only connection, or None for a missing file.

    A database of another schema version raises StateError unless *any_version*.
    """

    def __init__(self, path, *, any_version=False):
        self.path = path
        self.any_version = any_version
        self.connection = None

    def __enter__(self):
        if not _exists(self.path):
            return None
        try:
            self.connection = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=ro", uri=True,
                                              timeout=BUSY_TIMEOUT)
            self.connection.row_factory = sqlite3.Row
            tables = {row[0] for row in self.connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            version = self.connection.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.Error as error:
            self.__exit__(None, None, None)
            raise StateError(f"cannot read the state database {self.path}: {reason(error, strerror=False)}") from None
        if not tables:
            return None                         # created, not written yet
        if not tables.issuperset(_TABLES):
            self.__exit__(None, None, None)
            raise StateError(f"{self.path} is not a Relay state database (tables: {', '.join(sorted(tables))})")
        if version != SCHEMA_VERSION and not self.any_version:
            # A Relay of another version wrote it (an upgrade before the restart, say): its columns differ.
            self.__exit__(None, None, None)
            raise StateError(f"{self.path} has schema version {version} and this Relay reads version "
                             f"{SCHEMA_VERSION}; it is rebuilt when this version of Relay starts")
        return self.connection

    def __exit__(self, kind, error, traceback):
        if self.connection is not None:
            self.connection.close()
            self.connection = None
        if isinstance(error, sqlite3.Error):
            raise StateError(f"cannot read the state database {self.path}: {reason(error, strerror=False)}") from None
        return False


def _handlers_by_function(rows):
    grouped = {}
    for row in rows:
        grouped.setdefault(row["function_name"], []).append(HandlerRecord(
            handler=row["handler"], timeout=row["timeout"], kind=row["kind"], cron=row["cron"],
            timezone=row["timezone"]))
    return {name: tuple(items) for name, items in grouped.items()}


def _function(row, handlers):
    return FunctionRecord(
        name=row["name"], runtime=row["runtime"], status=row["status"], image=row["image"],
        fingerprint=row["fingerprint"], prepared_at=parse_time(row["prepared_at"]),
        last_reconcile_at=parse_time(row["last_reconcile_at"]), last_reconcile_status=row["last_reconcile_status"],
        last_error=row["last_error"], updated_at=parse_time(row["updated_at"]), env=json.loads(row["env"]),
        secrets=json.loads(row["secrets"]), handlers=handlers,
        warm=None if row["warm"] is None else WarmRecord(**json.loads(row["warm"])),
        rate_limit=row["rate_limit"], concurrency_key=row["concurrency_key"])
