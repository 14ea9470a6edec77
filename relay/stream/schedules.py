"""Cron schedules: every worker evaluates them, one stream entry per occurrence.

A worker never runs a scheduled handler itself. When an occurrence is due it
publishes it into the Relay stream with a Lua script that, in one atomic
step, XADDs the entry and sets the dedup key
``relay:schedule:<function>:<handler>:<instant>`` (7-day TTL) to the new
entry's id, only if that key is absent; every other worker's attempt at the
same occurrence is a clean no-op. From there it is an ordinary entry: one
worker receives it and runs exactly that handler.

Only that script writes the dedup key, so the key says which entry is the
occurrence: a producer may add an entry with any fields, including a
``schedule`` field of its own, but the consumer runs a schedule handler only
for the entry whose id the key holds (``Provenance``, asked by the
dispatcher before any attempt); any other is dead-lettered unrun. An
occurrence an earlier Relay published holds ``1`` instead of an id: the
first entry checked whose event is exactly that occurrence's own payload
takes the key (its id replaces the ``1``), so one entry at most ever runs
for it.

Occurrences are computed on the wall clock of the schedule's time zone and
identified by their instant in UTC. Across DST changes each instant is used
once: a wall time that falls in a spring-forward gap fires at the instant its
pre-change offset gives, a wall time repeated by a fall-back fires once (the
first time), and instants never go backwards.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol
from zoneinfo import ZoneInfo

from croniter import croniter

from relay.stream.keys import (
    EVENT,
    SCHEDULE,
    SCHEDULE_UNRECORDED,
    occurrence_id,
    parse_occurrence_id,
    schedule_key,
)

__all__ = ["Occurrence", "Provenance", "Publisher", "Scheduler", "next_instant", "occurrence_payload",
           "parse_occurrence_id"]

if TYPE_CHECKING:
    import gevent
    import redis

    from relay.functions import ActiveFunction
    from relay.stream.plans import Plan

log = logging.getLogger("relay.stream.schedules")

SOURCE = "relay.schedule"
DEDUP_TTL_SECONDS = 7 * 24 * 3600
_MAX_STEPS = 10_000

# KEYS[1] dedup key, KEYS[2] stream; ARGV: ttl, occurrence id, payload. Returns the new entry's id, or false
# when the occurrence was published already. The XADD comes first: one that fails (the stream key holds
# another type) stops the script before the key is set, so no key ever stands for an entry that is not there.
_PUBLISH_IF_NEW = f"""
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local id = redis.call('XADD', KEYS[2], '*', '{EVENT}', ARGV[3], '{SCHEDULE}', ARGV[2])
redis.call('SET', KEYS[1], id, 'EX', ARGV[1])
return id
"""

# KEYS[1] dedup key; ARGV: an entry's id, '1' when its event is exactly its occurrence's payload. Returns
# the id of the entry published for the occurrence, or false when there is no record of it. A key an
# earlier Relay set to '1' is taken by the first entry with the occurrence's own payload (its TTL kept).
_PUBLISHED_ENTRY = f"""
local published = redis.call('GET', KEYS[1])
if published == '{SCHEDULE_UNRECORDED}' and ARGV[2] == '1' then
  redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
  return ARGV[1]
end
return published
"""


class Counter(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class ScheduleCounters(Protocol):
    """What the Publisher counts (relay.metrics.prometheus.Metrics)."""

    @property
    def schedule_published(self) -> Counter: ...

    @property
    def schedule_duplicates(self) -> Counter: ...

    @property
    def schedule_failures(self) -> Counter: ...


class Snapshots(Protocol):
    """The live function set as the Scheduler follows it (relay.live.catalog.Catalog)."""

    def snapshot(self) -> tuple[ActiveFunction, ...]: ...


@dataclass(frozen=True)
class Occurrence:
    function: str
    handler: str
    at: datetime  # an aware instant in UTC

    @property
    def scheduled_at(self) -> str:
        return self.at.strftime("%Y-%m-%dT%H:%M:%SZ")

    @property
    def id(self) -> str:
        return occurrence_id(self.function, self.handler, self.scheduled_at)

    @property
    def payload(self) -> str:
        return occurrence_payload(self.scheduled_at)


def occurrence_payload(scheduled_at: str) -> str:
    """The event of the occurrence at *scheduled_at*: what the handler receives on stdin."""
    return json.dumps({"source": SOURCE, "scheduled_at": scheduled_at}, separators=(",", ":"))


def next_instant(cron: str, zone_name: str, after: datetime) -> datetime:
    """The first occurrence of *cron* in the zone strictly after the aware instant *after*."""
    zone = ZoneInfo(zone_name)
    six_fields = len(cron.split()) == 6
    wall = after.astimezone(zone).replace(tzinfo=None)
    if not six_fields:
        wall = wall.replace(second=0, microsecond=0)
    # Wall times map to instants with the pre-change offset (fold=0), so across a
    # DST change a wall time can land at or before *after*: keep the first later one.
    times = croniter(cron, wall, second_at_beginning=six_fields)
    for _ in range(_MAX_STEPS):
        candidate = times.get_next(datetime).replace(tzinfo=zone, fold=0).astimezone(UTC)
        if candidate > after:
            return candidate
    raise RuntimeError(f"no occurrence of {cron!r} found after {after.isoformat()}")


class Publisher:
    """Publishes occurrences into the stream, once across the fleet."""

    def __init__(self, client: redis.Redis, stream: str, metrics: ScheduleCounters) -> None:
        self.stream = stream
        self.metrics = metrics
        self._script = client.register_script(_PUBLISH_IF_NEW)

    def publish(self, occurrence: Occurrence) -> bool | None:
        """True if this worker published it, False if another already had, None when Redis failed."""
        import redis

        try:
            entry_id = self._script(keys=[schedule_key(occurrence.id), self.stream],
                                    args=[DEDUP_TTL_SECONDS, occurrence.id, occurrence.payload])
        except redis.RedisError as error:
            self.metrics.schedule_failures.inc()
            log.warning("Cannot publish schedule occurrence", extra={
                "function": occurrence.function, "handler": occurrence.handler,
                "scheduled_at": occurrence.scheduled_at, "error": str(error)})
            return None
        if entry_id is None:
            self.metrics.schedule_duplicates.inc()
            log.debug("Schedule occurrence already published", extra={"occurrence": occurrence.id})
            return False
        self.metrics.schedule_published.inc()
        log.info("Schedule occurrence published", extra={
            "function": occurrence.function, "handler": occurrence.handler,
            "scheduled_at": occurrence.scheduled_at, "message_id": entry_id.decode()})
        return True


class Provenance:
    """Which entry the scheduler published for an occurrence: the consumer's check of a ``schedule`` field.

    One script call per delivery of an entry with a ``schedule`` field;
    entries without one never come here.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._script = client.register_script(_PUBLISHED_ENTRY)

    def published(self, plan: Plan) -> str | None:
        """The id of the entry published for *plan*'s occurrence, or None when there is no record of
        one (never published, or its key expired); raises redis.RedisError."""
        occurrence = plan.occurrence
        assert occurrence is not None, "the dispatcher asks this of schedule occurrences only"
        parsed = parse_occurrence_id(occurrence)
        assert parsed is not None, "planning keeps an occurrence id only when it parses"
        _function, _handler, scheduled_at = parsed
        own_payload = plan.payload == occurrence_payload(scheduled_at)
        published = self._script(keys=[schedule_key(occurrence)],
                                 args=[plan.message_id, "1" if own_payload else "0"])
        return None if published is None else published.decode("utf-8", "replace")


JobKey = tuple[str, str, str, str]   # function, handler, cron, time zone


class Scheduler:
    """One greenlet per (function, handler, cron, timezone), following the catalog.

    The catalog's snapshot is a new tuple whenever a reconcile changes it, so
    a cheap identity check finds changes; jobs whose definition changed are
    replaced and unchanged ones keep their place in time.
    """

    def __init__(self, catalog: Snapshots, publisher: Publisher, clock: Callable[[], datetime] | None = None,
                 sync_interval: float = 1.0) -> None:
        import gevent.event

        self.catalog = catalog
        self.publisher = publisher
        self.clock = clock or (lambda: datetime.now(UTC))
        self.sync_interval = sync_interval
        self.stopping = gevent.event.Event()
        self.jobs: dict[JobKey, gevent.Greenlet] = {}
        self._seen: tuple[ActiveFunction, ...] | None = None

    def loop(self) -> None:
        while not self.stopping.is_set():
            snapshot = self.catalog.snapshot()
            if snapshot is not self._seen:
                self._seen = snapshot
                self.sync(snapshot)
            self.stopping.wait(self.sync_interval)
        self._stop_jobs(list(self.jobs))

    def sync(self, snapshot: tuple[ActiveFunction, ...]) -> None:
        import gevent

        wanted = {(active.name, schedule.handler, schedule.cron, schedule.timezone)
                  for active in snapshot for schedule in active.function.template.schedules}
        self._stop_jobs([key for key in self.jobs if key not in wanted])
        for key in sorted(wanted - set(self.jobs)):
            self.jobs[key] = gevent.spawn(self._job, *key)
            log.debug("Schedule job started", extra={"function": key[0], "handler": key[1], "cron": key[2],
                                                      "timezone": key[3]})

    def stop(self) -> None:
        self.stopping.set()

    def _stop_jobs(self, keys: list[JobKey]) -> None:
        import gevent

        gevent.killall([self.jobs.pop(key) for key in keys], block=False)

    def _job(self, function: str, handler: str, cron: str, zone: str) -> None:
        after = self.clock()
        while not self.stopping.is_set():
            at = next_instant(cron, zone, after)
            delay = (at - self.clock()).total_seconds()
            if delay > 0 and self.stopping.wait(delay):
                return
            self.publisher.publish(Occurrence(function, handler, at))
            after = at
