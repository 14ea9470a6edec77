"""The producer: adds the fleet's events at a steady rate and keeps at it
through Redis outages, as a careful real producer would.

An XADD whose reply was lost (a timeout, a dropped connection) is sent again;
if the first one did land, the event is in the stream twice. The verdict
counts such producer duplicates separately from Relay's own.
"""

import json
import threading
import time

import redis

from tests.fleet.functions import MALFORMED, make_event

RETRY_PAUSE = 0.2


class Producer:
    def __init__(self, redis_server, run_id, rng, stream="events"):
        self.client = redis_server.client(socket_timeout=5, socket_connect_timeout=2)
        self.run_id = run_id
        self.rng = rng
        self.stream = stream
        self.events = {}            # seq → event, once Redis acknowledged its XADD
        self.retried_adds = 0
        self._lock = threading.Lock()
        self.finished = threading.Event()

    def add(self, fields):
        with self._lock:
            while True:
                try:
                    return self.client.xadd(self.stream, fields).decode()
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                    self.retried_adds += 1
                    time.sleep(RETRY_PAUSE)

    def run(self, count, seconds):
        """Add *count* events spread evenly over *seconds*."""
        start = time.monotonic()
        for seq in range(count):
            event = make_event(self.run_id, seq, self.rng)
            delay = start + seq * seconds / count - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.add({"event": json.dumps(event)})
            self.events[seq] = event
        self.finished.set()

    def malformed_burst(self, repeat=2):
        """Add every kind of malformed entry *repeat* times; how many entries that was."""
        for _ in range(repeat):
            for fields in MALFORMED:
                self.add(fields)
        return repeat * len(MALFORMED)
