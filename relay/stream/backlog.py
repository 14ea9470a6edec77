"""Backlog gauges, sampled from the consumer group every 15 s (never per event)."""

import logging
import time

import redis
from gevent.event import Event

from relay.stream.keys import StreamAddress

log = logging.getLogger("relay.stream.backlog")

SAMPLE_INTERVAL = 15.0


class Backlog:
    def __init__(self, client, address: StreamAddress, metrics, interval=SAMPLE_INTERVAL, clock=time.time):
        self.client = client
        self.address = address
        self.metrics = metrics
        self.interval = interval
        self.clock = clock
        self.stopping = Event()

    def sample(self):
        summary = self.client.xpending(self.address.stream, self.address.group)
        pending = summary["pending"]
        oldest = summary.get("min")
        age = 0.0
        if pending and oldest:
            oldest = oldest.decode() if isinstance(oldest, bytes) else oldest
            age = max(0.0, self.clock() - int(oldest.split("-")[0]) / 1000)
        self.metrics.pending_entries.set(pending)
        self.metrics.pending_oldest_age.set(age)
        return pending, age

    def loop(self):
        while True:
            try:
                self.sample()
            except redis.RedisError as error:
                log.debug("Cannot sample the backlog", extra={"error": str(error)})
            if self.stopping.wait(self.interval):
                return

    def stop(self):
        self.stopping.set()
