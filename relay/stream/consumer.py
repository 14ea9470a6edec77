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
"""

from __future__ import annotations

import logging
from typing import cast

import redis
from gevent.event import Event
from gevent.pool import Group
from redis.typing import KeyT, StreamIdT

from relay.config import DEFAULT_MAX_EVENT_BYTES
from relay.stream import seams
from relay.stream.group import ensure_group, is_missing_group
from relay.stream.keys import REDRIVEN_FROM_FIELD, StreamAddress
from relay.stream.plans import plan_entry
from relay.stream.resilience import Outage
from relay.stream.verdict import Cause, decide_settlement

Entries = list[tuple[bytes | str, dict[bytes, bytes] | None]]
StreamResponse = list[tuple[bytes, Entries]]   # XREADGROUP's reply: (stream, entries) pairs

log = logging.getLogger("relay.stream.consumer")

READ_BLOCK_MS = 2000
RECLAIM_INTERVAL = 60.0   # seconds; fixed internals, shorter only in tests
MIN_IDLE = 60.0


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
        if acks:
            pipe = self.client.pipeline(transaction=False)
            self.settler.queue_unmatched(pipe, acks)
            pipe.xreadgroup(address.group, address.consumer, streams, count=count)
            try:
                ack_reply, response = pipe.execute(raise_on_error=False)
            except redis.RedisError as error:
                self._acknowledged(acks, error)
                raise
            self._acknowledged(acks, ack_reply)
            if isinstance(response, Exception):
                raise response
        else:
            response = self.client.xreadgroup(address.group, address.consumer, streams, count=count,
                                              block=self.block_ms)
        read = 0
        for _stream, entries in cast("StreamResponse", response) or ():
            if entries:
                log.debug("Read entries", extra={"count": len(entries)})
                self._unacked += self._plan_batch(entries)
                read += len(entries)
        return read

    def flush_acks(self) -> None:
        """Acknowledge now the entries waiting to go with the next read (the read loop is ending)."""
        acks, self._unacked = self._unacked, []
        if acks:
            self.settler.settle_unmatched(acks)
            self.buffer.release(len(acks))

    def _acknowledged(self, acks, reply):
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
        start, address = "0-0", self.address
        while not self.stopping.is_set():
            if not self.buffer.wait_for_space(timeout=self.reclaim_interval / 2):
                log.debug("Buffer full; reclaiming the rest next time")
                return
            free = self.buffer.free()
            next_start, entries, *_ = self.client.xautoclaim(
                address.stream, address.group, address.consumer, min_idle_time=self.min_idle_ms, start_id=start,
                count=free)
            if entries:
                log.debug("Reclaimed entries", extra={"count": len(entries)})
                self.accept(entries)
            if next_start in (b"0-0", "0-0"):
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
            if fields and REDRIVEN_FROM_FIELD in fields:
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

    def _settle(self, plan, settlement):
        _explain(plan, settlement)
        self.settler.settle(plan, settlement)
        self.buffer.release()

    def _start_dispatch(self, plan):
        if not plan.scheduled:
            for name in dict.fromkeys(target.active.name for target in plan.targets):
                self.observer.matched(name)
        self.in_flight.add(plan.message_id)
        self.dispatches.spawn(self._dispatch, plan)

    def _dispatch(self, plan):
        message_id, holding = plan.message_id, False
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

    def _hold(self, message_id, retry, holding):
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

    def _take_back(self, message_id):
        """The entry's plan again, when its retry is due: claimed anew (XCLAIM), planned against the
        current rules, as a reclaim would; None when it needs no dispatch (settled here or elsewhere).

        Claiming it again resets its idle time and tells whether it is still
        pending: another worker may have taken it over while it was held, run
        the retry and acknowledged it, and its state is gone with it.
        """
        address = self.address
        try:
            claimed = self.client.xclaim(address.stream, address.group, address.consumer, min_idle_time=0,
                                         message_ids=[message_id])
        except redis.RedisError as error:
            log.warning("Cannot claim a held entry for its retry; it stays pending for the reclaimer",
                        extra={"message_id": message_id, "error": str(error)})
            return None
        fields = claimed[0][1] if claimed else None     # none: acknowledged meanwhile, or trimmed away
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

    def _trouble(self, error, outage):
        if is_missing_group(error):
            log.warning("Consumer group is gone (was Redis reset?); creating it again",
                        extra={"stream": self.address.stream, "group": self.address.group})
            try:
                ensure_group(self.client, self.address.stream, self.address.group)
                return
            except Exception as again:  # DependencyError or a Redis error: back off like any outage
                error = again
        outage.failed(error)


def _explain(plan, settlement):
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
