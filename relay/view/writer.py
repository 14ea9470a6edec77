"""Keeping the state database in step with Relay, off the hot path.

The reconciler hands over the status of every function whenever one
changes (``functions_changed``, which turns them into rows with
``function_record``, stores them and wakes the loop);
the loop writes it, and every 5 s it writes the absolute snapshot of the
counters (and of the warm_containers gauge and the limit waits) read from
the Prometheus registry, the single source of them.
On a graceful shutdown ``final_flush`` writes both once more, bounded in
time; a hard crash loses at most one interval of counters.

SQLite blocks (and a commit may wait for the disk), so every database call
runs in a one-thread pool of its own: the hub keeps dispatching meanwhile,
and two writes never overlap, even when the greenlet that asked for one is
killed half way. A broken or unwritable database is logged once, retried
at every flush and never stops Relay.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

import gevent
from gevent.event import Event
from gevent.threadpool import ThreadPool

from relay.durations import format_duration
from relay.errors import StateError
from relay.live.status import FunctionStatus, Outcome
from relay.view.database import StateDatabase
from relay.view.reader import StateReader
from relay.view.records import (
    EVENT,
    FAILED,
    PENDING,
    READY,
    SCHEDULE,
    SUCCESS,
    Counters,
    FunctionRecord,
    FunctionStats,
    HandlerRecord,
    LimitWaits,
    Stats,
    WarmRecord,
    now,
)

if TYPE_CHECKING:
    from prometheus_client.metrics import MetricWrapperBase

    from relay.functions.template import Warm
    from relay.metrics.prometheus import Metrics

log = logging.getLogger("relay.view.writer")

STATS_INTERVAL = 5.0        # seconds; fixed, shorter only in tests
FINAL_FLUSH_TIMEOUT = 5.0   # seconds the last write may take at shutdown

# Prometheus counter attribute of relay.metrics.Metrics -> Counters field.
_GLOBAL = (("events_processed", "events_processed"), ("handler_success", "handler_successes"),
           ("handler_failure", "handler_failures"), ("retries", "retries"), ("dlq_entries", "dlq_entries"))
_PER_FUNCTION = (("function_events", "events_processed"), ("function_success", "handler_successes"),
                 ("function_failure", "handler_failures"), ("function_retries", "retries"),
                 ("function_dlq_entries", "dlq_entries"))
# Prometheus counter attributes, named as the LimitWaits fields they fill.
_WAITS = ("rate_limit_waits", "rate_limit_wait_seconds", "concurrency_key_waits", "concurrency_key_wait_seconds")


class StateWriter:
    def __init__(self, database: StateDatabase, metrics: Metrics, *, interval: float = STATS_INTERVAL,
                 clock: Callable[[], datetime] = now) -> None:
        self.database = database
        self.metrics = metrics
        self.interval = interval
        self.clock = clock
        self.stopping = Event()
        self._wake = Event()
        self._view: tuple[FunctionRecord, ...] = ()
        self._view_dirty = False
        self._pool = ThreadPool(1)
        self._failing = False

    def functions_changed(self, statuses: Iterable[FunctionStatus]) -> None:
        """The reconciler's complete, current view (FunctionStatuses); never blocks."""
        self._view = tuple(function_record(status) for status in statuses)
        self._view_dirty = True
        self._wake.set()

    def loop(self) -> None:
        due = time.monotonic() + self.interval
        while not self.stopping.is_set():
            self._wake.wait(timeout=max(0.0, due - time.monotonic()))
            self._wake.clear()
            if self.stopping.is_set():
                return
            stats_due = time.monotonic() >= due
            if stats_due:
                due = max(due + self.interval, time.monotonic())
            self.flush(stats=stats_due)

    def stop(self) -> None:
        self.stopping.set()
        self._wake.set()

    def flush(self, stats: bool = True) -> None:
        """Write the view if it changed, and the counters when *stats*; errors are logged."""
        functions: tuple[FunctionRecord, ...] | None = None
        if self._view_dirty:
            functions, self._view_dirty = self._view, False
        if functions is None and not stats:
            return
        snapshot, per_function = stats_snapshot(self.metrics, self.clock()) if stats else (None, None)
        try:
            self._pool.apply(self.database.write, (functions, snapshot, per_function), {"view": self._view})
        except StateError as error:
            if functions is not None:
                self._view_dirty = True
            if not self._failing:
                log.warning("State database unavailable; Relay continues without it and keeps retrying",
                            extra={"error": str(error)})
            self._failing = True
            return
        if self._failing:
            log.info("State database writable again", extra={"path": str(self.database.path)})
        self._failing = False

    def final_flush(self, timeout: float = FINAL_FLUSH_TIMEOUT) -> None:
        """The last view and counters, waiting at most *timeout* seconds; then close."""
        self.stop()
        try:
            with gevent.Timeout(timeout):
                self._view_dirty = True
                self.flush(stats=True)
                self._pool.apply(self.database.close)
        except gevent.Timeout:
            # The write goes on in its thread and ends with the process; nothing waits for it.
            log.warning("Final state flush did not finish in time; the latest counters may be lost",
                        extra={"timeout": f"{timeout:g}s"})
            return
        self._pool.kill()


_OUTCOMES: dict[Outcome | None, str | None] = {Outcome.SUCCEEDED: SUCCESS, Outcome.FAILED: FAILED, None: None}


def function_record(status: FunctionStatus) -> FunctionRecord:
    """The state row of one function the reconciler reports: references to secrets, never their values."""
    function, template = status.function, status.function.template
    handlers = tuple(HandlerRecord(handler=rule.handler, timeout=format_duration(rule.timeout), kind=EVENT)
                     for rule in template.rules)
    handlers += tuple(HandlerRecord(handler=schedule.handler, timeout=format_duration(schedule.timeout),
                                    kind=SCHEDULE, cron=schedule.cron, timezone=schedule.timezone)
                      for schedule in template.schedules)
    return FunctionRecord(
        name=function.name, runtime=template.runtime, status=READY if status.ready else PENDING,
        updated_at=status.updated_at, image=status.image,
        fingerprint=function.fingerprint if status.ready else None, prepared_at=status.prepared_at,
        last_reconcile_at=status.last_reconcile_at, last_reconcile_status=_OUTCOMES[status.last_outcome],
        last_error=status.last_error, env=dict(template.env), secrets=dict(template.secrets), handlers=handlers,
        warm=_warm_record(template.warm),
        rate_limit=None if template.rate_limit is None else str(template.rate_limit),
        concurrency_key=None if template.concurrency_key is None else template.concurrency_key.path)


def _warm_record(warm: Warm | None) -> WarmRecord | None:
    if warm is None:
        return None
    return WarmRecord(containers=warm.containers, max_invocations=warm.max_invocations,
                      idle=format_duration(warm.idle), prestart=warm.prestart)


def stats_snapshot(metrics: Metrics, moment: datetime) -> tuple[Stats, dict[str, FunctionStats]]:
    """(Stats, {function: FunctionStats}) from the registry, as absolute values.

    A function appears once it has a counter, a warm_containers gauge or a
    limit wait, so warm containers prestarted before any event still have
    their number.
    """
    counters = Counters(**{field: int(_value(getattr(metrics, name))) for name, field in _GLOBAL})
    stats = Stats(counters=counters, pending_entries=int(_value(metrics.pending_entries)),
                  oldest_pending_age_seconds=float(_value(metrics.pending_oldest_age)), updated_at=moment)
    per_function: dict[str, dict[str, int]] = {}
    for name, field in _PER_FUNCTION:
        for function, value in _by_function(getattr(metrics, name)):
            per_function.setdefault(function, {})[field] = int(value)
    warm = {function: int(value) for function, value in _by_function(metrics.warm_containers)}
    waits: dict[str, dict[str, float]] = {}
    for name in _WAITS:
        for function, value in _by_function(getattr(metrics, name)):
            waits.setdefault(function, {})[name] = value
    return stats, {function: FunctionStats(counters=Counters(**per_function.get(function, {})),
                                           warm_containers=warm.get(function, 0),
                                           waits=_limit_waits(waits.get(function, {})))
                   for function in per_function.keys() | warm.keys() | waits.keys()}


def _limit_waits(values: Mapping[str, float]) -> LimitWaits:
    """The LimitWaits of the counters in *values* (named as its fields): the waits whole, their seconds as counted."""
    return LimitWaits(rate_limit_waits=int(values.get("rate_limit_waits", 0)),
                      rate_limit_wait_seconds=values.get("rate_limit_wait_seconds", 0.0),
                      concurrency_key_waits=int(values.get("concurrency_key_waits", 0)),
                      concurrency_key_wait_seconds=values.get("concurrency_key_wait_seconds", 0.0))


def _value(metric: MetricWrapperBase) -> float:
    """The value of an unlabelled counter or gauge."""
    for family in metric.collect():
        for sample in family.samples:
            if sample.name in (family.name, family.name + "_total"):
                return sample.value
    return 0


def _by_function(metric: MetricWrapperBase) -> Iterator[tuple[str, float]]:
    """(function, value) of a counter or gauge labelled by function."""
    for family in metric.collect():
        for sample in family.samples:
            if sample.name in (family.name, family.name + "_total"):
                yield sample.labels["function"], sample.value


def previous_functions(path: str | os.PathLike[str]) -> set[str]:
    """The function names an earlier run left in the state database (for the startup image GC)."""
    try:
        return StateReader(path).function_names()
    except StateError as error:
        log.debug("No function names from the previous run", extra={"error": str(error)})
        return set()
