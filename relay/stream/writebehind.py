"""Bookkeeping that met a Redis outage, written as soon as Redis answers again.

Relay's rule is that a Redis error never blocks delivery: a claim, a
completion marker or an acknowledgment that fails is logged and the
dispatch goes on. Left at that, each one is a duplicate waiting to happen.
The entry stays pending with no ``ok`` marker, and the reclaimer hands it
out again once it has been idle for a minute, to run a handler that had
already succeeded.

``WriteBehind`` keeps what could not be written (``claim``, ``complete``,
``acknowledge``: bounded, in memory, one record per entry) and its greenlet
writes it the moment Redis answers, seconds after the outage instead of a
reclaim later. Every write is safe to repeat or to come late:

- an acknowledgment is XACK and DEL of the entry's state, as the Settler
  sends it, with the run ledger's records of the entry's attempts, which
  went unsent with it: one script adds them only when its XACK finds the
  entry still pending, so records that did land are not written twice
  (records are kept up to RECORD_BYTES in all; past that they are counted
  as unrecorded);
- markers (a claim, an ``ok``) are written by one script only while the
  entry is still pending, so none outlives an acknowledgment and leaves a
  stale key; a claim only if its field still holds what it replaced, so it
  never overwrites what the attempt wrote since.

A write that landed after the reclaim idle time may have come too late (the
entry could be running elsewhere by then) and is counted, as is one never
written (more than ``capacity`` entries owed, or owed at stop without a journal).

What is owed is mirrored to a journal under the state directory
(relay.stream.journal), so a worker killed before Redis answered writes it
when it starts again.

After a Sentinel failover, the writes the old primary acknowledged in its
last moments may never have reached the replica it was replaced by.
``WriteBehind`` remembers what this worker settled and marked in the last
RESEND_WINDOW seconds and, when the client finds a new primary, writes it
all again (``resend``): XACK and DEL of a settled entry are no-ops where
they landed before.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import redis
from gevent import sleep
from gevent.event import Event

from relay.stream import markers
from relay.stream.journal import Journal
from relay.stream.keys import StreamAddress, invocation_key, runs_stream
from relay.stream.owed import Mark, Owed, Record

log = logging.getLogger("relay.stream.writebehind")

CAPACITY = 10_000       # entries with writes owed; past it the oldest is given up (and counted)
GRACE = 5.0             # seconds at stop to write what is still owed
RETRY_DELAY = 0.25      # seconds between tries while Redis does not answer
TICK = 1.0              # seconds between looks at the primary's address when nothing is owed
RECORD_BYTES = 8 * 1024 * 1024   # run-ledger records kept with owed acknowledgments, in all
RESEND_WINDOW = 30.0    # seconds of settles and markers written again after a failover
RECENT_LIMIT = 20_000   # at most this many of them remembered

# KEYS: the stream, the entry's invocation state. ARGV: the group, the entry id, the state's TTL, then
# (field, expected, value) triples: expected "" writes the value whatever the field holds, else only
# while the field still holds expected (a claim; its expected is the marker it replaced, prefixed "=").
_MARK_IF_PENDING = """
if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1) == 0 then return 0 end
for i = 4, #ARGV, 3 do
  local expected = ARGV[i + 1]
  if expected == '' or '=' .. (redis.call('HGET', KEYS[2], ARGV[i]) or '') == expected then
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 2])
  end
end
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
"""

# KEYS: the stream, the entry's invocation state, the run ledger. ARGV: the group, the entry id, "1" to
# delete the state, the ledger's MAXLEN, then each record as its number of field and value strings and
# those strings. The records are added only if the XACK found the entry pending: had the acknowledgment's
# own round trip reached Redis, its records would be there already.
_ACK_AND_RECORD = """
local acked = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if ARGV[3] == '1' then redis.call('DEL', KEYS[2]) end
if acked == 1 then
  local i = 5
  while i <= #ARGV do
    local n = tonumber(ARGV[i])
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*', unpack(ARGV, i + 1, i + n))
    i = i + n + 1
  end
end
return acked
"""


@dataclass(frozen=True)
class Counters:
    """Where WriteBehind counts (Prometheus counters' ``inc`` in the worker)."""

    deferred: Callable[[str], None] = lambda kind: None   # a write kept for later: claim, marker or ack
    late: Callable[[], None] = lambda: None               # written after the reclaim idle time
    lost: Callable[[], None] = lambda: None               # given up: over capacity or at stop
    resent: Callable[[int], None] = lambda count: None     # entries written again after a failover
    unrecorded: Callable[[int], None] = lambda count: None  # run-ledger records given up


@dataclass(frozen=True, slots=True)
class _Recent:
    """What this worker wrote lately, to write again after a failover."""

    at: float
    message_id: str
    owed: Owed


class WriteBehind:
    def __init__(self, client: redis.Redis, address: StreamAddress, *, reclaim_after: float,
                 capacity: int = CAPACITY, grace: float = GRACE, counters: Counters = Counters(),
                 runs_max_entries: int = 0, journal: Journal | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.journal = journal
        self.address = address
        self.reclaim_after = reclaim_after
        self.capacity = capacity
        self.grace = grace
        self.counters = counters
        self.clock = clock
        self.owed: OrderedDict[str, Owed] = OrderedDict()   # message id → what is owed, oldest first
        self.recent: deque[_Recent] = deque(maxlen=RECENT_LIMIT)
        self.stopping = Event()
        self._wake = Event()
        self.runs_max_entries = runs_max_entries   # the run ledger's MAXLEN (relay.runs.ledger); 0: no ledger
        self.record_bytes = 0                      # of the records held in ``owed``
        self._mark_if_pending = client.register_script(_MARK_IF_PENDING)
        self._ack_and_record = client.register_script(_ACK_AND_RECORD)
        self._primary = self._primary_address()
        self._failing = False
        self.failovers = hasattr(client.connection_pool, "master_address")   # only Sentinels fail over

    # --- what the store and the Settler report -----------------------------------

    def claim(self, message_id: str, field: str, expected: bytes | None, value: str) -> None:
        """An attempt's claim (relay.stream.invocations.try_start) could not be written; it runs anyway."""
        self._owe(message_id, "claim", Mark(field, value, expected or b""))

    def complete(self, message_id: str, field: str) -> None:
        """The completion marker of *field* could not be written."""
        self._owe(message_id, "marker", Mark(field, markers.OK))

    def acknowledge(self, message_id: str, clear_state: bool = True, records: Sequence[Record] = ()) -> None:
        """The entry's acknowledgment (with its state's removal, when *clear_state*) could not be written,
        nor *records*, the run ledger's records that were to go with it."""
        owed = self._drop(message_id, unrecorded=True)
        size = _size(records)
        if records and (not self.runs_max_entries or self.record_bytes + size > RECORD_BYTES):
            self.counters.unrecorded(len(records))
            records = ()
        elif records:
            self.record_bytes += size
        self._put(message_id, "ack", Owed(owed.since if owed else self.clock(), ack=True, clear_state=clear_state,
                                          records=tuple(records)))

    def written(self, message_id: str, field: str, value: str | None = None) -> None:
        """*field*'s own marker went through: nothing is owed for it any more (a completion
        marker, *value*, is remembered for a failover)."""
        owed = self.owed.get(message_id)
        if owed is not None and not owed.ack:
            marks = tuple(mark for mark in owed.marks if mark.field != field)
            if marks:
                self.owed[message_id] = replace(owed, marks=marks)
            else:
                self._drop(message_id)
        if value == markers.OK:
            self._remember(message_id, Owed(0.0, marks=(Mark(field, value),)))

    def settled(self, message_id: str, clear_state: bool = True) -> None:
        """The entry was acknowledged (or dead-lettered, its state cleared): nothing is owed for it."""
        self._drop(message_id, unrecorded=True)
        self._remember(message_id, Owed(0.0, ack=True, clear_state=clear_state))

    def _owe(self, message_id: str, kind: str, mark: Mark) -> None:
        owed = self.owed.get(message_id) or Owed(self.clock())
        if not owed.ack:
            owed = replace(owed, marks=(*(kept for kept in owed.marks if kept.field != mark.field), mark))
        self._put(message_id, kind, owed)

    def _put(self, message_id: str, kind: str, owed: Owed) -> None:
        self.owed[message_id] = owed
        if self.journal is not None:
            self.journal.record(message_id, owed)
        self.counters.deferred(kind)
        while len(self.owed) > self.capacity:
            given_up = next(iter(self.owed))
            self._drop(given_up, unrecorded=True)
            self.counters.lost()
            log.warning("Too much bookkeeping owed to Redis; the oldest is given up (its entry may run again)",
                        extra={"message_id": given_up, "capacity": self.capacity})
        self._wake.set()

    def _drop(self, message_id: str, unrecorded: bool = False) -> Owed | None:
        """Forget what is owed for the entry; its records are counted as unrecorded when *unrecorded*."""
        owed = self.owed.pop(message_id, None)
        if owed is not None and owed.records:
            self.record_bytes -= _size(owed.records)
            if unrecorded:
                self.counters.unrecorded(len(owed.records))
        return owed

    def _remember(self, message_id: str, owed: Owed) -> None:
        if not self.failovers:
            return
        now = self.clock()
        recent = self.recent
        while recent and recent[0].at < now - RESEND_WINDOW:
            recent.popleft()
        recent.append(_Recent(now, message_id, owed))

    # --- the loop -----------------------------------------------------------------

    def loop(self) -> None:
        """Write what is owed as soon as Redis answers; after a failover, write the recent writes again.

        It starts with what the journal says an earlier run of this worker still owed. On ``stop``
        (after the drain), it tries for up to ``grace`` seconds more to write what is still owed; the
        rest stays in the journal for the next start (without one, it is counted as lost)."""
        self.recover()
        while not self.stopping.is_set():
            self._wake.clear()
            if not self.catch_up():
                self.stopping.wait(RETRY_DELAY)
            elif not self.owed:
                self._wake.wait(TICK)
        deadline = self.clock() + self.grace
        while self.owed and not self.flush() and self.clock() < deadline:
            sleep(RETRY_DELAY)
        if self.owed and self.journal is not None and self.journal.writable:
            log.warning("Bookkeeping still owed to Redis at stop; it is written at the next start",
                        extra={"entries": len(self.owed), "journal": str(self.journal.path)})
        elif self.owed:
            log.warning("Bookkeeping still owed to Redis at stop; those entries may run again",
                        extra={"entries": len(self.owed)})
            for message_id in list(self.owed):
                self._drop(message_id, unrecorded=True)
                self.counters.lost()
        if self.journal is not None:
            self.journal.close()

    def recover(self) -> None:
        """Owe what the journal says an earlier run of this worker could not write (it was killed first)."""
        if self.journal is None:
            return
        found = self.journal.load()
        for message_id, owed in found.items():
            if message_id not in self.owed:
                self.owed[message_id] = replace(owed, since=self.clock())
                self.record_bytes += _size(owed.records)
        if found:
            log.info("Bookkeeping an earlier run owed to Redis found in the journal; writing it",
                     extra={"entries": len(found), "journal": str(self.journal.path)})

    def stop(self) -> None:
        self.stopping.set()
        self._wake.set()

    def catch_up(self) -> bool:
        """One pass of the loop: after a failover, owe the recent writes again; then write what is owed.
        False when Redis did not answer."""
        if self._failed_over():
            self.resend()
        return self.flush()

    def flush(self) -> bool:
        """Write everything owed in one round trip; False when Redis did not answer (all of it stays owed)."""
        batch = list(self.owed.items())
        if not batch:
            return True
        pipe = self.client.pipeline(transaction=False)
        for message_id, owed in batch:
            self._queue(pipe, message_id, owed)
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as error:
            if not self._failing:
                log.warning("Redis unreachable; bookkeeping owed to it is kept and written when it answers",
                            extra={"entries": len(batch), "error": str(error)})
                self._failing = True
            return False
        now, failed = self.clock(), [reply for reply in replies if isinstance(reply, Exception)]
        if failed and all(isinstance(reply, redis.ConnectionError | redis.TimeoutError) for reply in failed):
            return False
        late = 0
        for message_id, owed in batch:
            if self.owed.get(message_id) is owed:   # not changed while the round trip was out
                self._drop(message_id)
            if now - owed.since > self.reclaim_after:
                late += 1
                self.counters.late()
        if self.journal is not None:
            self.journal.rewrite(self.owed)
        log.info("Bookkeeping owed to Redis written", extra={
            "entries": len(batch), "late": late, "errors": len(failed)})
        if failed:
            log.warning("Redis refused owed bookkeeping; given up", extra={"error": str(failed[0])})
        self._failing = False
        return True

    def _queue(self, pipe: redis.client.Pipeline, message_id: str, owed: Owed) -> None:
        stream, group = self.address.stream, self.address.group
        key = invocation_key(stream, group, message_id)
        if owed.ack and owed.records:
            args: list[str | bytes | int] = [group, message_id, "1" if owed.clear_state else "0",
                                             self.runs_max_entries]
            for fields in owed.records:
                args.append(2 * len(fields))
                for name, value in fields.items():
                    args += [name, value]
            self._ack_and_record(keys=[stream, key, runs_stream(stream)], args=args, client=pipe)
            return
        if owed.ack:
            pipe.xack(stream, group, message_id)
            if owed.clear_state:
                pipe.delete(key)
            return
        args = [group, message_id, markers.STATE_TTL_SECONDS]
        for mark in owed.marks:
            args += [mark.field, b"" if mark.expected is None else b"=" + mark.expected, mark.value]
        self._mark_if_pending(keys=[stream, key], args=args, client=pipe)

    # --- failovers ----------------------------------------------------------------

    def _primary_address(self) -> object:
        """Where the client's Sentinels last said the primary is (None without Sentinels)."""
        return getattr(self.client.connection_pool, "master_address", None)

    def _failed_over(self) -> bool:
        primary = self._primary_address()
        changed = primary is not None and self._primary is not None and primary != self._primary
        if primary is not None:
            self._primary = primary
        return changed

    def resend(self) -> None:
        """Owe again what this worker settled and marked in the last RESEND_WINDOW seconds."""
        now = self.clock()
        entries: dict[str, Owed] = {}
        for recent in self.recent:
            if recent.at < now - RESEND_WINDOW:
                continue
            earlier = entries.get(recent.message_id)
            if recent.owed.ack or earlier is None:
                entries[recent.message_id] = replace(recent.owed, since=now)
            elif not earlier.ack:
                entries[recent.message_id] = replace(earlier, marks=(*earlier.marks, *recent.owed.marks))
        for message_id, owed in entries.items():
            if message_id not in self.owed:
                self.owed[message_id] = owed
        log.warning("Redis failed over to a new primary; this worker's latest bookkeeping is written again",
                    extra={"primary": _address(self._primary), "entries": len(entries)})
        self.counters.resent(len(entries))


def _size(records: Sequence[Record]) -> int:
    """What *records* count against RECORD_BYTES: the length of their names and values."""
    return sum(len(name) + len(value) for fields in records for name, value in fields.items())


def _address(primary: object) -> str:
    if isinstance(primary, tuple) and len(primary) == 2:
        return f"{primary[0]}:{primary[1]}"
    return str(primary)
