"""The write-behind's journal: what a worker owes Redis, in a file of its own under the state directory.

A worker killed while Redis is down (or before it has written what it owed
once Redis answered) would lose its owed claims, markers and
acknowledgments with its memory, and every entry it had run in the outage
would run again. The journal mirrors them to ``owed-<consumer>.jsonl``: one
JSON line each time something is owed, the file emptied whenever nothing is
left. The worker started again under the same consumer name reads it and
writes what it finds (relay.stream.writebehind).

A killed process loses nothing it wrote to a file, so no fsync: a host that
crashes may lose the last lines, and those entries run again, as they did
before the journal. Stale lines are harmless: every owed write is safe to
repeat or to come late. The journal is a mirror, never a source of failure:
a file that cannot be written is logged once, and the worker goes on with
what it holds in memory.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from relay.files import owner_of
from relay.stream.owed import Mark, Owed

log = logging.getLogger("relay.stream.journal")


class Journal:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._broken = False

    def record(self, message_id: str, owed: Owed) -> None:
        """Append what is now owed for *message_id* (the last line of an entry is what counts)."""
        self._append(_line(message_id, owed))

    def rewrite(self, owed: Mapping[str, Owed]) -> None:
        """Empty the file, then write what is still owed (nothing: the file stays empty)."""
        fd = self._open()
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        except OSError as error:
            self._fail(error)
            return
        if owed:
            self._append(b"".join(_line(message_id, entry) for message_id, entry in owed.items()))

    def load(self) -> dict[str, Owed]:
        """What the file says is owed (a missing file: nothing); lines that cannot be read are skipped."""
        try:
            text = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as error:
            log.warning("Cannot read the write-behind's journal; what it held may run again",
                        extra={"path": str(self.path), "error": error.strerror or str(error)})
            return {}
        owed: dict[str, Owed] = {}
        skipped = 0
        for line in text.splitlines():
            try:
                message_id, entry = _parse(line)
            except (ValueError, KeyError, TypeError, IndexError):
                skipped += 1
                continue
            owed[message_id] = entry
        if skipped:
            log.warning("Lines of the write-behind's journal could not be read; skipped",
                        extra={"path": str(self.path), "lines": skipped})
        return owed

    @property
    def writable(self) -> bool:
        """False once a write failed: the journal is then no longer kept."""
        return not self._broken

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _append(self, data: bytes) -> None:
        fd = self._open()
        if fd is None:
            return
        try:
            os.write(fd, data)
        except OSError as error:
            self._fail(error)

    def _open(self) -> int | None:
        if self._fd is not None or self._broken:
            return self._fd
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            owner = owner_of(self.path.parent)
            if owner is not None:
                os.fchown(self._fd, *owner)
        except OSError as error:
            self._fail(error)
        return self._fd

    def _fail(self, error: OSError) -> None:
        if not self._broken:
            log.warning("Cannot write the write-behind's journal; what is owed to Redis is kept in memory only",
                        extra={"path": str(self.path), "error": error.strerror or str(error)})
        self._broken = True
        self.close()


def _line(message_id: str, owed: Owed) -> bytes:
    entry: dict[str, Any] = {"id": message_id, "ack": owed.ack, "clear": owed.clear_state,
                             "marks": [[mark.field, mark.value,
                                        None if mark.expected is None else mark.expected.decode("latin-1")]
                                       for mark in owed.marks]}
    if owed.records:
        entry["records"] = list(owed.records)
    return json.dumps(entry, separators=(",", ":")).encode() + b"\n"


def _parse(line: bytes) -> tuple[str, Owed]:
    entry = json.loads(line)
    marks = tuple(Mark(str(field), str(value), None if expected is None else str(expected).encode("latin-1"))
                  for field, value, expected in entry["marks"])
    records = tuple({str(name): str(value) for name, value in fields.items()} for fields in entry.get("records", ()))
    return str(entry["id"]), Owed(0.0, marks=marks, ack=bool(entry["ack"]), clear_state=bool(entry["clear"]),
                                  records=records)
