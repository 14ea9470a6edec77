"""The run ledger read back: ``relay runs`` and ``relay function inspect``.

The ledger holds up to RUNS_MAX_ENTRIES records of up to about 10 KiB, so
it is never read whole: a Lua script scans one page of it (PAGE entries,
newest first or oldest first) and returns only the records that match, and
of each only the fields a record has (relay.runs.record), each cut to
FIELD_BYTES, with the id it stopped at. A call holds Redis for one page at
most, the reply is bounded whatever anyone wrote, and the client asks for
the next page only while it wants more. A record with odd fields (missing,
repeated, not UTF-8, huge, unknown names) is matched on what it has and
decoded as ``decode`` decodes anything.

Filters match a record's fields exactly: the function, the handler, the
event id, the source entry; an outcome (``--status``) is a RunStatus value,
or ``dead-lettered``, which matches the record whose ``settled`` says so
(the last run of a dispatch, or a settlement). Times select by the record's
id, which is when it was written: when the attempt ended.

Plain redis-py, no gevent: the admin commands use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import redis

from relay.errors import RunsError
from relay.quoting import quote
from relay.runs import record
from relay.runs.record import Run, RunStatus, Settled, decode
from relay.stream.keys import runs_stream

PAGE = 250             # ledger entries one script call scans, at most: ~8 ms of Redis for 10 KiB records
FIELD_BYTES = 8192     # of any one field, returned: twice a tail, so a record as written comes back whole
MAX_FIELDS = 64        # of one entry, looked at: a record has about 25
SKEW_MS = 60_000       # an entry's records are looked for from a minute before its id's time
FOLLOW_BLOCK_MS = 2000  # one XREAD BLOCK of ``follow``: well under the client's socket timeout
_ID = re.compile(r"(\d{1,20})-(\d{1,20})", re.ASCII)

FIELDS = record.FIELDS   # the fields a record has: the only ones the script looks at and returns

# KEYS: the ledger. ARGV: 'rev' (newest first) or 'fwd'; the range's first and last id as XRANGE takes them
# (for 'rev', the last first; "(" makes one exclusive); the entries to scan; the matches wanted; the bytes kept
# of a field; n, then n (field, value) pairs that must all hold; then (field, value) pairs of which one must
# hold (none: any record). Returns the id scanned last ("" when none), 1 when the range has no more entries
# (else 0), then each match as {id, field, value, field, value, ...} with only the fields a record has.
_SCAN = """
local known = {KNOWN}
local count, want, cut = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local either_from = 8 + 2 * tonumber(ARGV[7])
local required, either = {}, {}
for index = 8, either_from - 1, 2 do required[#required + 1] = {ARGV[index], ARGV[index + 1]} end
for index = either_from, #ARGV - 1, 2 do either[#either + 1] = {ARGV[index], ARGV[index + 1]} end
local command = ARGV[1] == 'rev' and 'XREVRANGE' or 'XRANGE'
local page = redis.call(command, KEYS[1], ARGV[2], ARGV[3], 'COUNT', count)
local found, last, stopped = {}, '', false
for _, entry in ipairs(page) do
  last = entry[1]
  local fields, values = entry[2], {}
  for index = 1, math.min(#fields - 1, MAX_ITEMS), 2 do
    local name = fields[index]
    if known[name] and values[name] == nil then values[name] = fields[index + 1] end
  end
  local ok = true
  for _, pair in ipairs(required) do
    if values[pair[1]] ~= pair[2] then ok = false; break end
  end
  if ok and #either > 0 then
    ok = false
    for _, pair in ipairs(either) do
      if values[pair[1]] == pair[2] then ok = true; break end
    end
  end
  if ok then
    local match = {entry[1]}
    for name, value in pairs(values) do
      match[#match + 1] = name
      match[#match + 1] = string.sub(value, 1, cut)
    end
    found[#found + 1] = match
    if #found >= want then stopped = true; break end
  end
end
local result = {last, (not stopped and #page < count) and 1 or 0}
for _, match in ipairs(found) do result[#result + 1] = match end
return result
""".replace("KNOWN", ", ".join(f"['{name}'] = true" for name in FIELDS)).replace("MAX_ITEMS", str(2 * MAX_FIELDS))

DEAD_LETTERED = Settled.DEAD_LETTERED.value
# What --status takes, as a person writes it: a RunStatus with hyphens for spaces, or dead-lettered.
OUTCOMES = (*(status.value.replace(" ", "-") for status in RunStatus), DEAD_LETTERED)


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which records to read: each field set must match; any of *outcomes* (none: any outcome)."""

    function: str | None = None
    handler: str | None = None
    outcomes: tuple[str, ...] = ()     # RunStatus values, or DEAD_LETTERED (parse_outcomes)
    since_ms: int | None = None        # records written at or after, in unix milliseconds
    until_ms: int | None = None        # ... and at or before
    event_id: str | None = None
    entry: str | None = None           # the source stream entry's id

    def required(self) -> list[tuple[str, str]]:
        pairs = ((record.FUNCTION, self.function), (record.HANDLER, self.handler),
                 (record.EVENT_ID, self.event_id), (record.ENTRY, self.entry))
        return [(name, value) for name, value in pairs if value is not None]

    def either(self) -> list[tuple[str, str]]:
        return [(record.SETTLED, outcome) if outcome == DEAD_LETTERED else (record.STATUS, outcome)
                for outcome in self.outcomes]

    def low(self) -> str:
        """The range's first id: since_ms, or a minute before the entry's time, whichever is later."""
        low = max(0, self.since_ms) if self.since_ms is not None else None
        if self.entry is not None:
            entry_low = max(0, entry_time(self.entry) - SKEW_MS)
            low = entry_low if low is None else max(low, entry_low)
        return "-" if low is None else f"{low}-0"

    def high(self) -> str:
        return "+" if self.until_ms is None else f"{max(0, self.until_ms)}-{2 ** 64 - 1}"


def parse_outcomes(text: str, option: str = "--status") -> tuple[str, ...]:
    """The outcomes *text* names, one or several joined by commas: ``failed``, ``timed-out``, ``timed out``."""
    found = []
    for word in text.split(","):
        name = " ".join(word.strip().lower().replace("-", " ").replace("_", " ").split())
        if name == DEAD_LETTERED.replace("-", " "):
            found.append(DEAD_LETTERED)
        elif name in {status.value for status in RunStatus}:
            found.append(name)
        else:
            raise RunsError(f"{option}={quote(text)} is not a run outcome; use one of {', '.join(OUTCOMES)} "
                            "(several joined by commas)")
    return tuple(dict.fromkeys(found))


def checked_id(text: str, what: str) -> str:
    """*text* when it is a stream entry id (``1733479200000-0``); RunsError naming *what* otherwise."""
    if not _ID.fullmatch(text) or int(text.partition("-")[0]) >= 2 ** 64 or int(text.partition("-")[2]) >= 2 ** 64:
        raise RunsError(f"{quote(text)} is not {what} (a stream entry id such as 1733479200000-0)")
    return text


def entry_time(entry_id: str) -> int:
    """The unix milliseconds of *entry_id*'s first part (0 when it is not an id)."""
    found = _ID.fullmatch(entry_id)
    return int(found.group(1)) if found else 0


class Runs:
    """The run ledger of *stream* (``relay:<stream>:runs``), read page by page."""

    def __init__(self, client: redis.Redis, stream: str) -> None:
        self.client = client
        self.stream = stream
        self.key = runs_stream(stream)
        self._scan = client.register_script(_SCAN)

    def newest(self, filters: RunFilter = RunFilter(), limit: int = 20) -> list[Run]:
        """The newest *limit* records that match *filters*, newest first."""
        return list(self._records(filters.low(), filters.high(), filters, newest_first=True, limit=limit))

    def page(self, filters: RunFilter = RunFilter(), limit: int = 50, *, before: str | None = None,
             after: str | None = None, newest_first: bool = True, pages: int = 8) -> tuple[list[Run], str | None]:
        """At most *limit* matching records, newest first (or oldest first), from scanning at most *pages* pages
        of the ledger: of those written before the record *before*, and after the record *after* (exclusive).

        The console's read: it holds Redis for *pages* script calls at most whatever the filters. Returns the
        records and the id the scan stopped at, to continue from (None when the range holds no more)."""
        high = f"({checked_id(before, 'a run id')}" if before else filters.high()
        low = f"({checked_id(after, 'a run id')}" if after else filters.low()
        start, end = (high, low) if newest_first else (low, high)
        found: list[Run] = []
        for _ in range(pages):
            last, done, matches = self._page(start, end, filters, newest_first, min(limit - len(found), PAGE))
            found += matches
            if done or not last:
                return found, None
            if len(found) >= limit:
                return found, last
            start = f"({last}"
        return found, start[1:]

    def oldest(self, filters: RunFilter = RunFilter()) -> Iterator[Run]:
        """Every record that matches *filters*, oldest first, page by page (filtered in Redis)."""
        return self._records(filters.low(), filters.high(), filters, newest_first=False)

    def get(self, run_id: str) -> Run | None:
        """The record *run_id*, or None."""
        checked_id(run_id, "a run id")
        found = list(self._records(run_id, run_id, RunFilter(), newest_first=False, limit=1))
        return found[0] if found else None

    def of_entry(self, entry_id: str) -> list[Run]:
        """Every record of the source entry *entry_id*, oldest first."""
        checked_id(entry_id, "an entry id")
        filters = RunFilter(entry=entry_id)
        return list(self._records(filters.low(), "+", filters, newest_first=False))

    def follow(self, filters: RunFilter = RunFilter()) -> Iterator[Run]:
        """The records written from now on that match *filters*, as they come, oldest first; never ends.

        "Now" is read at the call, so nothing written after it is missed. With
        ``since_ms``, the records written since then come first. ``until_ms`` is not looked at.
        """
        if filters.since_ms is not None:
            start = f"{filters.since_ms - 1}-{2 ** 64 - 1}" if filters.since_ms > 0 else "0-0"
        else:
            newest = cast("list[tuple[bytes, Any]]", self.client.xrevrange(self.key, "+", "-", count=1))
            start = newest[0][0].decode() if newest else "0-0"
        return self._follow(filters, start)

    def _follow(self, filters: RunFilter, cursor: str) -> Iterator[Run]:
        while True:
            if not self.client.xread({self.key: cursor}, count=1, block=FOLLOW_BLOCK_MS):
                continue
            while True:
                last, done, found = self._page(f"({cursor}", "+", filters, newest_first=False, want=PAGE)
                yield from found
                cursor = last or cursor
                if done or not last:
                    break

    def _records(self, low: str, high: str, filters: RunFilter, newest_first: bool,
                 limit: int | None = None) -> Iterator[Run]:
        """The matching records of the range [low, high] (as XRANGE takes them), page by page."""
        start, end = (high, low) if newest_first else (low, high)
        wanted = limit
        while wanted is None or wanted > 0:
            last, done, found = self._page(start, end, filters, newest_first,
                                           PAGE if wanted is None else min(wanted, PAGE))
            yield from found
            if wanted is not None:
                wanted -= len(found)
            if done or not last:
                return
            start = f"({last}"

    def _page(self, start: str, end: str, filters: RunFilter, newest_first: bool,
              want: int) -> tuple[str, bool, list[Run]]:
        required = filters.required()
        arguments: list[str | int] = ["rev" if newest_first else "fwd", start, end, PAGE, want, FIELD_BYTES,
                                      len(required)]
        for pair in (*required, *filters.either()):
            arguments.extend(pair)
        reply = cast("list[Any]", self._scan(keys=[self.key], args=arguments))
        last, done, *matches = reply
        found = [decode(match[0], dict(zip(match[1::2], match[2::2], strict=True))) for match in matches]
        return last.decode() if isinstance(last, bytes) else str(last), int(done) == 1, found
