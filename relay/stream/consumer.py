"""The consumer and the reclaimer: stream entries into dispatches, within the buffer.

The consumer reads new entries with XREADGROUP; the reclaimer takes over
entries that sat pending longer than the idle time with XAUTOCLAIM. Both
ask the settle decision (relay.stream.verdict) of every entry they get:
malformed entries are dead-lettered, entries with matches are dispatched in
their own greenlets (no entry, however hostile, can raise out of the
planning and end a loop), and entries that match no rule are acknowledged
together: the reclaimer's in one round trip of their own (``accept``), the
consumer's in the same round trip as its next XREADGROUP, an XACK pipelined
ahead of it (``read_once``), so a busy stream costs one round trip a batch.
No more than MAX_BUFFERED_EVENTS entries are held at once: with the buffer
full nothing is read, so the backlog stays in Redis.

A failed attempt whose backoff is shorter than the reclaim interval is
not left to the reclaimer, which would run it up to an interval late: the
dispatch's greenlet holds the entry (it stays in the buffer), sleeps until
the retry is due, claims the entry again and dispatches it anew (``_hold``,
``_take_back``). A longer backoff goes to the reclaimer, as before. On stop,
a held entry stops waiting at once and stays pending for another worker,
so it never holds up the drain.

An entry whose dispatch outlives the idle time (a slow handler, a retry
waiting for a slot or held for its backoff) is idle in Redis as far as
XAUTOCLAIM can tell, so the reclaimer may hand this worker its own entry
back. Such an entry is skipped: its dispatch is still running and will
settle it.

What one worker holds is bounded whatever producers write. The reclaimer
and a retry taken back claim through a script that measures each entry in
Redis and sends one over the limits as its sizes only (relay.stream.claims).
XREADGROUP cannot do that, so the worker's client caps each reply
(relay.reply_cap, at ``max_reply_bytes``: a full buffer of entries at the
limits). A read that passes the cap is dropped unread, and the entries it
delivered here are claimed again through the script (``_claim_dropped``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import cast

import redis
from gevent.event import Event
from gevent.lock import Semaphore
from gevent.pool import Group
from redis.typing import KeyT, StreamIdT

from relay.config import DEFAULT_MAX_EVENT_BYTES
from relay.errors import ReplyTooLarge
from relay.stream import seams
from relay.stream.claims import Claims
from relay.stream.group import ensure_group, is_missing_group
from relay.stream.keys import REDRIVEN_FROM_FIELD, StreamAddress
from relay.stream.plans import MAX_OTHER_FIELD_BYTES, Oversized, Plan, plan_entry
from relay.stream.resilience import Outage
from relay.stream.verdict import Cause, Settlement, decide_settlement

Entries = Sequence[tuple[bytes | str, dict[bytes, bytes] | Oversized | None]]
StreamResponse = list[tuple[bytes, Entries]]   # XREADGROUP's reply: (stream, entries) pairs

log = logging.getLogger("relay.stream.consumer")

READ_BLOCK_MS = 2000
RECLAIM_INTERVAL = 60.0   # seconds; fixed internals, shorter only in tests
MIN_IDLE = 60.0
REPLY_SLACK = 1024 * 1024   # bytes over a full buffer's worth that a read's reply may hold: ids, names, framing
PENDING_PAGE = 100          # entries of this consumer's pending list looked at per XPENDING


def max_reply_bytes(max_buffered_events: int, max_event_bytes: int) -> int:
    """The largest reply the worker's client reads: a full buffer of entries at the limits, with room to spare.

    Each entry may hold its event up to *max_event_bytes* and other fields up
    to MAX_OTHER_FIELD_BYTES; twice that covers the names and framing of an
    entry of many small fields. A larger reply is dropped (relay.reply_cap).
    """
    return max_buffered_events * (max_event_bytes + 2 * MAX_OTHER_FIELD_BYTES) + REPLY_SLACK


class Buffer:
    """Entries read from Redis and not yet finished (acked, dead-lettered or left pending)."""

    def __init__(self, capacity: int, gauge: seams.Gauge) -> None:
        self.capacity = capacity
        self.used = 0
        self.gauge = gauge
        self._freed = Event()

    def free(self) -> int:
        return self.capacity - self.used

    def take(self, count: int) -> None:
        self.used += count
        self.gauge.set(self.used)

    def release(self, count: int = 1) -> None:
        self.used -= count
        self.gauge.set(self.used)
        self._freed.set()

    def wait_for_space(self, timeout: float) -> bool:
        while self.free() <= 0:
            self._freed.clear()
            if not self._freed.wait(timeout):
                return False
        return True


class Consumer:
    def __init__(self, *, client: redis.Redis, address: StreamAddress, catalog: seams.RuleSource,
                 dispatcher: seams.Dispatcher, settler: seams.Settler, buffer: Buffer, observer: seams.Observer,
                 block_ms: int = READ_BLOCK_MS, reclaim_interval: float = RECLAIM_INTERVAL,
                 min_idle: float = MIN_IDLE, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.client = client
        self.address = address
        self.catalog = catalog
        self.dispatcher = dispatcher
        self.settler = settler
        self.buffer = buffer
        self.observer = observer
        self.block_ms = block_ms
        self.reclaim_interval = reclaim_interval
        self.min_idle_ms = int(min_idle * 1000)
        self.max_event_bytes = max_event_bytes
        self.stopping = Event()
        self.dispatches = Group()
        self.in_flight: set[str] = set()    # message ids whose dispatch is running here
        self._claiming = Semaphore()        # one claim of entries pending here at a time (see _claim_dropped)
        self.claims = Claims(client, address)
        self._unacked: list[bytes | str] = []   # ids that matched nothing, as read; acknowledged with the next read

    # --- loops --------------------------------------------------------------------

    def read_loop(self) -> None:
        outage = Outage("consumer", self.stopping)
        try:
            while not self.stopping.is_set():
                if not self._unacked and not self.buffer.wait_for_space(timeout=1.0):
                    continue
                try:
                    self.read_once()
                except redis.RedisError as error:
                    self._trouble(error, outage)
                    continue
                outage.succeeded()
        finally:
            self.flush_acks()

    def read_once(self, limit: int | None = None) -> int:
        """One XREADGROUP of new entries (at most *limit*), and accept them; how many it read.

        The entries the previous read found matching nothing are acknowledged
        in the same round trip, by an XACK pipelined ahead of this read: one
        round trip a batch instead of two. That read does not block, so the
        acknowledgment's answer (and the ``settled`` event) comes back at once
        even when the stream is idle; the read after it blocks as usual. Those
        entries stay in the buffer until then, and the read asks for them too.
        """
        address, acks = self.address, self._unacked
        self._unacked = []
        count = self.buffer.free() + len(acks)
        if limit is not None:
            count = min(count, limit)
        streams: dict[KeyT, StreamIdT] = {address.stream: ">"}
        started = time.monotonic()
        try:
            if acks:
                pipe = self.client.pipeline(transaction=False)
                self.settler.queue_unmatched(pipe, acks)
                pipe.xreadgroup(address.group, address.consumer, streams, count=count)
                try:
                    ack_reply, response = pipe.execute(raise_on_error=False)
                except ReplyTooLarge:
                    self._acknowledged(acks, len(acks))   # its reply came whole, before the read's passed the cap
                    raise
                except redis.RedisError as error:
                    self._acknowledged(acks, error)
                    raise
                self._acknowledged(acks, ack_reply)
                if isinstance(response, Exception):
                    raise response
            else:
                response = self.client.xreadgroup(address.group, address.consumer, streams, count=count,
                                                  block=self.block_ms)
        except ReplyTooLarge as error:
            return self._claim_dropped(error, started)
        read = 0
        for _stream, entries in cast("StreamResponse", response) or ():
            if entries:
                log.debug("Read entries", extra={"count": len(entries)})
                self._unacked += self._plan_batch(entries)
                read += len(entries)
        return read

    def _claim_dropped(self, error: ReplyTooLarge, started: float) -> int:
        """Claim again, measured in Redis, the entries a read dropped for its size delivered here; how many.

        They are this consumer's pending entries delivered since the read
        started and not in hand here (no dispatch of theirs is running). An
        entry left pending here by a dispatch that just ended may be among
        them; it is planned again, which its invocation state makes harmless.
        """
        since_ms = int((time.monotonic() - started) * 1000) + 1000
        log.warning("A read brought more than this worker holds; its entries are read again, measured first",
                    extra={"error": str(error)})
        with self._claiming:
            ids = self._delivered_within(since_ms)[:self.buffer.free()]
            entries = self.claims.claim(ids, self.max_event_bytes)
            if entries:
                self.accept(entries)
        return len(entries)

    def _delivered_within(self, since_ms: int) -> list[str]:
        """Ids of this consumer's pending entries delivered in the last *since_ms*, none of them in hand here."""
        address, start, found = self.address, "-", []
        while True:
            page = self.client.xpending_range(address.stream, address.group, min=start, max="+",
                                              count=PENDING_PAGE, consumername=address.consumer)
            for pending in page:
                message_id = cast("bytes", pending["message_id"]).decode()
                if cast("int", pending["time_since_delivered"]) <= since_ms and message_id not in self.in_flight:
                    found.append(message_id)
            if len(page) < PENDING_PAGE:
                return found
            start = "(" + cast("bytes", page[-1]["message_id"]).decode()

    def flush_acks(self) -> None:
        """Acknowledge now the entries waiting to go with the next read (the read loop is ending)."""
        acks, self._unacked = self._unacked, []
        if acks:
            self.settler.settle_unmatched(acks)
            self.buffer.release(len(acks))

    def _acknowledged(self, acks: list[bytes | str], reply: object) -> None:
        self.settler.unmatched_acknowledged(acks, reply)
        self.buffer.release(len(acks))

    def reclaim_loop(self) -> None:
        outage = Outage("reclaimer", self.stopping)
        while not self.stopping.wait(self.reclaim_interval):
            try:
                self.reclaim_once()
            except redis.RedisError as error:
                self._trouble(error, outage)
            else:
                outage.succeeded()

    def reclaim_once(self) -> None:
        """Take over every entry idle longer than the idle time, batch by batch
        as the buffer frees up. A buffer that stays full for half an interval
        ends the pass; the rest waits for the next one.

        Waiting for space, rather than stopping at the first full buffer, is
        what lets a fleet catch up after an outage left hundreds of entries
        pending: one buffer's worth per interval would take hours.
        """
        start = "0-0"
        while not self.stopping.is_set():
            if not self.buffer.wait_for_space(timeout=self.reclaim_interval / 2):
                log.debug("Buffer full; reclaiming the rest next time")
                return
            with self._claiming:
                next_start, entries = self.claims.claim_idle(self.min_idle_ms, start, self.buffer.free(),
                                                                self.max_event_bytes)
                if entries:
                    log.debug("Reclaimed entries", extra={"count": len(entries)})
                    self.accept(entries)
            if next_start == "0-0":
                return
            start = next_start

    def stop(self) -> None:
        self.stopping.set()

    def drain(self, timeout: float) -> bool:
        """Wait up to *timeout* seconds for running dispatches; True when none is left."""
        self.dispatches.join(timeout=timeout)
        return len(self.dispatches) == 0

    # --- entries ------------------------------------------------------------------

    def accept(self, entries: Entries) -> None:
        """Plan every entry; settle at once what needs no dispatch, dispatch the rest.

        Entries that match nothing are acknowledged together, in one round trip.
        """
        unmatched = self._plan_batch(entries)
        if unmatched:
            self.settler.settle_unmatched(unmatched)
            self.buffer.release(len(unmatched))

    def _plan_batch(self, entries: Entries) -> list[bytes | str]:
        """Plan every entry; settle what needs no dispatch but an ack, dispatch the rest.

        Returns the ids of the entries that matched nothing, as Redis sent them
        (acknowledging bytes spares redis-py encoding each id again), still in
        the buffer: the caller acknowledges them.
        """
        rules, waiting = self.catalog.rules(), self.catalog.waiting()
        self.buffer.take(len(entries))
        unmatched: list[bytes | str] = []
        events = 0
        for raw_id, fields in entries:
            message_id = raw_id.decode() if isinstance(raw_id, bytes) else raw_id
            if message_id in self.in_flight:
                log.debug("Reclaimed an entry this worker is still dispatching; skipped",
                          extra={"message_id": message_id})
                self.buffer.release()
                continue
            if type(fields) is dict and REDRIVEN_FROM_FIELD in fields:
                log.info("Redriven entry received", extra={
                    "message_id": message_id, "redriven_from": fields[REDRIVEN_FROM_FIELD].decode("utf-8", "replace")})
            plan = plan_entry(message_id, fields, rules, waiting, self.max_event_bytes)
            events += plan.is_event
            settlement = decide_settlement(plan)
            if settlement is None:
                self._start_dispatch(plan)
            elif settlement.cause is Cause.UNMATCHED:
                unmatched.append(raw_id)
            else:
                self._settle(plan, settlement)
        if events:
            self.observer.received(events)
        return unmatched

    def _settle(self, plan: Plan, settlement: Settlement) -> None:
        _explain(plan, settlement)
        self.settler.settle(plan, settlement)
        self.buffer.release()

    def _start_dispatch(self, plan: Plan) -> None:
        if not plan.scheduled:
            for name in dict.fromkeys(target.active.name for target in plan.targets):
                self.observer.matched(name)
        self.in_flight.add(plan.message_id)
        self.dispatches.spawn(self._dispatch, plan)

    def _dispatch(self, first: Plan) -> None:
        message_id, holding = first.message_id, False
        plan: Plan | None = first
        try:
            while plan is not None:
                retry = self.dispatcher.dispatch(plan)
                if retry is None or not self._hold(message_id, retry, holding):
                    break
                plan, holding = self._take_back(message_id), True
        except Exception:
            log.exception("Dispatch failed unexpectedly; the entry stays pending", extra={"message_id": message_id})
        finally:
            self.in_flight.discard(message_id)
            self.buffer.release()

    def _hold(self, message_id: str, retry: seams.RetryDue, holding: bool) -> bool:
        """Wait for a retry due sooner than the reclaimer would bring the entry back; False when it
        is the reclaimer's or Relay is stopping (the entry stays pending for another worker).

        Only an attempt that failed here is held for (or one held already,
        in case the wait ended a moment early): an entry the reclaimer hands
        over with its retry not yet due goes back to the reclaimer, as
        before, rather than filling the buffer with waits.
        """
        if retry.delay >= self.reclaim_interval or not (retry.after_failure or holding):
            return False
        log.debug("Entry held for its retry", extra={"message_id": message_id, "retry_in": f"{retry.delay:.3f}s"})
        if self.stopping.wait(retry.delay):
            log.debug("Stopping; a held entry is left pending for another worker", extra={"message_id": message_id})
            return False
        return True

    def _take_back(self, message_id: str) -> Plan | None:
        """The entry's plan again, when its retry is due: claimed anew (XCLAIM), planned against the
        current rules, as a reclaim would; None when it needs no dispatch (settled here or elsewhere).

        Claiming it again resets its idle time and tells whether it is still
        pending: another worker may have taken it over while it was held, run
        the retry and acknowledged it, and its state is gone with it.
        """
        try:
            # None when it is gone: acknowledged meanwhile, or trimmed away
            [(_id, fields)] = self.claims.claim([message_id], self.max_event_bytes)
        except redis.RedisError as error:
            log.warning("Cannot claim a held entry for its retry; it stays pending for the reclaimer",
                        extra={"message_id": message_id, "error": str(error)})
            return None
        plan = plan_entry(message_id, fields, self.catalog.rules(), self.catalog.waiting(), self.max_event_bytes)
        settlement = decide_settlement(plan)
        if settlement is None:
            return plan
        if settlement.cause is Cause.UNMATCHED:
            self.settler.settle_unmatched([message_id])
        else:
            _explain(plan, settlement)
            self.settler.settle(plan, settlement)
        return None

    def _trouble(self, error: Exception, outage: Outage) -> None:
        if is_missing_group(error):
            log.warning("Consumer group is gone (was Redis reset?); creating it again",
                        extra={"stream": self.address.stream, "group": self.address.group})
            try:
                ensure_group(self.client, self.address.stream, self.address.group)
                return
            except Exception as again:  # DependencyError or a Redis error: back off like any outage
                error = again
        outage.failed(error)


def _explain(plan: Plan, settlement: Settlement) -> None:
    """Log why an entry is settled without a dispatch (a trimmed entry goes silently)."""
    if settlement.cause is Cause.OBSOLETE:
        log.info("Schedule occurrence for a removed function or handler; acknowledged as obsolete",
                 extra={"message_id": plan.message_id, "event": plan.payload})
    elif settlement.cause is Cause.MALFORMED:
        log.warning("Malformed entry; it can never succeed", extra={
            "message_id": plan.message_id, "reason": plan.problem})
    elif settlement.cause is Cause.WAITING:
        log.info("Entry matches a function whose image is not built yet; left pending", extra={
            "message_id": plan.message_id, "functions": ",".join(plan.waiting)})
