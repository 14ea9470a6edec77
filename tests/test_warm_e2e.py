"""Warm functions end to end: a Relay process (real redis-server, Docker builds
and containers) serving warm Python and Node functions, bounding them by
warm.containers, swapping versions mid-burst, draining on SIGTERM, a
restart sweeping a killed worker's warm containers, and a failing handler
that echoes the protocol's end markers from its event still failing."""

import json
import re
import signal
import threading
import time

import pytest

from relay.stream.keys import dlq_stream
from tests.support.hot_reload import remove_images
from tests.support.relay_process import base_env
from tests.support.runtime import containers_of, remove_containers
from tests.support.workers import (
    Worker,
    engine_env,
    harness_command,
    pending,
    wait_until,
    with_private_paths,
    write_function,
)
from tests.support.zipapps import find_python

PYTHON = """
import os, socket, time

def handler(event):
    print(f"{event['tag']} {os.environ['VERSION']} n={event['n']} host={socket.gethostname()} start", flush=True)
    time.sleep(event.get("sleep", 0))
    print(f"{event['tag']} n={event['n']} end", flush=True)
"""
NODE = """
import { hostname } from "node:os";

export async function handler(event) {
  console.log(`${event.tag} ${process.env.VERSION} n=${event.n} host=${hostname()} start`);
  await new Promise((resolve) => setTimeout(resolve, (event.sleep ?? 0) * 1000));
  console.log(`${event.tag} n=${event.n} end`);
}
"""


FORGING_PYTHON = """
import socket, sys

def handler(event):
    print(f"{event['tag']} n={event['n']} host={socket.gethostname()} start", flush=True)
    sys.stdout.write(event.get("stdout", ""))
    sys.stderr.write(event.get("stderr", ""))
    if event.get("fail"):
        raise RuntimeError("failing after echoing the event")
"""
FORGING_NODE = """
import { hostname } from "node:os";

export function handler(event) {
  console.log(`${event.tag} n=${event.n} host=${hostname()} start`);
  process.stdout.write(event.stdout ?? "");
  process.stderr.write(event.stderr ?? "");
  if (event.fail) throw new Error("failing after echoing the event");
}
"""


def template(runtime, tag, handler, warm="{containers: 2}", concurrency=2, version="v1", more=""):
    return (f"runtime: {runtime}\nconcurrency: {concurrency}\nwarm: {warm}\nenv:\n  VERSION: {version}\n"
            f"events:\n  - handler: {handler}\n    pattern: {{tag: [{tag}]}}\n    timeout: 20s\n{more}")


def python_function(root, name, **options):
    return write_function(root, name, template("python3.14", name, "app.handler", **options), {"app.py": PYTHON})


def node_function(root, name, **options):
    return write_function(root, name, template("node24", name, "app.handler", **options), {"app.js": NODE})


def publish(client, tag, n, **more):
    return client.xadd("events", {"event": json.dumps({"tag": tag, "n": n, **more})}).decode()


def warm_containers(docker_engine, hostname, image=None):
    return [container for container in containers_of(docker_engine, hostname)
            if container["Labels"].get("relay.warm") == "true"
            and (image is None or container["Labels"].get("relay.image") == image)]


def output_lines(worker, tag, word):
    return [line for line in worker.stdout.splitlines() if f": {tag} " in line and line.endswith(word)]


@pytest.fixture
def relay(redis_server, redis_client, docker_engine, tmp_path, token):
    """start(consumer) runs a harness worker on tmp_path/functions; function names end in -<token>."""
    started, consumers = [], set()

    def start(consumer, **timing):
        timing.setdefault("rescan_interval", 600)
        consumers.add(consumer)
        command = harness_command(tmp_path / "functions", consumer, state_db=tmp_path / "state" / "db.sqlite3",
                                  **timing)
        worker = Worker(command, engine_env(redis_server), tmp_path, f"relay-{len(started)}")
        started.append(worker)
        worker.wait_for('msg="Relay started"', timeout=240)
        return worker

    (tmp_path / "functions").mkdir()
    yield start
    for worker in started:
        worker.kill()
    for consumer in consumers:
        remove_containers(docker_engine, consumer)
    remove_images(docker_engine, token)


def test_warm_python_and_node_functions_serve_events_from_one_container_each(relay, redis_client, docker_engine,
                                                                            tmp_path, token):
    root, consumer = tmp_path / "functions", f"warm-{token}"
    python, node = f"wpy-{token}", f"wnode-{token}"
    python_function(root, python, warm="{containers: 1}")
    node_function(root, node, warm="{containers: 1}")
    worker = relay(consumer)
    ids = {publish(redis_client, tag, n): (tag, n) for n in range(10) for tag in (python, node)}
    wait_until(lambda: len(output_lines(worker, python, "end")) + len(output_lines(worker, node, "end")) == 20,
               timeout=120, what="20 invocations")
    wait_until(lambda: pending(redis_client) == 0, timeout=30, what="every entry acknowledged")
    for tag in (python, node):
        starts = output_lines(worker, tag, "start")
        assert len({re.search(r"host=(\w+)", line).group(1) for line in starts}) == 1, starts
    for line in worker.stdout.splitlines():      # each line carries its own invocation's ids
        message = re.search(r'message "([^"]+)"', line).group(1)
        tag, n = ids[message]
        assert f'function "{tag}" handler "app.handler"' in line and f" n={n} " in line + " "
    assert len(warm_containers(docker_engine, consumer)) == 2
    assert worker.stderr.count('msg="Handler executed"') == 20


def test_a_warm_function_runs_no_more_invocations_at_once_than_its_containers(relay, redis_client, tmp_path,
                                                                             docker_engine, token):
    root, consumer, name = tmp_path / "functions", f"warm-{token}", f"wone-{token}"
    python_function(root, name, warm="{containers: 1}", concurrency=4)
    worker = relay(consumer)
    for n in range(4):
        publish(redis_client, name, n, sleep=0.3)
    wait_until(lambda: len(output_lines(worker, name, "end")) == 4, timeout=120, what="four invocations")
    words = [line.rsplit(" ", 1)[1] for line in worker.stdout.splitlines() if f": {name} " in line]
    assert words == ["start", "end"] * 4      # one at a time: every start follows the previous end
    assert len(warm_containers(docker_engine, consumer)) == 1


def test_a_new_version_mid_burst_takes_over_and_the_old_containers_go(relay, redis_client, docker_engine,
                                                                      tmp_path, token):
    root, consumer, name = tmp_path / "functions", f"warm-{token}", f"wswap-{token}"
    python_function(root, name)
    worker = relay(consumer, debounce=0.2)
    first = publish(redis_client, name, 0)
    wait_until(lambda: output_lines(worker, name, "end"), timeout=60, what="the first invocation")
    [old_image] = {container["Labels"]["relay.image"] for container in warm_containers(docker_engine, consumer)}

    stop, published = threading.Event(), [first]

    def burst():
        n = 1
        while not stop.is_set():
            published.append(publish(redis_client, name, n, sleep=0.05))
            n += 1
            time.sleep(0.05)

    producer = threading.Thread(target=burst)
    producer.start()
    try:
        time.sleep(1.0)
        (root / name / "template.yaml").write_text(template("python3.14", name, "app.handler", version="v2"))
        worker.wait_for(f'msg="Function updated" function={name} ', timeout=120)
        wait_until(lambda: any(" v2 " in line for line in output_lines(worker, name, "start")), timeout=60,
                   what="the new version serving")
        time.sleep(1.0)
    finally:
        stop.set()
        producer.join()
    wait_until(lambda: len(output_lines(worker, name, "end")) >= len(published), timeout=120,
               what="every event of the burst handled")
    wait_until(lambda: pending(redis_client) == 0, timeout=30, what="every entry acknowledged")
    versions = [line.split()[-4] for line in output_lines(worker, name, "start")]
    # Entries matched before the swap may still run on v1 (their image is leased), never after the burst.
    assert set(versions) == {"v1", "v2"} and versions[-1] == "v2"
    wait_until(lambda: not warm_containers(docker_engine, consumer, old_image), timeout=30,
               what="the old version's containers removed")
    assert warm_containers(docker_engine, consumer)
    wait_until(lambda: not docker_engine.api.images(name=old_image), timeout=30,
               what="the old version's image removed once no container uses it")


def test_sigterm_lets_a_warm_invocation_finish_then_removes_every_warm_container(relay, redis_client, tmp_path,
                                                                                  docker_engine, token):
    root, consumer, name = tmp_path / "functions", f"warm-{token}", f"wdrain-{token}"
    node_function(root, name)
    worker = relay(consumer)
    publish(redis_client, name, 1, sleep=2)
    wait_until(lambda: output_lines(worker, name, "start"), timeout=60, what="the invocation to start")
    assert worker.stop(signal.SIGTERM, timeout=60) == 0
    assert output_lines(worker, name, "end") and 'msg="Handler executed"' in worker.stderr
    assert pending(redis_client) == 0
    assert not warm_containers(docker_engine, consumer)


def test_a_restarted_worker_sweeps_the_warm_containers_a_killed_one_left(relay, redis_client, docker_engine,
                                                                         tmp_path, token):
    root, consumer, name = tmp_path / "functions", f"warm-{token}", f"wsweep-{token}"
    python_function(root, name)
    worker = relay(consumer)
    publish(redis_client, name, 1)
    wait_until(lambda: output_lines(worker, name, "end"), timeout=60, what="the invocation")
    left = warm_containers(docker_engine, consumer)
    assert len(left) == 1
    worker.kill()
    assert warm_containers(docker_engine, consumer) == left        # SIGKILL: nothing cleaned up
    relay(consumer)
    assert not any(container["Id"] == left[0]["Id"] for container in containers_of(docker_engine, consumer))


def test_prestart_starts_the_containers_when_the_function_is_ready(relay, docker_engine, tmp_path, token):
    root, consumer, name = tmp_path / "functions", f"warm-{token}", f"wpre-{token}"
    node_function(root, name, warm="{containers: 2, prestart: true}")
    relay(consumer)
    wait_until(lambda: len(warm_containers(docker_engine, consumer)) == 2, timeout=60,
               what="two prestarted containers")


def test_relay_pyz_serves_a_warm_function_and_removes_its_containers_on_stop(pyz, redis_server, redis_client,
                                                                             docker_engine, tmp_path, token):
    name = f"wpyz-{token}"
    python_function(tmp_path / "functions", name, warm="{containers: 1}")
    env = base_env(REDIS_URI=redis_server.address, REDIS_STREAM="events", REDIS_GROUP="relay",
                   RELAY_PYZ_CACHE=str(tmp_path / "cache"), LOG_LEVEL="debug")
    command = with_private_paths([find_python("3.11"), str(pyz), "start"], tmp_path / "functions", tmp_path / "state")
    worker = Worker(command, env, tmp_path, "relay-pyz")
    mine = {"label": [f"relay.function={name}", "relay.warm=true"]}
    try:
        worker.wait_for('msg="Relay started"', timeout=240)
        for n in range(5):
            publish(redis_client, name, n)
        worker.wait_for('msg="Handler executed"', count=5, timeout=120)
        assert len(output_lines(worker, name, "end")) == 5
        assert len({re.search(r"host=(\w+)", line).group(1) for line in output_lines(worker, name, "start")}) == 1
        assert 'msg="Warm container started"' in worker.stderr
        assert len(docker_engine.api.containers(filters=mine)) == 1
        assert worker.stop(signal.SIGTERM) == 0
    finally:
        worker.kill()
        remove_images(docker_engine, token)
    assert not docker_engine.api.containers(all=True, filters=mine)


def test_a_failing_handler_that_echoes_end_markers_from_its_event_still_fails(relay, redis_client, docker_engine,
                                                                              tmp_path, token):
    """The markers a first request's bootstrap would write, forged in the event and printed before the
    handler raises: every attempt fails, is retried and dead-lettered, and the forged text is output."""
    root, consumer = tmp_path / "functions", f"warm-{token}"
    python, node = f"wfpy-{token}", f"wfnode-{token}"
    rule = "    retries: 2\n    retry_backoff: [100ms]\n"
    write_function(root, python, template("python3.14", python, "app.handler", warm="{containers: 1}", more=rule),
                   {"app.py": FORGING_PYTHON})
    write_function(root, node, template("node24", node, "app.handler", warm="{containers: 1}", more=rule),
                   {"app.js": FORGING_NODE})
    worker = relay(consumer)
    forged = {"stdout": "\x1e\x1frelay:done 1 ok\n", "stderr": "\x1e\x1frelay:end 1\n", "fail": True}
    failing = {publish(redis_client, tag, 0, **forged): tag for tag in (python, node)}
    wait_until(lambda: len(redis_client.xrange(dlq_stream("events"))) == 2, timeout=120,
               what="both entries dead-lettered")
    letters = {fields[b"original_id"].decode(): fields for _, fields in redis_client.xrange(dlq_stream("events"))}
    assert set(letters) == set(failing)
    for message_id, tag in failing.items():
        assert letters[message_id][b"attempts"] == b"3"
        assert letters[message_id][b"reason"].decode() == f"attempts exhausted for {tag}/app.handler"
        assert worker.stderr.count(f'msg="Handler failed; will retry" function={tag} ') == 2
        lines = [line for line in worker.stdout.split("\n") if f'message "{message_id}"' in line]   # not at "\x1e"
        assert sum(line.endswith(": \x1e\x1frelay:done 1 ok") for line in lines) == 3, lines   # forwarded
        assert sum(line.endswith(": \x1e\x1frelay:end 1") for line in lines) == 3, lines
        assert sum(line.endswith("Error: failing after echoing the event") for line in lines) == 3, lines
    assert 'msg="Handler executed"' not in worker.stderr and "replaced" not in worker.stderr
    for tag in (python, node):                   # the container is not broken: it serves the next event
        publish(redis_client, tag, 1, stdout="\x1e\x1frelay:done 4 ok\n")
    wait_until(lambda: worker.stderr.count('msg="Handler executed"') == 2, timeout=60, what="the next events")
    wait_until(lambda: pending(redis_client) == 0, timeout=30, what="every entry acknowledged")
    for tag in (python, node):
        hosts = {re.search(r"host=(\w+)", line).group(1) for line in output_lines(worker, tag, "start")}
        assert len(output_lines(worker, tag, "start")) == 4 and len(hosts) == 1
    assert len(warm_containers(docker_engine, consumer)) == 2
