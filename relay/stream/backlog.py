"""Backlog gauges, sampled from the consumer group every 15 s (never per event)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol, cast

import redis
from gevent.event import Event

from relay.stream import seams
from relay.stream.keys import StreamAddress

log = logging.getLogger("relay.stream.backlog")

SAMPLE_INTERVAL = 15.0


class BacklogGauges(Protocol):
    """Where the samples go (relay.metrics.prometheus.Metrics)."""

    @property
    def pending_entries(self) -> seams.Gauge: ...

    @property
    def pending_oldest_age(self) -> seams.Gauge: ...


class Backlog:
    def __init__(self, client: redis.Redis, address: StreamAddress, metrics: BacklogGauges,
                 interval: float = SAMPLE_INTERVAL, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.address = address
        self.metrics = metrics
        self.interval = interval
        self.clock = clock
        self.stopping = Event()

    def sample(self) -> tuple[int, float]:
        """The pending entries and the age in seconds of the oldest, as set on the gauges."""
        summary = cast("dict[str, object]", self.client.xpending(self.address.stream, self.address.group))
        pending = cast("int", summary["pending"])
        oldest = cast("bytes | str | None", summary.get("min"))
        age = 0.0
        if pending and oldest:
            oldest = oldest.decode() if isinstance(oldest, bytes) else oldest
            age = max(0.0, self.clock() - int(oldest.split("-")[0]) / 1000)
        self.metrics.pending_entries.set(pending)
        self.metrics.pending_oldest_age.set(age)
        return pending, age

    def loop(self) -> None:
        while True:
            try:
                self.sample()
            except redis.RedisError as error:
                log.debug("Cannot sample the backlog", extra={"error": str(error)})
            if self.stopping.wait(self.interval):
                return

    def stop(self) -> None:
        self.stopping.set()
