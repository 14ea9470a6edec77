"""``relay replay`` against a real ``relay start``, real Redis and real containers.

Two functions match every order; a replay of the range for one of them
runs that one only, once per entry, with RELAY_IDEMPOTENCY_KEYs the first
runs did not have; once that function is removed from /functions, a replay
made for it (from a directory that still has it) is dead-lettered unrun,
with a reason saying so.
"""

import json
import re
import shutil
import subprocess
import sys

from relay.stream.settle import dlq_stream
from tests.support.relay_process import ROOT
from tests.support.workers import (
    Worker,
    engine_env,
    namespaced_relay_command,
    pending,
    publish,
    wait_until,
    write_function,
)

HANDLERS = """
import os


def handle(event):
    print(f"{os.environ['RELAY_FUNCTION']} ran {event['n']} key {os.environ['RELAY_IDEMPOTENCY_KEY']}", flush=True)
"""
TEMPLATE = """
runtime: python3.14
events:
  - handler: app.handle
    pattern: {kind: [order]}
"""


def runs(worker):
    return re.findall(r"(\w+) ran (\d+) key (\w+)", worker.stdout)


def test_a_replay_runs_only_the_named_function_and_one_for_a_removed_function_is_dead_lettered(
        redis_server, redis_client, docker_engine, workers, tmp_path):
    functions = tmp_path / "functions"
    for name in ("orders", "audit"):
        write_function(functions, name, TEMPLATE, {"app.py": HANDLERS})
    kept = tmp_path / "kept"
    shutil.copytree(functions, kept)
    (tmp_path / "state").mkdir()
    env = engine_env(redis_server)
    relay = Worker(namespaced_relay_command(functions, tmp_path / "state", "relay-e2e-replay"), env, tmp_path,
                   "relay")
    workers.append(relay)
    relay.wait_for('msg="Relay started"', timeout=300)
    originals = [publish(redis_client, {"kind": "order", "n": n}) for n in range(3)]
    wait_until(lambda: len(runs(relay)) == 6 and pending(redis_client) == 0, timeout=120, what="the first runs")
    first_keys = {key for _, _, key in runs(relay)}

    def replay(directory):
        return subprocess.run([sys.executable, "-m", "relay", "replay", "--since=10m", "--function=orders", "--yes",
                               f"--dir={directory}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    done = replay(functions)
    assert done.returncode == 0, done.stderr
    assert "3 entries to add: 3 for orders" in done.stdout
    copied = [(fields[b"replay_of"].decode(), fields[b"replay_for"]) for _, fields in
              redis_client.xrange("events", f"({originals[-1]}", "+")]
    assert copied == [(original, b"orders") for original in originals]
    wait_until(lambda: len(runs(relay)) == 9 and pending(redis_client) == 0, timeout=120, what="the replayed runs")
    replayed = runs(relay)[6:]
    assert sorted((function, n) for function, n, _ in replayed) == [("orders", "0"), ("orders", "1"), ("orders", "2")]
    assert len({key for _, _, key in replayed} | first_keys) == 9          # new keys, each its own

    shutil.rmtree(functions / "orders")
    relay.wait_for('msg="Function removed" function=orders', timeout=120)
    again = replay(kept)                  # the operator's copy still has it
    assert again.returncode == 0, again.stderr
    assert "3 entries to add" in again.stdout      # the copies of the first replay are not copied again
    wait_until(lambda: redis_client.xlen(dlq_stream("events")) == 3 and pending(redis_client) == 0, timeout=60,
               what="the replays for the removed function to be dead-lettered")
    letters = [fields for _, fields in redis_client.xrange(dlq_stream("events"))]
    assert {fields[b"reason"] for fields in letters} == {b"replayed for function 'orders', which is not loaded"}
    assert {fields[b"attempts"] for fields in letters} == {b"0"}
    assert sorted(json.loads(fields[b"event"])["n"] for fields in letters) == [0, 1, 2]
    assert len(runs(relay)) == 9          # nothing ran for them
    assert relay.stop() == 0
