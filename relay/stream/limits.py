"""Fleet-wide limits of a function's invocations: ``rate_limit`` and ``concurrency_key``.

Both are kept in Redis, so every worker of the consumer group shares them.

``rate_limit: <n>/s`` (or /m, /h) is GCRA, the generic cell rate algorithm,
in one Lua script (``_GCRA``) on the key ``relay:rate:<stream>:<group>:<function>``.
The key holds the theoretical arrival time (TAT) of the next invocation:
one is admitted when the TAT is at most the tolerance ahead of now, and
moves the TAT one emission interval (period / n) on. The tolerance allows a
burst of B = max(1, one second's worth) invocations, so in any window of T
seconds at most B + rate × T start, which is at most rate × (T + 1) when
the rate is one a second or more. Now is the Redis server's TIME, read
inside the script, so the workers' clocks do not matter. All arithmetic is
in whole microseconds plus a remainder in 1/n microseconds (``tat:frac``),
exact in Lua's doubles for n up to MAX_RATE. A refusal consumes nothing and
says how long until the next permit.

``concurrency_key: <field path>`` is a lease per value of that field,
``relay:concurrency:<stream>:<group>:<function>:<digest>``, taken with
``SET NX PX`` and a token of its own. The digest is a hash of the value's
type and value (as patterns compare them: ``1`` and ``1.0`` are one key,
``"1"`` another), so a hostile event cannot choose the key's length or
shape. Its TTL is the invocation's timeout plus LEASE_MARGIN; a greenlet
renews it every third of that while the invocation runs (compare-and-renew
by token), and it is released at the end (compare-and-delete by token). A
worker that dies leaves its lease to expire with the TTL.

Everything fails open, like the invocation bookkeeping: when Redis cannot
answer, the invocation runs (unlimited, unkeyed) and the outage is logged
once as a warning, and once more when Redis answers again.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

import gevent
import redis
from gevent.event import Event

from relay.durations import MICROSECOND, MILLISECOND, SECOND
from relay.stream.keys import StreamAddress, concurrency_key, rate_key

if TYPE_CHECKING:
    from relay.functions.template import RateLimit, Template

log = logging.getLogger("relay.stream.limits")

LEASE_MARGIN = 30 * SECOND   # a lease's TTL beyond the invocation's timeout
KEY_POLL = 0.1               # seconds between two asks for a concurrency key held elsewhere
DIGEST_LENGTH = 32           # hex characters of a key value's SHA-256 in the lease's name

# KEYS[1] the rate key; ARGV count, period (µs), burst. Returns {admitted, now (µs), wait (µs)}.
_GCRA = """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local count, period, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat, frac = now, 0
local at, rest = string.match(redis.call('GET', KEYS[1]) or '', '^(%d+):(%d+)$')
if at then
  tat, frac = tonumber(at), tonumber(rest)
  if tat < now then
    tat, frac = now, 0
  elseif frac >= count or (tat - now) * count + frac > burst * period then
    -- not a value this script writes, or the server's clock went back: as if the burst was just used
    tat, frac = now + math.floor(burst * period / count), (burst * period) % count
  end
end
local ahead = (tat - now) * count + frac
local tolerance = (burst - 1) * period
if ahead > tolerance then
  return {0, now, math.ceil((ahead - tolerance) / count)}
end
frac = frac + period % count
tat = tat + math.floor(period / count) + math.floor(frac / count)
frac = frac % count
redis.call('SET', KEYS[1], string.format('%d:%d', tat, frac), 'PX', math.floor((tat - now) / 1000) + 1)
return {1, now, 0}
"""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Limit(Enum):
    """Which of a function's fleet-wide limits an invocation waits for."""

    RATE = "rate_limit"
    KEY = "concurrency_key"


@dataclass(frozen=True)
class Blocked:
    """The limit refused the invocation for now; ask again in *retry_in* seconds."""

    limit: Limit
    retry_in: float


@dataclass(frozen=True)
class Permit:
    """One answer of the rate limiter: *admitted*, the server's time, and the wait until the next permit."""

    admitted: bool
    now: int        # microseconds, the Redis server's clock
    wait: int       # microseconds; 0 when admitted


class RateLimiter:
    """The GCRA script; raises redis.RedisError."""

    def __init__(self, client: redis.Redis) -> None:
        self._script = client.register_script(_GCRA)

    def take(self, key: str, rate: RateLimit) -> Permit:
        admitted, now, wait = self._script(keys=[key], args=[rate.count, rate.period // MICROSECOND, burst(rate)])
        return Permit(bool(admitted), int(now), int(wait))


def burst(rate: RateLimit) -> int:
    """The invocations that may start at once after a quiet time: one second's worth, at least one."""
    return max(1, rate.count * SECOND // rate.period)


class KeyLeases:
    """Leases on keys, each with its own token; raises redis.RedisError."""

    def __init__(self, client: redis.Redis, owner: str) -> None:
        self.client = client
        self.owner = owner
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def acquire(self, key: str, ttl_ms: int) -> str | None:
        """The new lease's token, or None when another holds *key*."""
        token = f"{self.owner}/{secrets.token_hex(8)}"
        return token if self.client.set(key, token, nx=True, px=ttl_ms) else None

    def renew(self, key: str, token: str, ttl_ms: int) -> bool:
        """Whether the lease was still *token*'s (and now lasts *ttl_ms* again)."""
        return bool(self._renew(keys=[key], args=[token, ttl_ms]))

    def release(self, key: str, token: str) -> bool:
        """Whether the lease was still *token*'s (and is now gone)."""
        return bool(self._release(keys=[key], args=[token]))


def key_digest(value: str | int | float | bool) -> str:
    """A hash of a concurrency key value that tells its type: ``1`` and ``1.0`` are one key, ``"1"`` another."""
    if type(value) is str:
        text = f"s:{value}"
    elif type(value) is bool:
        text = f"b:{value}"
    elif type(value) is int or (type(value) is float and value.is_integer()):
        text = f"i:{int(value):x}"       # hexadecimal: no limit on the digits of a huge integer
    else:
        text = f"f:{value!r}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_LENGTH]


class Passage:
    """An invocation admitted by its function's limits; holds its concurrency key's lease, if any."""

    __slots__ = ("lease",)

    def __init__(self, lease: HeldLease | None = None) -> None:
        self.lease = lease


class FleetLimits:
    """Every function's fleet-wide limits for one worker (a relay.stream.seams.Limits); fails open."""

    def __init__(self, client: redis.Redis, address: StreamAddress, *, lease_margin: int = LEASE_MARGIN) -> None:
        self.address = address
        self.rates = RateLimiter(client)
        self.leases = KeyLeases(client, address.consumer)
        self.lease_margin = lease_margin
        self._unreachable = False

    def enter(self, function: str, template: Template, event: dict[str, object] | None,
              timeout: int) -> Passage | Blocked:
        """Take the key's lease, then a rate permit; never waits. *timeout* (ns) is the invocation's.

        The lease comes first: a permit taken for an invocation whose key is
        busy would be lost to the rate, while a lease given back when the rate
        refuses costs only a round trip.
        """
        lease: HeldLease | None = None
        key = template.concurrency_key
        value = key.value(event) if key is not None and event is not None else None
        if value is not None:
            held = self._lease(function, value, timeout)
            if isinstance(held, Blocked):
                return held
            lease = held
        rate = template.rate_limit
        if rate is not None:
            wait = self._permit(function, rate)
            if wait:
                if lease is not None:
                    self.leave(Passage(lease))
                return Blocked(Limit.RATE, wait)
        return Passage(lease)

    def leave(self, passage: Passage) -> None:
        lease = passage.lease
        if lease is None:
            return
        lease.stop()
        try:
            self.leases.release(lease.key, lease.token)
        except redis.RedisError as error:
            self.failed(error)
            return
        self.answered()

    def _permit(self, function: str, rate: RateLimit) -> float:
        """0 when a permit was taken, else the seconds until the next one."""
        try:
            permit = self.rates.take(rate_key(self.address.stream, self.address.group, function), rate)
        except redis.RedisError as error:
            self.failed(error)
            return 0
        self.answered()
        return 0 if permit.admitted else permit.wait / 1e6

    def _lease(self, function: str, value: str | int | float | bool, timeout: int) -> HeldLease | Blocked | None:
        """The HeldLease; Blocked when another holds the key; None (run unkeyed) when Redis cannot say."""
        key = concurrency_key(self.address.stream, self.address.group, function, key_digest(value))
        ttl_ms = (timeout + self.lease_margin) // MILLISECOND
        try:
            token = self.leases.acquire(key, ttl_ms)
        except redis.RedisError as error:
            self.failed(error)
            return None
        self.answered()
        return Blocked(Limit.KEY, KEY_POLL) if token is None else HeldLease(self, key, token, ttl_ms)

    def failed(self, error: Exception) -> None:
        if not self._unreachable:
            log.warning("Cannot reach Redis for rate limits and concurrency keys; invocations run without them",
                        extra={"error": str(error)})
            self._unreachable = True
        else:
            log.debug("Redis still unreachable for rate limits and concurrency keys", extra={"error": str(error)})

    def answered(self) -> None:
        if self._unreachable:
            log.info("Redis reachable again; rate limits and concurrency keys apply")
            self._unreachable = False


class HeldLease:
    """A concurrency key held by this worker: renewed every third of its TTL until ``stop``."""

    def __init__(self, limits: FleetLimits, key: str, token: str, ttl_ms: int) -> None:
        self.limits = limits
        self.key = key
        self.token = token
        self.ttl_ms = ttl_ms
        self._stopped = Event()
        gevent.spawn(self._keep)

    def stop(self) -> None:
        self._stopped.set()

    def _keep(self) -> None:
        limits = self.limits
        while not self._stopped.wait(self.ttl_ms / 3000):
            try:
                kept = limits.leases.renew(self.key, self.token, self.ttl_ms)
            except redis.RedisError as error:
                limits.failed(error)
                continue
            limits.answered()
            if not kept:
                log.warning("Concurrency key lease lost while its invocation runs; another may start",
                            extra={"key": self.key})
                return
