"""What the console reads from Redis, every read bounded: one call or a fixed number of pages.

- ``backlog``: the group's pending count and oldest pending entry (XPENDING's
  summary), the lengths of the stream, the dead-letter stream and the ledger,
  and the group's lag when Redis reports it (XINFO GROUPS).
- ``recent_runs``: the last hour of the ledger for the charts, newest first,
  through a script that returns only the six short fields a chart needs, at
  most CHART_RECORDS records however busy the hour was (a page says so when
  it holds only part of the hour).
- ``event_of``: one entry of the source stream, if retention has not trimmed it.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, cast

import redis

from relay.runs import record
from relay.runs.record import Run, decode
from relay.stream.keys import EVENT_FIELD, dlq_stream, runs_stream

HOUR_MS = 3_600_000
CHART_RECORDS = 5_000    # ledger records read for the charts, at most: about 100 ms of Redis
CHART_PAGE = 1_000       # per script call
EVENT_SHOWN = 64 * 1024  # bytes of an event shown on a run's page
_CHART_FIELDS = (record.KIND, record.FUNCTION, record.STATUS, record.STARTED, record.DURATION, record.SETTLED)

# KEYS: the ledger. ARGV: the highest id (XREVRANGE's end), the lowest, COUNT. Returns the id scanned last ("" when
# none), then each entry as {id, field, value, ...} with only the chart's fields, each cut to 64 bytes.
_SUMMARY = """
local wanted = WANTED
local page = redis.call('XREVRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', tonumber(ARGV[3]))
local result = {page[#page] and page[#page][1] or ''}
for _, entry in ipairs(page) do
  local fields, item = entry[2], {entry[1]}
  for index = 1, math.min(#fields - 1, 128), 2 do
    if wanted[fields[index]] then
      item[#item + 1] = fields[index]
      item[#item + 1] = string.sub(fields[index + 1], 1, 64)
    end
  end
  result[#result + 1] = item
end
return result
""".replace("WANTED", "{" + ", ".join(f"['{name}'] = true" for name in _CHART_FIELDS) + "}")


@dataclass(frozen=True)
class Backlog:
    pending: int | None            # None: the group does not exist (yet)
    oldest_pending_age_s: float | None
    lag: int | None                # entries not yet delivered to the group, when Redis says
    stream_length: int
    dead_letters: int
    ledger_length: int


@dataclass(frozen=True)
class RecentRuns:
    """The ledger's last hour, by function, and whether the hour was read whole."""

    by_function: dict[str, list[Run]]
    complete: bool
    read: int


def backlog(client: redis.Redis, stream: str, group: str, now_ms: int | None = None) -> Backlog:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    pipeline = client.pipeline(transaction=False)
    pipeline.xlen(stream)
    pipeline.xlen(dlq_stream(stream))
    pipeline.xlen(runs_stream(stream))
    lengths = [int(value) for value in pipeline.execute()]
    pending: int | None = None
    age: float | None = None
    lag: int | None = None
    try:
        summary = cast("dict[str, Any]", client.xpending(stream, group))
        groups = cast("list[dict[str, Any]]", client.xinfo_groups(stream))
    except redis.ResponseError:   # no stream or no group yet
        summary, groups = {}, []
    if summary:
        pending = int(summary["pending"])
        oldest = summary.get("min")
        if pending and oldest:
            oldest_text = oldest.decode() if isinstance(oldest, bytes) else str(oldest)
            age = max(0.0, (now_ms - int(oldest_text.split("-")[0])) / 1000)
    for found in groups:
        name = found.get("name")
        if (name.decode() if isinstance(name, bytes) else name) == group and found.get("lag") is not None:
            lag = int(found["lag"])
    return Backlog(pending=pending, oldest_pending_age_s=age, lag=lag, stream_length=lengths[0],
                   dead_letters=lengths[1], ledger_length=lengths[2])


def recent_runs(client: redis.Redis, stream: str, now_ms: int | None = None, limit: int = CHART_RECORDS) -> RecentRuns:
    """The run records of the last hour (settlements left out), grouped by function, newest first."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    script = client.register_script(_SUMMARY)
    high, low = "+", f"{now_ms - HOUR_MS}-0"
    by_function: dict[str, list[Run]] = defaultdict(list)
    read = 0
    while read < limit:
        count = min(CHART_PAGE, limit - read)
        last, *items = cast("list[Any]", script(keys=[runs_stream(stream)], args=[high, low, count]))
        for item in items:
            run = decode(item[0], dict(zip(item[1::2], item[2::2], strict=True)))
            if run.kind == record.RUN and run.function:
                by_function[run.function].append(run)
        read += len(items)
        if len(items) < count or not last:
            return RecentRuns(dict(by_function), True, read)
        high = "(" + (last.decode() if isinstance(last, bytes) else str(last))
    return RecentRuns(dict(by_function), False, read)


def event_of(client: redis.Redis, stream: str, entry_id: str) -> bytes | None:
    """The ``event`` field of the source entry *entry_id*, or None when the stream no longer holds it."""
    found = cast("list[tuple[bytes, dict[bytes, bytes]]]", client.xrange(stream, entry_id, entry_id, count=1))
    if not found:
        return None
    return found[0][1].get(EVENT_FIELD, b"")


def pretty_event(event: bytes) -> str:
    """The event for a person: indented JSON when it is JSON, else its text; cut at EVENT_SHOWN bytes."""
    cut = len(event) > EVENT_SHOWN
    text = event[:EVENT_SHOWN].decode("utf-8", "replace")
    if not cut:
        try:
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError):
            pass
    return text + (f"\n... ({len(event)} bytes; the first {EVENT_SHOWN} shown)" if cut else "")
