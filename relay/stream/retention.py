"""Stream retention: XTRIM MINID ~ now-retention, shortly after start and then periodically.

Only runs when REDIS_STREAM_RETENTION is set. The trim is approximate: Redis
drops whole stream nodes, so an old entry sharing a node with newer ones goes
on a later pass. It trims the whole stream, other consumer groups included.
"""

import logging
import time
from collections.abc import Callable

import redis
from gevent.event import Event

from relay.durations import HOUR, MINUTE, SECOND, format_duration

log = logging.getLogger("relay.stream.retention")

FIRST_TRIM_DELAY = 5.0  # seconds after start


def trim_interval(retention: int) -> float:
    """retention / 24, clamped to [1m, 1h], in seconds."""
    return min(max(retention // 24, MINUTE), HOUR) / SECOND


class Retention:
    def __init__(self, client: redis.Redis, stream: str, retention: int,
                 clock: Callable[[], int] = time.time_ns) -> None:
        self.client = client
        self.stream = stream
        self.retention = retention
        self.clock = clock
        self.stopping = Event()

    def cutoff_id(self) -> str:
        return f"{(self.clock() - self.retention) // 1_000_000}-0"

    def trim_once(self) -> int:
        cutoff = self.cutoff_id()
        removed = self.client.xtrim(self.stream, minid=cutoff, approximate=True)
        log.debug("Trimmed stream", extra={"stream": self.stream, "minid": cutoff, "removed": removed})
        return removed

    def loop(self) -> None:
        interval = trim_interval(self.retention)
        log.info("Stream retention on", extra={"stream": self.stream, "retention": format_duration(self.retention),
                                               "interval": format_duration(int(interval * SECOND))})
        delay = FIRST_TRIM_DELAY
        while not self.stopping.wait(delay):
            delay = interval
            try:
                self.trim_once()
            except redis.RedisError as error:
                log.warning("Stream trim failed; retrying next tick",
                            extra={"stream": self.stream, "error": str(error)})

    def stop(self) -> None:
        self.stopping.set()
