"""The producer: adds the fleet's events at a steady rate and keeps at it
through Redis outages, as a careful real producer would.

An XADD whose reply was lost (a timeout, a dropped connection) is sent again;
if the first one did land, the event is in the stream twice. The verdict
counts such producer duplicates separately from Relay's own.

Under Sentinel (ReplicatedProducer) Redis's acknowledgment is not enough: a
write the primary acknowledged but had not yet sent to its replica is gone
when the replica is promoted. An event counts as stored only once a replica
has it too (WAIT), as a producer that must not lose events does it.
"""

import json
import threading
import time

import redis
from redis.sentinel import MasterNotFoundError

from tests.fleet.functions import MALFORMED, make_event

RETRY_PAUSE = 0.2
WAIT_REPLICAS, WAIT_MS = 1, 1000


class Producer:
    def __init__(self, client, run_id, rng, stream="events"):
        self.client = client
        self.run_id = run_id
        self.rng = rng
        self.stream = stream
        self.events = {}            # seq → event, once Redis acknowledged its XADD (under Sentinel: a replica too)
        self.retried_adds = 0
        self.unconfirmed_adds = 0   # of those, after the primary stored the add but WAIT answered 0
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


class ReplicatedProducer(Producer):
    """Adds through a client that follows the primary (redis-py's Sentinel client) and
    counts an add as done once WAIT says a replica has it; else adds again."""

    RETRIED = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, redis.ReadOnlyError,
               MasterNotFoundError)

    def add(self, fields):
        with self._lock:
            while True:
                pipeline = self.client.pipeline(transaction=False)   # one connection: WAIT covers the XADD
                pipeline.xadd(self.stream, fields)
                pipeline.wait(WAIT_REPLICAS, WAIT_MS)
                try:
                    message_id, replicas = pipeline.execute()
                except self.RETRIED:
                    self.retried_adds += 1
                    time.sleep(RETRY_PAUSE)
                    continue
                if replicas >= WAIT_REPLICAS:
                    return message_id.decode()
                self.retried_adds += 1
                self.unconfirmed_adds += 1
