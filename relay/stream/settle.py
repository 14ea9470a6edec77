"""The end of an entry's life: carrying out a Settlement (relay.stream.verdict).

Acknowledge it, or dead-letter it and then acknowledge, or leave it pending.
The dead-letter entry is always written before the acknowledgment; when the
write fails, the entry is left pending so the next recovery pass tries again
instead of losing it. Both are one Lua script (``_DEAD_LETTER``): Redis
replicates and persists a script's writes together, so no crash or
failover can keep the dead-letter entry and lose the acknowledgment, which
would dead-letter the entry a second time.

The run ledger (relay.runs.ledger, a seams.RunLedger) goes out with the
settle: an acknowledged entry's records on the acknowledgment's pipeline,
a dead-lettered entry's just before its dead-letter entry, which then
names the last attempt's run id, status, exit code and end of stderr.
The ledger's commands never decide the settle: a refused XADD is counted
by the ledger and the XACK stands.

An acknowledgment Redis did not answer is owed to the write-behind
(relay.stream.writebehind), which sends it as soon as Redis answers, well
before the reclaimer could hand the entry out again. An XACK that finds
the entry no longer pending means another worker acknowledged it first:
whatever ran here for it ran twice (``Settle.ELSEWHERE``).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import redis
from redis.typing import EncodableT, FieldT

from relay.stream import keys, seams
from relay.stream.keys import StreamAddress, dlq_stream
from relay.stream.plans import Plan
from relay.stream.seams import EntryIds, LastRun, Prelude, RetryDue, Settle
from relay.stream.verdict import UNMATCHED, Settlement, Verdict

if TYPE_CHECKING:
    from relay.stream.writebehind import WriteBehind

__all__ = ["Settler", "dlq_stream", "takes_prelude"]


def takes_prelude(settlement: Settlement) -> bool:
    """Whether settling this way is one pipeline that may carry a prelude: an ACK that clears state."""
    return settlement.verdict is Verdict.ACK and settlement.clear_state


log = logging.getLogger("relay.stream.settle")

# KEYS: the dead-letter stream, the stream, the entry's invocation state. ARGV: the group, the entry's id,
# then the dead-letter entry's fields and values. An XADD that fails (a key of another type) stops the
# script before the XACK: the entry stays pending.
_DEAD_LETTER = """
redis.call('XADD', KEYS[1], '*', unpack(ARGV, 3))
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
redis.call('DEL', KEYS[3])
return 1
"""


class Settler:
    def __init__(self, client: redis.Redis, address: StreamAddress, observer: seams.Observer,
                 ledger: seams.RunLedger | None = None, owed: WriteBehind | None = None) -> None:
        self.client = client
        self.address = address
        self.observer = observer
        self.ledger = ledger
        self.owed = owed
        self.dlq = dlq_stream(address.stream)
        self._dead_letter_script = client.register_script(_DEAD_LETTER)

    def settle(self, plan: Plan, settlement: Settlement, prelude: Prelude | None = None,
               retry: RetryDue | None = None) -> Settle:
        """Carry out *settlement* for *plan*'s entry; how it went (``Settle``). When Redis failed the
        entry stays pending (an acknowledgment is owed to the write-behind).

        *prelude* puts commands on the acknowledgment's pipeline, ahead of the
        XACK (the marker of the invocation that completed last): one round trip
        for both. Only an ACK that clears state takes one (``takes_prelude``).
        *retry* is when the next attempt of an entry left pending is due, for the ledger.
        """
        if prelude is not None and not takes_prelude(settlement):
            raise ValueError(f"a {settlement.verdict.name} settlement takes no prelude")
        ledger = self.ledger
        if settlement.verdict is Verdict.ACK:
            done = self._ack(plan, settlement, prelude)
        elif settlement.verdict is Verdict.DEAD_LETTER:
            last = ledger.write(plan, settlement) if ledger is not None else None
            done = self._dead_letter(plan.message_id, plan.kept, settlement.reason or "", settlement.attempts,
                                     settlement.event_bytes, settlement.occurrence, last)
        else:
            if ledger is not None:
                ledger.write(plan, settlement, retry)
            done = Settle.DONE
        if done is not Settle.FAILED:
            self.observer.settled(settlement, 1)
            for function in settlement.expired:
                self.observer.expired(function)
        return done

    def settle_unmatched(self, message_ids: EntryIds) -> bool:
        """Acknowledge entries that matched nothing, in one round trip (the UNMATCHED settlement).

        Their ids may be the bytes XREADGROUP returned: redis-py sends bytes as
        they are, and encodes each str again.
        """
        if not message_ids:
            return True
        try:
            self.client.xack(self.address.stream, self.address.group, *message_ids)
        except redis.RedisError as error:
            return self.unmatched_acknowledged(message_ids, error)
        return self.unmatched_acknowledged(message_ids, None)

    def queue_unmatched(self, pipe: redis.client.Pipeline, message_ids: EntryIds) -> None:
        """Put the XACK of entries that matched nothing on *pipe*, to share another command's round trip.

        The consumer sends it ahead of its next XREADGROUP; ``unmatched_acknowledged``
        then accounts for the reply. Nothing here needs the ack before the read:
        Redis runs the pipeline's commands in order, so the acks are done before
        the read starts, as they were when they took a round trip of their own.
        """
        pipe.xack(self.address.stream, self.address.group, *message_ids)

    def unmatched_acknowledged(self, message_ids: EntryIds, reply: object) -> bool:
        """Account for the reply to a queued XACK: an exception (Redis failed; the
        entries stay pending, as with ``settle_unmatched``) or the count acknowledged."""
        if isinstance(reply, Exception):
            first = message_ids[0]
            log.warning("Cannot acknowledge entries; they stay pending", extra={
                "count": len(message_ids), "first_message_id": first.decode() if isinstance(first, bytes) else first,
                "error": str(reply)})
            return False
        self.observer.settled(UNMATCHED, len(message_ids))
        return True

    def _ack(self, plan: Plan, settlement: Settlement, prelude: Prelude | None) -> Settle:
        """XACK the entry and clear its invocation state (unless the settlement keeps it), with *plan*'s
        ledger records, in one round trip; FAILED (and the acknowledgment owed) when Redis failed."""
        stream, group, ledger, message_id = self.address.stream, self.address.group, self.ledger, plan.message_id
        pipe = self.client.pipeline(transaction=False)
        if prelude is not None:
            prelude(pipe)
        first = len(pipe)
        recorded = ledger.queue(pipe, plan, settlement) if ledger else 0
        pipe.xack(stream, group, message_id)
        if settlement.clear_state:
            pipe.delete(keys.invocation_key(stream, group, message_id))
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as error:   # Redis did not answer
            return self._unacknowledged(plan, settlement, error, recorded)
        if ledger and recorded:
            ledger.queued(plan, replies[first:first + recorded])
        refused = next((reply for reply in replies[:first] + replies[first + recorded:]
                        if isinstance(reply, Exception)), None)
        if refused is not None:
            return self._unacknowledged(plan, settlement, refused, 0)
        if self.owed is not None:
            self.owed.settled(message_id, settlement.clear_state)
        return Settle.DONE if replies[first + recorded] else Settle.ELSEWHERE

    def _unacknowledged(self, plan: Plan, settlement: Settlement, error: Exception, recorded: int) -> Settle:
        """The acknowledgment failed: it is owed to the write-behind, with the *recorded* ledger records
        that went unsent with it (without a write-behind, they are counted as unrecorded)."""
        log.warning("Cannot acknowledge the entry; it is acknowledged when Redis answers",
                    extra={"message_id": plan.message_id, "error": str(error)})
        ledger, records = self.ledger, []
        if ledger is not None and recorded:
            if self.owed is None:
                ledger.queued(plan, [error] * recorded)
            else:
                records = ledger.unsent(plan)
        if self.owed is not None:
            self.owed.acknowledge(plan.message_id, settlement.clear_state, records)
        return Settle.FAILED

    def _dead_letter(self, message_id: str, payload: str | bytes | None, reason: str, attempts: int,
                     event_bytes: int = 0, occurrence: str | None = None, last: LastRun | None = None) -> Settle:
        """Write the entry to the dead-letter stream, then acknowledge it and clear its state, in one script.

        *payload* is the event as text, or as bytes when it is not UTF-8; with
        *event_bytes* set, it is only the start of an event that size, and the
        entry says so (``truncated``, ``event_bytes``). *occurrence* is the id
        of the schedule occurrence Relay published as this entry, kept in the
        ``schedule`` field so that a redrive runs the occurrence again. *last* is
        what the ledger says of the attempt that ran last, when one ran in this dispatch.
        """
        fields: dict[FieldT, EncodableT] = {
            keys.DLQ_ORIGINAL_STREAM: self.address.stream,
            keys.DLQ_ORIGINAL_ID: message_id,
            keys.DLQ_GROUP: self.address.group,
            keys.DLQ_CONSUMER: self.address.consumer,
            keys.EVENT: payload if payload is not None else "",
            keys.DLQ_REASON: reason,
            keys.DLQ_ATTEMPTS: str(attempts),
            keys.DLQ_TIMESTAMP: datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        }
        if event_bytes:
            fields.update({keys.DLQ_TRUNCATED: "true", keys.DLQ_EVENT_BYTES: str(event_bytes)})
        if occurrence is not None:
            fields[keys.DLQ_SCHEDULE] = occurrence
        if last is not None:
            if last.run_id is not None:
                fields[keys.DLQ_RUN_ID] = last.run_id
            fields[keys.DLQ_RUN_STATUS] = last.status
            if last.exit_code is not None:
                fields[keys.DLQ_EXIT_CODE] = str(last.exit_code)
            if last.stderr:
                fields[keys.DLQ_STDERR] = last.stderr
        stream, group = self.address.stream, self.address.group
        try:
            self._dead_letter_script(
                keys=[self.dlq, stream, keys.invocation_key(stream, group, message_id)],
                args=[group, message_id, *(item for pair in fields.items() for item in pair)])
        except redis.RedisError as error:
            log.error("Cannot write to the dead-letter stream; the entry stays pending",
                      extra={"message_id": message_id, "dlq": self.dlq, "error": str(error)})
            return Settle.FAILED
        log.error("Entry dead-lettered", extra={
            "message_id": message_id, "dlq": self.dlq, "reason": reason, "attempts": attempts})
        if self.owed is not None:
            self.owed.settled(message_id)
        return Settle.DONE
