"""Cron schedules: every worker evaluates them, one stream entry per occurrence.

A worker never runs a scheduled handler itself. When an occurrence is due it
publishes it into the Relay stream with a Lua script that, in one atomic
step, sets the dedup key ``relay:schedule:<function>:<handler>:<instant>``
(7-day TTL) only if it is absent and XADDs the entry; every other worker's
attempt at the same occurrence is a clean no-op. From there it is an ordinary
entry: one worker receives it and runs exactly that handler.

Occurrences are computed on the wall clock of the schedule's time zone and
identified by their instant in UTC. Across DST changes each instant is used
once: a wall time that falls in a spring-forward gap fires at the instant its
pre-change offset gives, a wall time repeated by a fall-back fires once (the
first time), and instants never go backwards.
"""

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from croniter import croniter

from relay.stream.keys import EVENT, SCHEDULE, schedule_key

log = logging.getLogger("relay.stream.schedules")

SOURCE = "relay.schedule"
DEDUP_TTL_SECONDS = 7 * 24 * 3600
_MAX_STEPS = 10_000

# KEYS[1] dedup key, KEYS[2] stream; ARGV: ttl, occurrence id, payload.
_PUBLISH_IF_NEW = f"""
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
  return redis.call('XADD', KEYS[2], '*', '{EVENT}', ARGV[3], '{SCHEDULE}', ARGV[2])
end
return false
"""


@dataclass(frozen=True)
class Occurrence:
    function: str
    handler: str
    at: datetime  # an aware instant in UTC

    @property
    def scheduled_at(self):
        return self.at.strftime("%Y-%m-%dT%H:%M:%SZ")

    @property
    def id(self):
        return f"schedule:{self.function}:{self.handler}:{self.scheduled_at}"

    @property
    def payload(self):
        return json.dumps({"source": SOURCE, "scheduled_at": self.scheduled_at}, separators=(",", ":"))


def parse_occurrence_id(text):
    """(function, handler, scheduled_at) of an occurrence id, or None."""
    parts = text.split(":", 3)
    if len(parts) != 4 or parts[0] != "schedule" or not all(parts[1:]):
        return None
    return parts[1], parts[2], parts[3]


def next_instant(cron, zone_name, after):
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

    def __init__(self, client, stream, metrics):
        self.stream = stream
        self.metrics = metrics
        self._script = client.register_script(_PUBLISH_IF_NEW)

    def publish(self, occurrence):
        """True if this worker published it, False if another already had."""
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


class Scheduler:
    """One greenlet per (function, handler, cron, timezone), following the catalog.

    The catalog's snapshot is a new tuple whenever a reconcile changes it, so
    a cheap identity check finds changes; jobs whose definition changed are
    replaced and unchanged ones keep their place in time.
    """

    def __init__(self, catalog, publisher, clock=None, sync_interval=1.0):
        import gevent.event

        self.catalog = catalog
        self.publisher = publisher
        self.clock = clock or (lambda: datetime.now(UTC))
        self.sync_interval = sync_interval
        self.stopping = gevent.event.Event()
        self.jobs = {}
        self._seen = None

    def loop(self):
        while not self.stopping.is_set():
            snapshot = self.catalog.snapshot()
            if snapshot is not self._seen:
                self._seen = snapshot
                self.sync(snapshot)
            self.stopping.wait(self.sync_interval)
        self._stop_jobs(list(self.jobs))

    def sync(self, snapshot):
        import gevent

        wanted = {(active.name, schedule.handler, schedule.cron, schedule.timezone)
                  for active in snapshot for schedule in active.function.template.schedules}
        self._stop_jobs([key for key in self.jobs if key not in wanted])
        for key in sorted(wanted - set(self.jobs)):
            self.jobs[key] = gevent.spawn(self._job, *key)
            log.debug("Schedule job started", extra={"function": key[0], "handler": key[1], "cron": key[2],
                                                      "timezone": key[3]})

    def stop(self):
        self.stopping.set()

    def _stop_jobs(self, keys):
        import gevent

        gevent.killall([self.jobs.pop(key) for key in keys], block=False)

    def _job(self, function, handler, cron, zone):
        after = self.clock()
        while not self.stopping.is_set():
            at = next_instant(cron, zone, after)
            delay = (at - self.clock()).total_seconds()
            if delay > 0 and self.stopping.wait(delay):
                return
            self.publisher.publish(Occurrence(function, handler, at))
            after = at
