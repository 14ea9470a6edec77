"""The engine's parts put together, once: the supervisor, the tests and bench/ all build it here.

The caller brings what differs between them (the executor, the secrets
behind ``environment``, the image pins, the clock and the intervals, any
observer besides Prometheus); the invocation store, the Settler, the slots,
the fleet-wide limits, the buffer, the dispatcher and the consumer are
always joined the same way.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from relay.config import DEFAULT_MAX_EVENT_BYTES
from relay.metrics.prometheus import Metrics, PrometheusObserver
from relay.stream import seams
from relay.stream.admission import SLOT_WAIT, Admission
from relay.stream.consumer import MIN_IDLE, READ_BLOCK_MS, RECLAIM_INTERVAL, Buffer, Consumer
from relay.stream.dispatcher import Dispatcher
from relay.stream.invocations import InvocationStore
from relay.stream.keys import StreamAddress
from relay.stream.limits import FleetLimits
from relay.stream.schedules import Provenance
from relay.stream.settle import Settler
from relay.stream.slots import Slots

if TYPE_CHECKING:
    from relay.runtime.invocation import Outcome
    from relay.stream.limits import Limit
    from relay.stream.verdict import Settlement


@dataclass(frozen=True)
class Engine:
    """The stream engine of one worker: the consumer's two loops feed the dispatcher."""

    address: StreamAddress
    observer: seams.Observer
    store: InvocationStore
    settler: Settler
    slots: Slots
    buffer: Buffer
    dispatcher: Dispatcher
    consumer: Consumer
    limits: seams.Limits


def build_engine(client: redis.Redis, address: StreamAddress, *, catalog: seams.RuleSource,
                 executor: seams.Executor, environment: seams.Environment, pins: seams.Pins,
                 metrics: Metrics, observers: Sequence[seams.Observer] = (), max_concurrency: int,
                 max_buffered_events: int, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
                 clock: seams.Clock = time.time_ns, slot_wait: float = SLOT_WAIT, block_ms: int = READ_BLOCK_MS,
                 reclaim_interval: float = RECLAIM_INTERVAL, min_idle: float = MIN_IDLE,
                 limits: seams.Limits | None = None) -> Engine:
    """The engine for *address*; the consumer group must exist (relay.stream.group.ensure_group).

    Its domain events go to a PrometheusObserver on *metrics*, then to each of *observers*.
    *limits* replaces the fleet-wide limits in Redis (tests only).
    """
    observer = _one_observer([PrometheusObserver(metrics), *observers])
    store = InvocationStore(client, address)
    settler = Settler(client, address, observer)
    slots = Slots(max_concurrency, on_wait=metrics.concurrency_waits.inc)
    buffer = Buffer(max_buffered_events, metrics.buffered_events)
    if limits is None:
        limits = FleetLimits(client, address)
    admission = Admission(slots, limits, observer, slot_wait)
    dispatcher = Dispatcher(stream=address.stream, store=store, settler=settler, executor=executor,
                            admission=admission, observer=observer, environment=environment, pins=pins,
                            provenance=Provenance(client), clock=clock)
    consumer = Consumer(client=client, address=address, catalog=catalog, dispatcher=dispatcher, settler=settler,
                        buffer=buffer, observer=observer, block_ms=block_ms, reclaim_interval=reclaim_interval,
                        min_idle=min_idle, max_event_bytes=max_event_bytes)
    return Engine(address, observer, store, settler, slots, buffer, dispatcher, consumer, limits)


def _one_observer(observers: list[seams.Observer]) -> seams.Observer:
    return observers[0] if len(observers) == 1 else Observers(observers)


class Observers:
    """Several observers as one: each event goes to every one of them, in order."""

    def __init__(self, observers: Sequence[seams.Observer]) -> None:
        self.observers = tuple(observers)

    def received(self, count: int) -> None:
        for observer in self.observers:
            observer.received(count)

    def matched(self, function: str) -> None:
        for observer in self.observers:
            observer.matched(function)

    def invocation_started(self, function: str, handler: str, attempt: int) -> None:
        for observer in self.observers:
            observer.invocation_started(function, handler, attempt)

    def invocation_finished(self, function: str, handler: str, attempt: int, outcome: Outcome | None) -> None:
        for observer in self.observers:
            observer.invocation_finished(function, handler, attempt, outcome)

    def limit_waited(self, function: str, limit: Limit, seconds: float) -> None:
        for observer in self.observers:
            observer.limit_waited(function, limit, seconds)

    def settled(self, settlement: Settlement, count: int) -> None:
        for observer in self.observers:
            observer.settled(settlement, count)

    def expired(self, function: str) -> None:
        for observer in self.observers:
            observer.expired(function)
