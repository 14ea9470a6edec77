"""Per-message invocation state in Redis (see markers.py for the values).

Every call fails open: a Redis error while reading or writing bookkeeping is
logged and treated as "no state", so bookkeeping never blocks delivery; the
at-least-once contract holds because the entry itself stays pending until it
is acknowledged. A claim or a completion marker that could not be written is
handed to the write-behind (relay.stream.writebehind), which writes it as
soon as Redis answers, so the entry does not run again for want of it. A
claim that meets a broken connection is first tried once more at once, on a
new one: after a failover, every pooled connection to the old primary fails
once, and the new primary is usually there already.

A stored value Relay cannot read (tampered, or written by something else) is
an absent marker: the invocation is eligible, and its first claim replaces
the value. It is logged as a warning once per entry, not on every delivery.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, cast

import redis

from relay.quoting import quote
from relay.stream import markers
from relay.stream.keys import StreamAddress, invocation_key

if TYPE_CHECKING:
    from relay.stream.writebehind import WriteBehind

log = logging.getLogger("relay.stream.invocations")

WARNED_ENTRIES = 4096   # entries whose unreadable state was logged, remembered to log it once

# Claim an invocation only if its field still holds what we read: two workers
# that read the same state cannot both start the same attempt.
_TRY_START = """
local current = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if current ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""


class InvocationStore:
    def __init__(self, client: redis.Redis, address: StreamAddress, owed: WriteBehind | None = None) -> None:
        self.client = client
        self.address = address
        self.owed = owed
        self._try_start = client.register_script(_TRY_START)
        self._warned: OrderedDict[str, frozenset[str]] = OrderedDict()   # message id → unreadable fields logged

    def key(self, message_id: str) -> str:
        return invocation_key(self.address.stream, self.address.group, message_id)

    def load(self, message_id: str) -> dict[str, bytes]:
        """{field: raw value} for the message; {} when Redis cannot say.

        Values stay the bytes Redis holds, so a claim compares against exactly
        what is stored, even when it is not text.
        """
        try:
            stored = cast("dict[bytes, bytes]", self.client.hgetall(self.key(message_id)))
        except redis.RedisError as error:
            log.warning("Cannot read invocation state; treating it as empty",
                        extra={"message_id": message_id, "error": str(error)})
            return {}
        values = {name.decode("utf-8", "replace"): value for name, value in stored.items()}
        self._warn_unreadable(message_id, values)
        return values

    def _warn_unreadable(self, message_id: str, values: dict[str, bytes]) -> None:
        unreadable = frozenset(name for name, value in values.items() if markers.read(value) is None)
        if not unreadable or unreadable <= self._warned.get(message_id, frozenset()):
            return
        self._warned[message_id] = unreadable | self._warned.get(message_id, frozenset())
        self._warned.move_to_end(message_id)
        while len(self._warned) > WARNED_ENTRIES:
            self._warned.popitem(last=False)
        log.warning("Invocation state Relay cannot read; treating it as absent", extra={
            "message_id": message_id, "fields": ",".join(sorted(unreadable)),
            "values": ",".join(sorted(quote(values[name]) for name in unreadable))})

    def try_start(self, message_id: str, field: str, expected: bytes | None, deadline: int, attempt: int) -> bool:
        """Record attempt *attempt* as running until *deadline*, unless the field changed.

        When Redis cannot say, the attempt runs anyway and its claim is owed to the write-behind.
        """
        value = markers.running(deadline, attempt)
        args = [field, expected or "", value, markers.STATE_TTL_SECONDS]
        try:
            claimed = self._try_start(keys=[self.key(message_id)], args=args)
        except redis.RedisError as error:
            log.warning("Cannot claim invocation; running it anyway, the claim is written when Redis answers",
                        extra={"message_id": message_id, "field": field, "error": str(error)})
            if self.owed is not None:
                self.owed.claim(message_id, field, expected, value)
            return True
        return bool(claimed)

    def release(self, message_id: str, field: str, previous: bytes | None) -> None:
        """Undo a claim: put back the marker *previous* it replaced (none: remove the field)."""
        if self.owed is not None:
            self.owed.written(message_id, field)   # a claim owed for it must never be written now
        key = self.key(message_id)
        try:
            if previous:
                self.client.hset(key, field, previous)
            else:
                self.client.hdel(key, field)
        except redis.RedisError as error:
            log.warning("Cannot release invocation claim; it expires at its deadline",
                        extra={"message_id": message_id, "field": field, "error": str(error)})

    def complete(self, message_id: str, field: str) -> None:
        self._write(message_id, field, markers.OK)

    def queue_complete(self, pipe: redis.client.Pipeline, message_id: str, field: str) -> None:
        """Put the completed marker on *pipe*, to go in the round trip of the entry's acknowledgment."""
        self._queue(pipe, self.key(message_id), field, markers.OK)

    def failed(self, message_id: str, field: str, retry_at: int, attempt: int) -> None:
        self._write(message_id, field, markers.waiting(retry_at, attempt))

    def exhausted(self, message_id: str, field: str, attempts: int) -> None:
        self._write(message_id, field, markers.exhausted(attempts))

    def _write(self, message_id: str, field: str, value: str) -> None:
        try:
            pipe = self.client.pipeline(transaction=False)
            self._queue(pipe, self.key(message_id), field, value)
            pipe.execute()
        except redis.RedisError as error:
            completed = value == markers.OK
            log.warning("Cannot record invocation state" + ("; it is written when Redis answers" if completed else ""),
                        extra={"message_id": message_id, "field": field, "state": value.split(":")[0],
                               "error": str(error)})
            if completed and self.owed is not None:
                self.owed.complete(message_id, field)
            return
        if self.owed is not None:
            self.owed.written(message_id, field, value)

    @staticmethod
    def _queue(pipe: redis.client.Pipeline, key: str, field: str, value: str) -> None:
        pipe.hset(key, field, value)
        pipe.expire(key, markers.STATE_TTL_SECONDS)

