"""The engine's parts put together, once: the supervisor, the tests and bench/ all build it here.

The caller brings what differs between them (the executor, the secrets
behind ``environment``, the image leases, the clock and the intervals); the
invocation store, the Settler, the slots, the buffer, the dispatcher and the
consumer are always joined the same way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from relay import seams
from relay.config import DEFAULT_MAX_EVENT_BYTES
from relay.stream.consumer import MIN_IDLE, READ_BLOCK_MS, RECLAIM_INTERVAL, Buffer, Consumer
from relay.stream.dispatcher import SLOT_WAIT, Dispatcher
from relay.stream.invocations import InvocationStore
from relay.stream.keys import StreamAddress
from relay.stream.settle import Settler
from relay.stream.slots import Slots


@dataclass(frozen=True)
class Engine:
    """The stream engine of one worker: the consumer's two loops feed the dispatcher."""

    address: StreamAddress
    store: InvocationStore
    settler: Settler
    slots: Slots
    buffer: Buffer
    dispatcher: Dispatcher
    consumer: Consumer


def build_engine(client: redis.Redis, address: StreamAddress, *, catalog: seams.RuleSource,
                 executor: seams.Executor, environment: seams.Environment, leases: seams.Leases, metrics: Any,
                 max_concurrency: int, max_buffered_events: int, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
                 clock: seams.Clock = time.time_ns, slot_wait: float = SLOT_WAIT, block_ms: int = READ_BLOCK_MS,
                 reclaim_interval: float = RECLAIM_INTERVAL, min_idle: float = MIN_IDLE) -> Engine:
    """The engine for *address*; the consumer group must exist (relay.stream.group.ensure_group)."""
    store = InvocationStore(client, address)
    settler = Settler(client, address)
    slots = Slots(max_concurrency, on_wait=metrics.concurrency_waits.inc)
    buffer = Buffer(max_buffered_events, metrics.buffered_events)
    dispatcher = Dispatcher(store=store, settler=settler, executor=executor, slots=slots, metrics=metrics,
                            environment=environment, leases=leases, clock=clock, slot_wait=slot_wait)
    consumer = Consumer(client=client, address=address, catalog=catalog, dispatcher=dispatcher, settler=settler,
                        buffer=buffer, metrics=metrics, block_ms=block_ms, reclaim_interval=reclaim_interval,
                        min_idle=min_idle, max_event_bytes=max_event_bytes)
    return Engine(address, store, settler, slots, buffer, dispatcher, consumer)
