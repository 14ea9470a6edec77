"""Processes standing in for workers against one Redis, for tests/test_limits.py.

    python -m tests.support.fleet_limits take PORT KEY COUNT UNIT
        Print "ready", read UNTIL_US from stdin, then ask the GCRA script for
        permits as fast as it allows until the Redis server's clock reaches
        UNTIL_US; print the server times (µs) of the admitted ones as a JSON list.
    python -m tests.support.fleet_limits hold PORT VALUE MARGIN_MS
        Take the lease of concurrency key VALUE of function "keyed" (TTL
        MARGIN_MS, renewed every third of it), print "held" or "busy", then
        keep renewing until killed.
"""

import json
import sys
import time

import gevent
import redis

from relay.durations import MILLISECOND
from relay.functions import parse_template
from relay.functions.template import RateLimit
from relay.stream.keys import StreamAddress
from relay.stream.limits import Blocked, FleetLimits, RateLimiter

KEYED = parse_template("runtime: python3.14\nconcurrency_key: id\n"
                       "events:\n  - handler: app.handler\n    pattern: {kind: [keyed]}\n")
POLL = 0.005   # seconds: a refused caller asks again within this, so the limiter is always saturated


def take(port, key, count, unit):
    limiter = RateLimiter(redis.Redis(port=int(port)))
    rate = RateLimit(count=int(count), unit=unit)
    print("ready", flush=True)
    until = int(sys.stdin.readline())
    admitted = []
    while True:
        permit = limiter.take(key, rate)
        if permit.now >= until:
            break
        if permit.admitted:
            admitted.append(permit.now)
        else:
            time.sleep(min(permit.wait / 1e6, POLL))
    print(json.dumps(admitted), flush=True)


def hold(port, value, margin_ms):
    limits = FleetLimits(redis.Redis(port=int(port)), StreamAddress("events", "relay", "holder"),
                         lease_margin=int(margin_ms) * MILLISECOND)
    passage = limits.enter("keyed", KEYED, {"id": value}, 0)
    print("busy" if isinstance(passage, Blocked) else "held", flush=True)
    gevent.sleep(600)


if __name__ == "__main__":
    {"take": take, "hold": hold}[sys.argv[1]](*sys.argv[2:])
