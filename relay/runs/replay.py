"""Sending a time range of the source stream through named functions again (``relay replay``).

A stream entry's id is the time it was added (unix milliseconds, then a
sequence), so a time range is an id range: it is read with XRANGE in pages
of PAGE entries, never whole. Each entry a function is chosen for is added
to the stream again as a new entry, with the same ``event`` field,
``replay_of`` (the source entry's id) and ``replay_for`` (the function, or
``function/handler``): the consumer runs a replayed entry only for what
``replay_for`` names (relay.stream.plans), with new idempotency keys (a new
entry id), fresh attempts, and its age counted from the replay.

Which functions an entry is replayed for is decided offline, the way the
consumer would match its event now against the functions of a directory
(``Selection``): the named function (and handler), or every function
whose rules match, one new entry for each. Two kinds of entries are never
replayed: schedule occurrences (a ``schedule`` field: an occurrence runs
only as Relay's scheduler published it, and a copy would be dead-lettered)
and entries that are replays themselves (so replaying a range twice, or a
range that holds an earlier replay's copies, adds no copies of copies).

``Failures`` narrows the choice to what failed: the entries whose runs in
the ledger (relay:<stream>:runs) did not succeed for that function, or
were dead-lettered. Each entry's copies are added in one MULTI/EXEC, so an
entry is replayed whole or not at all and a replay interrupted anywhere
continues after the last source entry it finished (``--since=<entry id>``
is exclusive). Stdlib and relay only at import: the admin command imports
it when it runs.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from relay.config import DEFAULT_MAX_EVENT_BYTES
from relay.errors import RunsError
from relay.functions.rules import Rules
from relay.quoting import quote
from relay.runs.record import RUN, SETTLEMENT, Settled
from relay.runs.times import parse_time
from relay.stream.keys import EVENT, EVENT_FIELD, REPLAY_FOR, REPLAY_FOR_FIELD, REPLAY_OF, SCHEDULE_FIELD
from relay.stream.plans import plan_entry

if TYPE_CHECKING:
    import redis

    from relay.functions import ActiveFunction

PAGE = 100              # source entries per XRANGE: at most this many events are held at once
DEFAULT_RATE = 100.0    # entries added per second
_ENTRY_ID = re.compile(r"([0-9]{1,19})-([0-9]{1,20})", re.ASCII)
_STILL_OPEN = (Settled.RETRY_DUE, Settled.PENDING)

Entry = tuple[str, dict[bytes, bytes]]
_Entries = list[tuple[bytes, dict[bytes, bytes]]]   # XRANGE's reply, as redis-py gives it


# --- the window -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Window:
    """The ids to read: from ``start`` (an XRANGE bound: ``<ms>`` inclusive, ``(<id>`` exclusive) to ``until_ms``."""

    start: str
    since_ms: int       # the first millisecond of the window
    until_ms: int       # its last millisecond, inclusive

    @property
    def end(self) -> str:
        return str(self.until_ms)      # XRANGE completes ``<ms>`` as an end to ``<ms>-<max>``

    @property
    def after(self) -> str | None:
        """The entry id the window starts after (a resumed replay), or None."""
        return self.start[1:] if self.start.startswith("(") else None

    def holds(self, entry_id: str) -> bool:
        """Whether *entry_id* is in the window."""
        parsed = entry_key(entry_id)
        if parsed is None or not self.since_ms <= parsed[0] <= self.until_ms:
            return False
        after = self.after
        return after is None or parsed > (entry_key(after) or (0, 0))


def window(since: str, until: str, now_ms: int | None = None) -> Window:
    """The window of ``--since`` (a time, or an entry id to start after) and ``--until`` (a time, or an
    entry id's time); an end in the future is now, so the replay's own copies are never in it."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    after = entry_key(since.strip())
    if after is not None:
        start, since_ms = f"({since.strip()}", after[0]
    else:
        since_ms = parse_time(since, "--since", now_ms)
        start = str(max(since_ms, 0))
    until_key = entry_key(until.strip())
    until_ms = min(until_key[0] if until_key is not None else parse_time(until, "--until", now_ms), now_ms)
    if until_ms < since_ms:
        raise RunsError(f"--since={quote(since.strip())} is after --until={quote(until.strip())}"
                        f"{' (now)' if until_ms == now_ms else ''}; nothing is between them")
    return Window(start, max(since_ms, 0), until_ms)


def entry_key(entry_id: str) -> tuple[int, int] | None:
    """(milliseconds, sequence) of a stream entry id, or None when *entry_id* is none."""
    found = _ENTRY_ID.fullmatch(entry_id)
    return (int(found.group(1)), int(found.group(2))) if found else None


def first_entry(client: redis.Redis, stream: str) -> str | None:
    """The id of the oldest entry the stream still holds (retention trims the rest), or None."""
    found = cast("_Entries", client.xrange(stream, "-", "+", count=1))
    return _text(found[0][0]) if found else None


def read(client: redis.Redis, stream: str, start: str, end: str, page: int = PAGE) -> Iterator[Entry]:
    """The entries of *stream* from *start* to *end* (XRANGE bounds), oldest first, *page* at a time."""
    while True:
        found = cast("_Entries", client.xrange(stream, start, end, count=page))
        for raw_id, fields in found:
            yield _text(raw_id), fields
        if len(found) < page:
            return
        start = f"({_text(found[-1][0])}"


# --- which entries, for which functions -------------------------------------------------


class Failures:
    """The entries of a window that failed, by function: what the ledger says of their runs.

    An entry failed for a function when a record of its says it was
    dead-lettered, or when the latest run of one of the function's rules
    did not succeed (failed, timed out, killed, not started, expired) and
    no retry of it was still due then. Records for the entries of a window
    were written at or after the window's start, so the ledger is read from
    there to its end; the ledger is capped (RUNS_MAX_AGE, RUNS_MAX_ENTRIES),
    so what it has forgotten is not found. A settlement record (an entry
    settled with no attempt) names every function of its entry, and counts
    for each; one that names none counts for all. The ledger is read through its
    filter in Redis (relay.runs.reader): with a function named, only that
    function's records and the dead-lettered ones come back.
    """

    def __init__(self, failed: set[tuple[str, str]]) -> None:
        self._failed = failed

    @classmethod
    def scan(cls, client: redis.Redis, stream: str, span: Window, handler: str | None = None,
             function: str | None = None) -> Failures:
        """The failures of the entries in *span*, of *function* (and *handler*'s rules) only when given.

        The ledger is filtered in Redis (relay.runs.reader): only *function*'s records, and the
        settlement records, which name every function of their entry, come back."""
        from relay.runs.reader import DEAD_LETTERED, RunFilter, Runs

        latest: dict[tuple[str, str, str], bool] = {}    # (entry, function, rule): its latest run failed
        failed: set[tuple[str, str]] = set()             # (entry, function); function "" for any
        runs = Runs(client, stream)
        wanted = [RunFilter(since_ms=span.since_ms)] if function is None else [
            RunFilter(function=function, since_ms=span.since_ms), RunFilter(since_ms=span.since_ms,
                                                                            outcomes=(DEAD_LETTERED,))]
        for run in (run for filters in wanted for run in runs.oldest(filters)):
            if not span.holds(run.entry) or (handler is not None and run.handler not in ("", handler)):
                continue
            if run.settled is Settled.DEAD_LETTERED:    # a settlement record names every function of its entry
                names = run.function.split(",") if run.kind == SETTLEMENT else [run.function]
                failed.update((run.entry, name) for name in names)
            elif run.kind == RUN and run.function:
                latest[(run.entry, run.function, run.rule or run.handler)] = (
                    not run.ok and run.settled not in _STILL_OPEN)
        failed.update((entry, function) for (entry, function, _rule), bad in latest.items() if bad)
        return cls(failed)

    def failed(self, entry_id: str, function: str) -> bool:
        return (entry_id, function) in self._failed or (entry_id, "") in self._failed

    def __len__(self) -> int:
        return len({entry for entry, _function in self._failed})


@dataclass(slots=True)
class Tally:
    """What a pass over the window found."""

    read: int = 0
    entries: int = 0                 # entries with at least one copy to add
    copies: Counter[str] = field(default_factory=Counter)  # copies to add, by replay_for
    schedules: int = 0               # schedule occurrences, skipped
    replays: int = 0                 # copies an earlier replay added, skipped
    unreadable: int = 0              # entries the consumer dead-letters unread (no event, not JSON, ...)
    not_failed: int = 0              # matched, but the ledger has no failure of theirs (--failed-only)

    @property
    def total(self) -> int:
        return sum(self.copies.values())


class Selection:
    """For which functions (or handler) an entry is replayed: its event matched offline as the consumer
    matches it, against *functions* (the one named, when one is), narrowed by *failures* when given."""

    def __init__(self, functions: Sequence[ActiveFunction], function: str | None = None, handler: str | None = None,
                 failures: Failures | None = None, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        chosen = [active for active in functions if function is None or active.name == function]
        if function is not None and not chosen:
            raise RunsError(f"there is no function {quote(function)}")
        if handler is not None and not any(rule.handler == handler for active in chosen
                                           for rule in active.function.template.rules):
            raise RunsError(f"function {quote(function)} has no rule with handler {quote(handler)}")
        self.rules = Rules(chosen)
        self.handler = handler
        self.failures = failures
        self.max_event_bytes = max_event_bytes

    def targets(self, entry_id: str, fields: dict[bytes, bytes], tally: Tally) -> tuple[str, ...]:
        """The ``replay_for`` values of *entry*'s copies (none to skip it), counted in *tally*."""
        tally.read += 1
        if SCHEDULE_FIELD in fields:
            tally.schedules += 1
            return ()
        if REPLAY_FOR_FIELD in fields:
            tally.replays += 1
            return ()
        event = fields.get(EVENT_FIELD)
        plan = plan_entry(entry_id, {EVENT_FIELD: event} if event is not None else {}, self.rules, (),
                          self.max_event_bytes)
        if plan.problem:
            tally.unreadable += 1
            return ()
        handler = self.handler
        names = dict.fromkeys(target.active.name for target in plan.targets
                              if handler is None or target.rule.handler == handler)
        if self.failures is not None and names:
            failed = [name for name in names if self.failures.failed(entry_id, name)]
            tally.not_failed += not failed
            names = dict.fromkeys(failed)
        chosen = tuple(f"{name}/{handler}" if handler is not None else name for name in names)
        if chosen:
            tally.entries += 1
            tally.copies.update(chosen)
        return chosen


def chosen(client: redis.Redis, stream: str, span: Window, selection: Selection,
           tally: Tally) -> Iterator[tuple[str, bytes, tuple[str, ...]]]:
    """(entry id, event, replay_for values) of every entry of *span* with copies to add, oldest first."""
    for entry_id, fields in read(client, stream, span.start, span.end):
        targets = selection.targets(entry_id, fields, tally)
        if targets:
            yield entry_id, fields[EVENT_FIELD], targets


# --- adding the copies ------------------------------------------------------------------


class Adder:
    """Adds an entry's copies to the stream, all in one MULTI/EXEC, at most *rate* copies a second."""

    def __init__(self, client: redis.Redis, stream: str, rate: float = DEFAULT_RATE,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.client, self.stream = client, stream
        self.interval = 1.0 / rate
        self.clock, self.sleep = clock, sleep
        self._next: float | None = None

    def add(self, entry_id: str, event: bytes, targets: Sequence[str]) -> list[str]:
        """Wait for the rate, then add one copy of the entry *entry_id* for each of *targets*; the new ids."""
        self.wait(len(targets))
        return self.write(entry_id, event, targets)

    def wait(self, copies: int) -> None:
        """Sleep until *copies* more may be added at the rate."""
        now = self.clock()
        if self._next is not None and self._next > now:
            self.sleep(self._next - now)
            now = self._next
        self._next = now + self.interval * copies

    def write(self, entry_id: str, event: bytes, targets: Sequence[str]) -> list[str]:
        """Add the copies now, in one MULTI/EXEC; return their ids."""
        pipeline = self.client.pipeline(transaction=True)
        for target in targets:
            pipeline.xadd(self.stream, {EVENT: event, REPLAY_OF: entry_id, REPLAY_FOR: target})
        return [_text(new_id) for new_id in pipeline.execute()]


def parse_rate(text: str) -> float:
    """Entries a second from ``--rate``: ``N/s`` or ``N`` (N a positive number), also ``N/m``."""
    number, slash, unit = text.strip().partition("/")
    per = {"s": 1.0, "m": 60.0}.get(unit.strip() if slash else "s")
    try:
        rate = float(number) / per if per is not None and number.strip().replace(".", "", 1).isdigit() else 0.0
    except ValueError:
        rate = 0.0
    if not rate > 0:
        raise RunsError(f"--rate={quote(text)} is not a rate such as 100/s or 600/m")
    return rate


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
