"""Per-message invocation state in Redis (see markers.py for the values).

Every call fails open: a Redis error while reading or writing bookkeeping is
logged and treated as "no state", so bookkeeping never blocks delivery; the
at-least-once contract holds because the entry itself stays pending until it
is acknowledged.

A stored value Relay cannot read (tampered, or written by something else) is
an absent marker: the invocation is eligible, and its first claim replaces
the value. It is logged as a warning once per entry, not on every delivery.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import cast

import redis

from relay.quoting import quote
from relay.stream import markers
from relay.stream.keys import StreamAddress, invocation_key

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
    def __init__(self, client: redis.Redis, address: StreamAddress) -> None:
        self.client = client
        self.address = address
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
        """Record attempt *attempt* as running until *deadline*, unless the field changed."""
        try:
            claimed = self._try_start(keys=[self.key(message_id)],
                                      args=[field, expected or "", markers.running(deadline, attempt),
                                            markers.STATE_TTL_SECONDS])
        except redis.RedisError as error:
            log.warning("Cannot claim invocation; running it anyway",
                        extra={"message_id": message_id, "field": field, "error": str(error)})
            return True
        return bool(claimed)

    def release(self, message_id: str, field: str, previous: bytes | None) -> None:
        """Undo a claim: put back the marker *previous* it replaced (none: remove the field)."""
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
            log.warning("Cannot record invocation state", extra={
                "message_id": message_id, "field": field, "state": value.split(":")[0], "error": str(error)})

    @staticmethod
    def _queue(pipe: redis.client.Pipeline, key: str, field: str, value: str) -> None:
        pipe.hset(key, field, value)
        pipe.expire(key, markers.STATE_TTL_SECONDS)
