"""Reading the state database back: what ``relay function`` and ``relay stats`` show.

Read-only, and never the writer's connection: a reader opens the file with
``mode=ro`` for one question and closes it. A missing file reads as an
empty database, a file that is not a Relay state database or is of another
schema version is one StateError naming the file (relay.view.report prints
it as one line). Only the standard library is imported here.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Literal

from relay.errors import StateError, reason
from relay.view.database import (
    BUSY_TIMEOUT,
    COUNTER_COLUMNS,
    DB_PATH,
    SCHEMA_VERSION,
    TABLES,
    WAIT_COLUMNS,
    parse_time,
)
from relay.view.records import (
    Counters,
    FunctionRecord,
    FunctionStats,
    HandlerRecord,
    LimitWaits,
    Stats,
    WarmRecord,
)


class StateReader:
    """Read-only access for ``relay function`` and ``relay stats``.

    A missing file reads as an empty database (Relay has not written one
    yet); it is never created here. A file that is not a Relay state
    database raises StateError.
    """

    def __init__(self, path: str | os.PathLike[str] = DB_PATH) -> None:
        self.path = Path(path)

    def functions(self) -> list[FunctionRecord]:
        """Every function, sorted by name."""
        with self._connect() as connection:
            if connection is None:
                return []
            rows = connection.execute("SELECT * FROM functions ORDER BY name").fetchall()
            handlers = _handlers_by_function(connection.execute(
                "SELECT * FROM handlers ORDER BY function_name, kind = 'schedule', position").fetchall())
        return [_function(row, handlers.get(row["name"], ())) for row in rows]

    def function_names(self) -> set[str]:
        """The names of the functions, from a database of any schema version (the names of the
        previous run survive an upgrade: the startup image GC needs them before the file is rebuilt)."""
        with _ReadConnection(self.path, any_version=True) as connection:
            if connection is None:
                return set()
            return {row["name"] for row in connection.execute("SELECT name FROM functions")}

    def function(self, name: str) -> FunctionRecord | None:
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

    def function_stats(self, name: str) -> FunctionStats:
        """The latest persisted FunctionStats of one function; zeros when it has none yet."""
        with self._connect() as connection:
            row = None if connection is None else connection.execute(
                "SELECT * FROM function_stats WHERE function_name = ?", (name,)).fetchone()
        if row is None:
            return FunctionStats()
        return FunctionStats(counters=Counters(*(row[column] for column in COUNTER_COLUMNS)),
                             warm_containers=row["warm_containers"],
                             waits=LimitWaits(*(row[column] for column in WAIT_COLUMNS)))

    def stats(self) -> Stats:
        with self._connect() as connection:
            row = None if connection is None else connection.execute("SELECT * FROM stats WHERE id = 1").fetchone()
        if row is None:
            return Stats()
        return Stats(counters=Counters(*(row[column] for column in COUNTER_COLUMNS)),
                     pending_entries=row["pending_entries"],
                     oldest_pending_age_seconds=row["oldest_pending_age_seconds"],
                     updated_at=parse_time(row["updated_at"]))

    @property
    def missing(self) -> bool:
        """Whether there is no database file at all: Relay has not run here (or runs in a container).
        Raises StateError when this user may not look (see _ReadConnection)."""
        return not _exists(self.path)

    def _connect(self) -> _ReadConnection:
        return _ReadConnection(self.path)


def _exists(path: Path) -> bool:
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


def _unreadable(path: Path) -> str:
    return (f"the state database {path} is not readable by user {_user()}: read it as root "
            f"(sudo relay ...), or as a member of the group that owns {path.parent}")


def _user() -> str:
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

    def __init__(self, path: Path, *, any_version: bool = False) -> None:
        self.path = path
        self.any_version = any_version
        self.connection: sqlite3.Connection | None = None

    def __enter__(self) -> sqlite3.Connection | None:
        if not _exists(self.path):
            return None
        try:
            self.connection = connection = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=ro", uri=True,
                                                           timeout=BUSY_TIMEOUT)
            connection.row_factory = sqlite3.Row
            tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            version = connection.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.Error as error:
            self.__exit__(None, None, None)
            raise StateError(f"cannot read the state database {self.path}: {reason(error, strerror=False)}") from None
        if not tables:
            return None                         # created, not written yet
        if not tables.issuperset(TABLES):
            self.__exit__(None, None, None)
            raise StateError(f"{self.path} is not a Relay state database (tables: {', '.join(sorted(tables))})")
        if version != SCHEMA_VERSION and not self.any_version:
            # A Relay of another version wrote it (an upgrade before the restart, say): its columns differ.
            self.__exit__(None, None, None)
            raise StateError(f"{self.path} has schema version {version} and this Relay reads version "
                             f"{SCHEMA_VERSION}; it is rebuilt when this version of Relay starts")
        return connection

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> Literal[False]:
        if self.connection is not None:
            self.connection.close()
            self.connection = None
        if isinstance(error, sqlite3.Error):
            raise StateError(f"cannot read the state database {self.path}: {reason(error, strerror=False)}") from None
        return False


def _handlers_by_function(rows: Sequence[sqlite3.Row]) -> dict[str, tuple[HandlerRecord, ...]]:
    grouped: dict[str, list[HandlerRecord]] = {}
    for row in rows:
        grouped.setdefault(row["function_name"], []).append(HandlerRecord(
            handler=row["handler"], timeout=row["timeout"], kind=row["kind"], cron=row["cron"],
            timezone=row["timezone"]))
    return {name: tuple(items) for name, items in grouped.items()}


def _function(row: sqlite3.Row, handlers: tuple[HandlerRecord, ...]) -> FunctionRecord:
    return FunctionRecord(
        name=row["name"], runtime=row["runtime"], status=row["status"], image=row["image"],
        fingerprint=row["fingerprint"], prepared_at=parse_time(row["prepared_at"]),
        last_reconcile_at=parse_time(row["last_reconcile_at"]), last_reconcile_status=row["last_reconcile_status"],
        last_error=row["last_error"], updated_at=datetime.fromisoformat(row["updated_at"]),  # NOT NULL
        env=json.loads(row["env"]),
        secrets=json.loads(row["secrets"]), handlers=handlers,
        warm=None if row["warm"] is None else WarmRecord(**json.loads(row["warm"])),
        rate_limit=row["rate_limit"], concurrency_key=row["concurrency_key"])
