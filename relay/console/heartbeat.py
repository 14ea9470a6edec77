"""Worker heartbeats: each ``relay start`` says every 5 s that it is alive, and what it holds.

A beat is one MULTI/EXEC: the worker's hash ``relay:<stream>:worker:<host/pid>``
(relay.stream.keys) gets its short fields (host, pid, Relay's version, when
it started, when it beat, functions loaded, warm containers, in-flight
invocations, buffered entries, and ``functions``: a JSON list of each
function's status, last error, rules and schedules, bounded), expiring an
hour later; the sorted set ``relay:<stream>:workers`` scores the worker by
the beat's time, and loses every worker that has not beaten for an hour. The
console shows a worker silent for three beats as gone; an hour later it
vanishes. A worker that stops cleanly says so in a last beat (``stopped``).

The loop fails open: a beat Redis refuses is logged once as a warning (and
once more when beats get through again), never in delivery's way.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import redis
from gevent.event import Event

from relay.stream.keys import HEARTBEAT_TTL_S, worker_key, workers_key

if TYPE_CHECKING:
    from relay.live.status import FunctionStatus

log = logging.getLogger("relay.console.heartbeat")

INTERVAL = 5.0          # seconds between beats
GONE_AFTER_BEATS = 3    # a worker silent this many beats is shown gone
MAX_FUNCTIONS = 200     # of one worker's functions, sent
MAX_ERROR_CHARS = 500   # of a function's last error
MAX_PATTERN_CHARS = 300  # of a rule's pattern as JSON
MAX_WORKERS = 200       # read back for the console, newest beat first


@dataclass(frozen=True)
class FunctionState:
    """One loaded function as a worker reports it."""

    name: str
    ready: bool
    outcome: str = ""          # the last reconcile: succeeded, failed, or "" before one ended
    error: str = ""            # why the last reconcile failed
    rules: tuple[tuple[str, str], ...] = ()       # (handler, pattern as JSON)
    schedules: tuple[tuple[str, str, str], ...] = ()  # (handler, cron, timezone)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "ready": self.ready, "outcome": self.outcome, "error": self.error[:MAX_ERROR_CHARS],
                "rules": [list(rule) for rule in self.rules], "schedules": [list(item) for item in self.schedules]}

    @classmethod
    def of(cls, value: object) -> FunctionState | None:
        """One item of a heartbeat's ``functions`` list, whatever a writer put there; None when it is no object."""
        if not isinstance(value, dict):
            return None
        item = cast("dict[str, Any]", value)

        def text(name: str) -> str:
            found = item.get(name)
            return found if isinstance(found, str) else ""

        def rows(name: str, width: int) -> tuple[tuple[str, ...], ...]:
            found = item.get(name)
            if not isinstance(found, list):
                return ()
            return tuple(tuple(str(part) for part in row[:width]) for row in found[:100] if isinstance(row, list))

        return cls(name=text("name"), ready=item.get("ready") is True, outcome=text("outcome"), error=text("error"),
                   rules=cast("tuple[tuple[str, str], ...]", rows("rules", 2)),
                   schedules=cast("tuple[tuple[str, str, str], ...]", rows("schedules", 3)))


@dataclass(frozen=True)
class Pulse:
    """What a worker holds at one beat (asked of the process at each beat)."""

    functions: Sequence[FunctionState] = ()
    warm_containers: int = 0
    in_flight: int = 0
    buffered: int = 0


@dataclass(frozen=True)
class WorkerBeat:
    """A worker's last heartbeat, read back."""

    worker: str
    host: str = ""
    pid: str = ""
    version: str = ""
    started_ms: int | None = None
    beat_ms: int | None = None
    functions_loaded: int | None = None
    warm_containers: int | None = None
    in_flight: int | None = None
    buffered: int | None = None
    stopped: bool = False
    functions: tuple[FunctionState, ...] = field(default=())

    def gone(self, now_ms: int, interval: float = INTERVAL) -> bool:
        """Silent for GONE_AFTER_BEATS beats, or stopped."""
        return self.stopped or self.beat_ms is None or now_ms - self.beat_ms > GONE_AFTER_BEATS * interval * 1000

    def uptime_s(self) -> float | None:
        if self.started_ms is None or self.beat_ms is None:
            return None
        return max(0.0, (self.beat_ms - self.started_ms) / 1000)


class Heartbeat:
    """The side loop that beats for one worker (built in relay.wiring.build_process)."""

    def __init__(self, client: redis.Redis, stream: str, *, host: str, pid: int, version: str,
                 pulse: Callable[[], Pulse], interval: float = INTERVAL,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.stream = stream
        self.worker = f"{host}/{pid}"
        self.host, self.pid, self.version = host, pid, version
        self.pulse = pulse
        self.interval = interval
        self.clock = clock
        self.started_ms = int(clock() * 1000)
        self.stopping = Event()
        self.failing = False

    def beat(self, stopped: bool = False) -> None:
        """Write one heartbeat now; raises redis.RedisError."""
        pulse = self.pulse()
        now_ms = int(self.clock() * 1000)
        fields = {
            "host": self.host, "pid": str(self.pid), "version": self.version, "started": str(self.started_ms),
            "beat": str(now_ms), "functions_loaded": str(len(pulse.functions)),
            "warm_containers": str(pulse.warm_containers), "in_flight": str(pulse.in_flight),
            "buffered": str(pulse.buffered), "stopped": "1" if stopped else "0",
            "functions": json.dumps([state.to_json() for state in pulse.functions[:MAX_FUNCTIONS]])}
        key, members = worker_key(self.stream, self.worker), workers_key(self.stream)
        pipeline = self.client.pipeline(transaction=True)
        pipeline.hset(key, mapping=cast("dict[Any, Any]", fields))  # redis-py types its keys invariantly
        pipeline.expire(key, HEARTBEAT_TTL_S)
        pipeline.zadd(members, {self.worker: now_ms})
        pipeline.zremrangebyscore(members, "-inf", now_ms - HEARTBEAT_TTL_S * 1000)
        pipeline.expire(members, HEARTBEAT_TTL_S)
        pipeline.execute()

    def loop(self) -> None:
        while not self.stopping.is_set():
            self._beat_failing_open(stopped=False)
            if self.stopping.wait(self.interval):
                break
        self._beat_failing_open(stopped=True)

    def _beat_failing_open(self, stopped: bool) -> None:
        try:
            self.beat(stopped=stopped)
        except redis.RedisError as error:
            if not self.failing:
                log.warning("Cannot write the worker's heartbeat; the console shows it gone until it can",
                            extra={"error": str(error)})
            self.failing = True
            return
        if self.failing:
            log.info("The worker's heartbeat is written again")
        self.failing = False

    def stop(self) -> None:
        self.stopping.set()


def function_state(status: FunctionStatus) -> FunctionState:
    """What a heartbeat says of one function the reconciler loaded."""
    template = status.function.template
    rules = tuple((rule.handler, _json(rule.pattern.source)[:MAX_PATTERN_CHARS]) for rule in template.rules)
    schedules = tuple((schedule.handler, schedule.cron, schedule.timezone) for schedule in template.schedules)
    return FunctionState(name=status.name, ready=status.ready,
                         outcome=status.last_outcome.value if status.last_outcome is not None else "",
                         error=(status.last_error or "")[:MAX_ERROR_CHARS], rules=rules, schedules=schedules)


def _json(value: object) -> str:
    return json.dumps(value, default=str, ensure_ascii=False, sort_keys=True)


def read_workers(client: redis.Redis, stream: str, limit: int = MAX_WORKERS) -> list[WorkerBeat]:
    """The workers' last heartbeats, newest beat first, at most *limit* (two round trips)."""
    members = cast("list[bytes]", client.zrevrange(workers_key(stream), 0, limit - 1))
    if not members:
        return []
    pipeline = client.pipeline(transaction=False)
    for member in members:
        pipeline.hgetall(worker_key(stream, member.decode("utf-8", "replace")))
    beats = []
    for member, fields in zip(members, pipeline.execute(), strict=True):
        if fields:
            beats.append(decode_beat(member.decode("utf-8", "replace"), fields))
    return beats


def decode_beat(worker: str, fields: dict[bytes, bytes]) -> WorkerBeat:
    """A heartbeat hash, whatever a writer put there: odd numbers are None, odd JSON no functions."""
    def text(name: str) -> str:
        return fields.get(name.encode(), b"").decode("utf-8", "replace")

    try:
        listed = json.loads(text("functions") or "[]")
    except ValueError:
        listed = []
    states = [FunctionState.of(item) for item in (listed if isinstance(listed, list) else [])[:MAX_FUNCTIONS]]
    return WorkerBeat(worker=worker, host=text("host"), pid=text("pid"), version=text("version"),
                      started_ms=_number(text("started")), beat_ms=_number(text("beat")),
                      functions_loaded=_number(text("functions_loaded")),
                      warm_containers=_number(text("warm_containers")), in_flight=_number(text("in_flight")),
                      buffered=_number(text("buffered")), stopped=text("stopped") == "1",
                      functions=tuple(state for state in states if state is not None))


def _number(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None
