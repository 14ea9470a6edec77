"""The dead-letter stream, for an operator: read its entries, send them back, delete them.

``relay dlq`` uses it; it is plain redis-py (no gevent). A dead-letter entry
is the flat hash the settler writes (relay.stream.keys): original_stream,
original_id, group, consumer, event, reason, attempts, timestamp,
truncated/event_bytes when the event was too big to keep whole, and, when
an attempt ran in the dispatch that gave up, that last attempt's run_id (its
record in the run ledger), run_status, exit_code and the end of its stderr.

Redrive adds each entry's event back to the stream as a new entry (fields
``event`` and ``redriven_from=<dead-letter id>``) and deletes the dead-letter
entry in the same Lua script, so a crash never loses or doubles one. Every
id is checked before anything changes: one unknown id, or one entry whose
event was cut, changes nothing. Purge deletes the same way. The new entry
has a new id, so its invocations start with fresh attempts.

A schedule occurrence Relay published keeps its occurrence id in the
dead-letter entry's ``schedule`` field; redrive sends it back with it and, in
the same script, points the occurrence's dedup key at the new entry, since
the consumer runs only the entry that key names. It does so only while the
key still names the entry that was dead-lettered: a key that expired (7 days
after publication) or names another entry is left alone, and the redriven
entry is dead-lettered again, unrun.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import cast

import redis

from relay.errors import DeadLetterError
from relay.stream import keys

PAGE = 500  # entries read per XREVRANGE while listing
Entries = list[tuple[bytes | str, dict[bytes, bytes]]]   # XRANGE's and XREVRANGE's reply
_ENTRY_ID = re.compile(r"\d{1,20}-\d{1,20}", re.ASCII)
_EXHAUSTED = re.compile(r"attempts exhausted for ([^;]+)(?:; |$)")   # "; older than max_event_age ..." may follow

# KEYS: the dead-letter stream, the stream. ARGV: dead-letter ids. Returns the new entries' ids,
# or an error reply naming the first id that is unknown or whose event was cut; then nothing changed.
# An entry that keeps a schedule occurrence's id goes back with it, and when the occurrence's dedup key
# still names the entry that was dead-lettered, it names the new entry from then on (so it runs).
_REDRIVE = f"""
local entries = {{}}
for index, id in ipairs(ARGV) do
  local found = redis.call('XRANGE', KEYS[1], id, id)
  if #found == 0 then return redis.error_reply('unknown ' .. id) end
  local fields = found[1][2]
  local entry = {{event = ''}}
  for at = 1, #fields, 2 do
    local name, value = fields[at], fields[at + 1]
    if name == '{keys.EVENT}' then entry.event = value end
    if name == '{keys.DLQ_TRUNCATED}' and value == 'true' then return redis.error_reply('truncated ' .. id) end
    if name == '{keys.DLQ_SCHEDULE}' then entry.occurrence = value end
    if name == '{keys.DLQ_ORIGINAL_ID}' then entry.original = value end
  end
  entries[index] = entry
end
local added = {{}}
for index, id in ipairs(ARGV) do
  local entry = entries[index]
  if entry.occurrence then
    added[index] = redis.call('XADD', KEYS[2], '*', '{keys.EVENT}', entry.event, '{keys.SCHEDULE}', entry.occurrence,
                              '{keys.REDRIVEN_FROM}', id)
    local key = '{keys.SCHEDULE_KEY_PREFIX}' .. entry.occurrence
    if entry.original and redis.call('GET', key) == entry.original then
      redis.call('SET', key, added[index], 'KEEPTTL')
    end
  else
    added[index] = redis.call('XADD', KEYS[2], '*', '{keys.EVENT}', entry.event, '{keys.REDRIVEN_FROM}', id)
  end
  redis.call('XDEL', KEYS[1], id)
end
return added
"""

# KEYS: the dead-letter stream. ARGV: dead-letter ids. Deletes them all, or none when one is unknown.
_PURGE = """
for _, id in ipairs(ARGV) do
  if #redis.call('XRANGE', KEYS[1], id, id) == 0 then return redis.error_reply('unknown ' .. id) end
end
if #ARGV == 0 then return 0 end
return redis.call('XDEL', KEYS[1], unpack(ARGV))
"""


@dataclass(frozen=True)
class DeadLetter:
    """One dead-letter entry. ``event`` is bytes: a dead-lettered event need not be UTF-8."""

    dlq_id: str
    original_id: str
    original_stream: str
    group: str
    consumer: str
    event: bytes
    reason: str
    attempts: int | None   # None when the field is missing or not ASCII digits: attempts_text says what it was
    timestamp: str
    truncated: bool = False
    event_bytes: int | None = None
    attempts_text: str = ""
    schedule: str | None = None   # the occurrence id, when the entry was one Relay's scheduler published
    run_id: str | None = None     # the last attempt's record in the run ledger, when it was written
    run_status: str | None = None  # how that attempt ended (relay.runs.record.RunStatus), when it ran here
    exit_code: int | None = None
    stderr: str = ""              # the end of its stderr (2 KiB)

    @classmethod
    def of(cls, entry_id: bytes | str, fields: dict[bytes, bytes]) -> DeadLetter:
        def text(name: str) -> str:
            return fields.get(name.encode(), b"").decode("utf-8", "replace")

        return cls(
            dlq_id=entry_id.decode() if isinstance(entry_id, bytes) else entry_id,
            original_id=text(keys.DLQ_ORIGINAL_ID), original_stream=text(keys.DLQ_ORIGINAL_STREAM),
            group=text(keys.DLQ_GROUP), consumer=text(keys.DLQ_CONSUMER), event=fields.get(keys.EVENT_FIELD, b""),
            reason=text(keys.DLQ_REASON), attempts=_number(text(keys.DLQ_ATTEMPTS)),
            timestamp=text(keys.DLQ_TIMESTAMP), truncated=text(keys.DLQ_TRUNCATED) == "true",
            event_bytes=_number(text(keys.DLQ_EVENT_BYTES)), attempts_text=text(keys.DLQ_ATTEMPTS),
            schedule=text(keys.DLQ_SCHEDULE) or None, run_id=text(keys.DLQ_RUN_ID) or None,
            run_status=text(keys.DLQ_RUN_STATUS) or None, exit_code=_signed(text(keys.DLQ_EXIT_CODE)),
            stderr=text(keys.DLQ_STDERR))

    @property
    def dead_lettered_ms(self) -> int:
        """When it was dead-lettered, in unix milliseconds: the first part of its id."""
        return int(self.dlq_id.partition("-")[0])

    @property
    def targets(self) -> tuple[str, ...]:
        """The ``function/handler`` whose attempts ran out, when the reason names them."""
        found = _EXHAUSTED.match(self.reason)
        return tuple(found.group(1).split(", ")) if found else ()

    @property
    def cause(self) -> str:
        """The reason without the targets it names (they have a column of their own):
        ``attempts exhausted; older than max_event_age ...``."""
        found = _EXHAUSTED.match(self.reason)
        if not found:
            return self.reason
        rest = self.reason[found.end():]
        return f"attempts exhausted; {rest}" if rest else "attempts exhausted"

    @property
    def functions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(target.partition("/")[0] for target in self.targets))


class DeadLetters:
    """The dead-letter stream of *stream* (``relay:<stream>:dlq``)."""

    def __init__(self, client: redis.Redis, stream: str) -> None:
        self.client = client
        self.stream = stream
        self.key = keys.dlq_stream(stream)

    def newest(self, limit: int | None = None, function: str | None = None,
               since_ms: int | None = None) -> list[DeadLetter]:
        """The entries, oldest first: the newest *limit* of those of *function* dead-lettered since *since_ms*."""
        kept: list[DeadLetter] = []
        for letter in self._newest_first(since_ms):
            if function is None or function in letter.functions:
                kept.append(letter)
                if limit is not None and len(kept) >= limit:
                    break
        return kept[::-1]

    def get(self, ids: Iterable[str]) -> list[DeadLetter]:
        """The entries *ids*, in that order; DeadLetterError naming the first that is not there."""
        found = []
        for dlq_id in _checked(ids):
            entries = cast("Entries", self.client.xrange(self.key, dlq_id, dlq_id))
            if not entries:
                raise DeadLetterError(f"no dead-letter entry {dlq_id} in {self.key}")
            found.append(DeadLetter.of(*entries[0]))
        return found

    def redrive(self, ids: Iterable[str]) -> list[tuple[str, str]]:
        """Send the entries *ids* back to the stream; (dead-letter id, new entry id) pairs."""
        ids = _checked(ids)
        if not ids:
            return []
        try:
            added = self.client.eval(_REDRIVE, 2, self.key, self.stream, *ids)
        except redis.ResponseError as error:
            raise self._refused(error) from None
        return [(dlq_id, new.decode() if isinstance(new, bytes) else new)
                for dlq_id, new in zip(ids, added, strict=True)]

    def purge(self, ids: Iterable[str]) -> int:
        """Delete the entries *ids*, all or none; how many were deleted."""
        ids = _checked(ids)
        if not ids:
            return 0
        try:
            return int(self.client.eval(_PURGE, 1, self.key, *ids))
        except redis.ResponseError as error:
            raise self._refused(error) from None

    def _newest_first(self, since_ms: int | None) -> Iterator[DeadLetter]:
        low = f"{since_ms}-0" if since_ms is not None else "-"
        high = "+"
        while True:
            page = cast("Entries", self.client.xrevrange(self.key, high, low, count=PAGE))
            for entry_id, fields in page:
                yield DeadLetter.of(entry_id, fields)
            if len(page) < PAGE:
                return
            last = page[-1][0]
            high = "(" + (last.decode() if isinstance(last, bytes) else last)

    def _refused(self, error: redis.ResponseError) -> DeadLetterError:
        why, _, dlq_id = str(error).partition(" ")
        if why == "unknown":
            return DeadLetterError(f"no dead-letter entry {dlq_id} in {self.key}; nothing was changed")
        if why == "truncated":
            return DeadLetterError(f"dead-letter entry {dlq_id} holds only the start of its event (it was too big "
                                   f"to keep whole), so it cannot be sent back; nothing was changed")
        return DeadLetterError(f"Redis refused the change: {error}; nothing was changed")


def since(nanoseconds: int, now: float | None = None) -> int:
    """The unix milliseconds *nanoseconds* before *now* (default: the clock)."""
    return int(((time.time() if now is None else now) * 1e9 - nanoseconds) // 1_000_000)


def _checked(ids: Iterable[str]) -> list[str]:
    ids = list(dict.fromkeys(ids))
    for dlq_id in ids:
        if not _ENTRY_ID.fullmatch(dlq_id):
            raise DeadLetterError(f"{dlq_id!r} is not a stream entry id (like 1700000000000-0)")
    return ids


def _signed(text: str) -> int | None:
    """An exit code: ``_number``, or ``-`` and one (a signal, as the engine may report it)."""
    if text.startswith("-"):
        value = _number(text[1:])
        return -value if value is not None else None
    return _number(text)


def _number(text: str) -> int | None:
    """*text* as a number when it is 1 to 18 ASCII digits, else None.

    Anyone who can write to Redis can write these fields: "²" or "٣" pass
    str.isdigit but not int(), and 5000 digits pass int() only past Python's
    digit limit, so neither may end a listing in a traceback.
    """
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None
