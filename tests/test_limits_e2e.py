"""rate_limit and concurrency_key across a fleet: three Relay processes, a real redis-server,
real (warm) containers. The handlers print their own start and end times; the achieved rate
and the invocations per key at once are measured from those.

    .venv/bin/python -m pytest tests/test_limits_e2e.py -s

prints the figures (docs/delivery.md quotes them).
"""

import json
import re
import time
from itertools import pairwise

import pytest

from tests.support.hot_reload import remove_images
from tests.support.runtime import containers_of, remove_containers
from tests.support.workers import Worker, engine_env, harness_command, pending, wait_until, write_function

RATE, BURST = 10, 10          # rate_limit: 10/s, so one second's worth starts at once
RATED_EVENTS = 40
KEYS, PER_KEY, SLEEP = 4, 4, 0.3
JITTER = 2                     # starts a window may gain from the handlers' own start latency

HANDLER = """
import time

def handler(event):
    print(f"{event['tag']} {event['new_image']['id']} {event['n']} start {time.time():.6f}", flush=True)
    time.sleep(event['sleep'])
    print(f"{event['tag']} {event['new_image']['id']} {event['n']} end {time.time():.6f}", flush=True)
"""


def limited_function(root, name, limit):
    template = (f"runtime: python3.14\nconcurrency: 2\nwarm: {{containers: 2, prestart: true}}\n{limit}\n"
                f"events:\n  - handler: app.handler\n    pattern: {{tag: [{name}]}}\n    timeout: 20s\n")
    write_function(root, name, template, {"app.py": HANDLER})


@pytest.fixture
def fleet(redis_server, docker_engine, tmp_path, token):
    started = []
    yield started
    for worker in started:
        worker.kill()
    for index in range(3):
        remove_containers(docker_engine, f"limits-{index}-{token}")
    remove_images(docker_engine, token)


def warm_running(docker_engine, consumer):
    return sum(1 for container in containers_of(docker_engine, consumer)
               if container["Labels"].get("relay.warm") == "true" and container["State"] == "running")


def times(workers, tag, word):
    """{(key, n): seconds} of the *word* ("start" or "end") lines of *tag* in every worker's output."""
    found = {}
    for worker in workers:
        for match in re.finditer(rf": {re.escape(tag)} (\S+) (\d+) {word} ([\d.]+)$", worker.stdout, re.MULTILINE):
            assert (match[1], match[2]) not in found, f"{tag} {match[1]} {match[2]} ran twice"
            found[(match[1], match[2])] = float(match[3])
    return found


def most_in_a_window(moments, seconds):
    moments = sorted(moments)
    return max(sum(1 for other in moments[index:] if other - moment <= seconds)
               for index, moment in enumerate(moments))


def test_three_workers_share_one_rate_and_never_run_one_key_twice_at_once(redis_server, redis_client, fleet,
                                                                          docker_engine, tmp_path, token):
    root = tmp_path / "functions"
    rated, keyed = f"rated-{token}", f"keyed-{token}"
    limited_function(root, rated, f"rate_limit: {RATE}/s")
    limited_function(root, keyed, "concurrency_key: new_image.id")
    env = engine_env(redis_server)
    for index in range(3):
        consumer = f"limits-{index}-{token}"
        # an entry idle past the reclaimer's min idle time is taken over while it waits: keep
        # that time above the slot wait, as in production (60 s against 15 s)
        command = harness_command(root, consumer, reclaim=1, idle=30, state_db=tmp_path / consumer / "db.sqlite3",
                                  rescan_interval=600)
        fleet.append(Worker(command, env, tmp_path, consumer))
    for worker in fleet:
        worker.wait_for('msg="Relay started"', timeout=300)
    # prestarted warm containers: measure the limits, not the first containers' start-up
    wait_until(lambda: all(warm_running(docker_engine, f"limits-{index}-{token}") == 4 for index in range(3)),
               timeout=120, what="every worker's warm containers")
    time.sleep(2)

    events = [{"tag": rated, "new_image": {"id": "r"}, "n": n, "sleep": 0} for n in range(RATED_EVENTS)]
    events += [{"tag": keyed, "new_image": {"id": f"k{key}"}, "n": n, "sleep": SLEEP}
               for n in range(PER_KEY) for key in range(KEYS)]
    pipe = redis_client.pipeline()
    for event in events:
        pipe.xadd("events", {"event": json.dumps(event)})
    pipe.execute()
    wait_until(lambda: len(times(fleet, rated, "end")) == RATED_EVENTS
               and len(times(fleet, keyed, "end")) == KEYS * PER_KEY, timeout=120, what="every invocation")
    wait_until(lambda: pending(redis_client) == 0, timeout=30, what="every entry acknowledged")
    assert redis_client.xlen("relay:events:dlq") == 0

    starts = sorted(times(fleet, rated, "start").values())
    windows = {seconds: most_in_a_window(starts, seconds) for seconds in (0.5, 1, 2)}
    for seconds, most in windows.items():
        assert most <= RATE * (seconds + 1) + JITTER, (seconds, most)       # 3 × 10/s would start them all at once
    span = starts[-1] - starts[0]
    assert span >= (RATED_EVENTS - BURST - JITTER) / RATE

    started, ended = times(fleet, keyed, "start"), times(fleet, keyed, "end")
    per_key, at_once = {}, []
    for (key, n), start in started.items():
        per_key.setdefault(key, []).append((start, ended[(key, n)]))
        at_once.append(sum(1 for other in started if started[other] <= start < ended[other]))
    for runs in per_key.values():
        runs.sort()
        assert all(end <= next_start for (_start, end), (next_start, _end) in pairwise(runs))   # one at a time
    assert max(at_once) >= 2                                                # other keys meanwhile
    workers_used = sum(1 for worker in fleet if f": {rated} " in worker.stdout)
    print(f"\nrate_limit {RATE}/s on 3 workers ({workers_used} ran some): {RATED_EVENTS} starts over {span:.2f} s, "
          f"{(RATED_EVENTS - BURST) / span:.1f}/s after the first second's {BURST}; most starts in any "
          + ", ".join(f"{seconds} s: {most}" for seconds, most in windows.items())
          + f"\nconcurrency_key: {KEYS} keys x {PER_KEY} events of {SLEEP} s: most at once per key 1, "
          f"across keys {max(at_once)}")
    for worker in fleet:
        assert worker.stop() == 0
