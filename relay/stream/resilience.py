"""Riding out a Redis outage: capped backoff, one WARN per outage, one INFO on recovery."""

import logging

from gevent.event import Event

log = logging.getLogger("relay.stream")

FIRST_DELAY = 0.5
MAX_DELAY = 30.0


class Outage:
    def __init__(self, loop_name: str, stopping: Event) -> None:
        self.loop_name = loop_name
        self.stopping = stopping
        self.delay = 0.0

    def failed(self, error: Exception) -> None:
        """Record a failed Redis call and wait before the next try (returns early on stop)."""
        if not self.delay:
            log.warning("Redis unreachable; retrying with backoff", extra={"loop": self.loop_name, "error": str(error)})
            self.delay = FIRST_DELAY
        else:
            log.debug("Redis still unreachable", extra={"loop": self.loop_name, "error": str(error)})
            self.delay = min(self.delay * 2, MAX_DELAY)
        self.stopping.wait(self.delay)

    def succeeded(self) -> None:
        if self.delay:
            log.info("Redis reachable again", extra={"loop": self.loop_name})
            self.delay = 0.0
