"""Secrets end to end: real Relay processes, a real redis-server, real containers.

The secret store is a temporary directory mounted at /var/lib/relay in a
private mount namespace, and secrets are set with ``relay secret set``
exactly as an operator would.
"""

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import urllib.request

import pytest

from relay.durations import SECOND
from relay.runtime.cold import ColdExecutor
from relay.runtime.invocation import Invocation
from relay.stream import markers
from tests.support.commands import relay_secret, secret_command
from tests.support.redis_server import free_port
from tests.support.relay_process import ROOT, base_env
from tests.support.workers import (
    Worker,
    engine_env,
    harness_command,
    namespaced_relay_command,
    publish,
    wait_until,
    write_function,
)

SHOW_PYTHON = """
import os

def handler(event):
    print(f"python token={os.environ['API_TOKEN']} greeting={os.environ['GREETING']!r} "
          f"flag={os.environ['FLAG']!r}", flush=True)
"""
SHOW_NODE = """
export async function handler(event) {
  console.log(`node token=${process.env.API_TOKEN} greeting=${process.env.GREETING}`);
}
"""
LATE = """
import os

def handler(event):
    print(f"late={os.environ['LATE_TOKEN']}", flush=True)
"""


def template(runtime, kind, handler="app.handler", extra="", timeout="20s", retries=4):
    return f"""
runtime: {runtime}
events:
  - handler: {handler}
    pattern: {{kind: [{kind}]}}
    timeout: {timeout}
    retries: {retries}
{extra}"""


def namespaced_harness(functions_dir, state_dir, consumer):
    """The test harness (1s reclaim interval, 2s idle) with *state_dir* at /var/lib/relay."""
    os.makedirs("/var/lib/relay", exist_ok=True)
    script = 'mount --bind "$1" /var/lib/relay; shift; exec "$@"'
    return [shutil.which("unshare"), "--mount", "--propagation", "private", "--", "sh", "-ec", script,
            "relay-secrets-e2e", str(state_dir), *harness_command(functions_dir, consumer)]


def function_tags(docker_engine, name):
    return sorted(tag for image in docker_engine.images.list(name=f"relay-fn-{name}") for tag in image.tags)


def set_secret(state, name, value):
    result = relay_secret(state, "set", name, input=value.encode())
    assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), result.stderr
    return result


@pytest.fixture
def state(tmp_path):
    directory = tmp_path / "state"
    directory.mkdir()
    return directory


def test_rotation_reaches_the_very_next_invocation_and_a_missing_secret_is_retried(
        redis_server, redis_client, docker_engine, workers, tmp_path, state):
    suffix = secrets.token_hex(3)
    show_py, show_node, late = f"show-py-{suffix}", f"show-node-{suffix}", f"late-{suffix}"
    env = "env:\n  GREETING: hello ${USER}\n  FLAG: \"\"\nsecrets:\n  API_TOKEN: api-token\n"
    functions = tmp_path / "functions"
    write_function(functions, show_py, template("python3.14", "show", extra=env), {"app.py": SHOW_PYTHON})
    write_function(functions, show_node, template("node24", "show", "handler.handler", extra=env),
                   {"handler.js": SHOW_NODE})
    write_function(functions, late, template("python3.14", "late", extra="secrets:\n  LATE_TOKEN: arrives-later\n"),
                   {"app.py": LATE})
    set_secret(state, "api-token", "first-token")

    worker = Worker(namespaced_harness(functions, state, f"secrets-{suffix}"), engine_env(redis_server),
                    tmp_path, "worker")
    workers.append(worker)
    worker.wait_for('msg="Relay started"', timeout=300)

    publish(redis_client, {"kind": "show"})
    worker.wait_for("python token=first-token greeting='hello ${USER}' flag=''", where="stdout")
    worker.wait_for("node token=first-token greeting=hello ${USER}", where="stdout")
    builds = worker.stderr.count("Building function image")
    tags = {name: function_tags(docker_engine, name) for name in (show_py, show_node)}

    set_secret(state, "api-token", "second-token")
    publish(redis_client, {"kind": "show"})
    worker.wait_for("python token=second-token", where="stdout")
    worker.wait_for("node token=second-token", where="stdout")
    assert worker.stdout.count("token=first-token") == 2  # no invocation ran twice or late
    assert worker.stderr.count("Building function image") == builds  # no rebuild
    assert {name: function_tags(docker_engine, name) for name in tags} == tags  # same fingerprint, same image
    assert worker.process.poll() is None  # no restart

    # A reference with nothing behind it fails that invocation, names the reference, and is retried.
    message_id = publish(redis_client, {"kind": "late", "event_id": "evt_late"})
    worker.wait_for('msg="Handler failed; will retry"')
    (failed,) = [line for line in worker.stderr.splitlines() if 'msg="Handler failed; will retry"' in line]
    assert f"function={late} " in failed and "message_id=" + message_id in failed
    assert "error=\"cannot set LATE_TOKEN: secret 'arrives-later' is not in the secret store\"" in failed
    marker = markers.parse(redis_client.hget(markers.state_key("events", "relay", message_id),
                                             f"{late}/app.handler"))
    assert (marker.kind, marker.attempts) == ("next_attempt_at", 1)

    set_secret(state, "arrives-later", "now-here")
    worker.wait_for("late=now-here", where="stdout", timeout=150)  # the retry, after its 1m backoff
    wait_until(lambda: redis_client.xpending("events", "relay")["pending"] == 0, what="every entry acked")
    assert worker.stop() == 0


# --- the leak test ------------------------------------------------------------------------

CANARY_OK = """
import os

def handler(event):
    value = os.environ["CANARY"]
    print(f"the canary is {len(value)} characters long", flush=True)
"""
CANARY_FAILS = """
import os

def handler(event):
    assert os.environ["CANARY"]
    print("about to fail", flush=True)
    raise RuntimeError("failing on purpose with the canary in my environment")
"""
CANARY_SLOW = """
import os
import time

def handler(event):
    assert os.environ["CANARY"]
    print("sleeping past my timeout", flush=True)
    time.sleep(60)
"""
CANARY_NODE_FAILS = """
export async function handler(event) {
  if (!process.env.CANARY) throw new Error("no canary");
  throw new Error("node fails on purpose");
}
"""


def redis_dump(client):
    """Every value Relay left in Redis, as bytes."""
    chunks = []
    for key in client.scan_iter():
        kind = client.type(key).decode()
        if kind == "stream":
            chunks += [b"".join(k + v for k, v in fields.items()) for _id, fields in client.xrange(key)]
        elif kind == "hash":
            chunks += [k + v for k, v in client.hgetall(key).items()]
        elif kind == "string":
            chunks.append(client.get(key))
        else:
            chunks.append(repr((kind, key)).encode())
    return b"\n".join(chunks)


def test_a_secret_value_leaks_nowhere(redis_server, redis_client, docker_engine, workers, tmp_path, state):
    canary = secrets.token_hex(20)  # distinctive, and never quoted or escaped by a log formatter
    suffix = secrets.token_hex(3)
    names = {kind: f"canary-{kind}-{suffix}" for kind in ("ok", "fails", "slow", "node")}
    refs = "secrets:\n  CANARY: leak-canary\nenv:\n  NOT_SECRET: plain\n"
    functions = tmp_path / "functions"
    write_function(functions, names["ok"], template("python3.14", "canary-ok", extra=refs), {"app.py": CANARY_OK})
    write_function(functions, names["fails"], template("python3.14", "canary-fails", extra=refs, retries=0),
                   {"app.py": CANARY_FAILS})
    write_function(functions, names["slow"], template("python3.14", "canary-slow", extra=refs, timeout="3s",
                                                      retries=0), {"app.py": CANARY_SLOW})
    write_function(functions, names["node"], template("node24", "canary-node", "handler.handler", extra=refs,
                                                      retries=0), {"handler.js": CANARY_NODE_FAILS})
    cli = set_secret(state, "leak-canary", canary)
    listed = relay_secret(state, "ls")
    assert listed.stdout == "NAME\nleak-canary\n"

    metrics_port = free_port()
    relay = Worker(namespaced_relay_command(functions, state, f"leak-{suffix}"),
                   engine_env(redis_server, LOG_LEVEL="DEBUG", METRICS_ADDR=f"127.0.0.1:{metrics_port}"),
                   tmp_path, "relay")
    workers.append(relay)
    relay.wait_for('msg="Relay started"', timeout=300)
    message_ids = [publish(redis_client, {"kind": f"canary-{kind}", "event_id": f"evt_{kind}"})
                   for kind in ("ok", "fails", "slow", "node")]

    # While the slow handler runs, its container holds the value in its environment, not its labels.
    slow = {}

    def slow_container():
        found = docker_engine.api.containers(filters={"label": f"relay.function={names['slow']}"})
        if found:
            slow.update(docker_engine.api.inspect_container(found[0]["Id"]))
        return bool(found)

    wait_until(slow_container, timeout=120, what="the slow handler's container")
    assert f"CANARY={canary}" in slow["Config"]["Env"]
    assert canary not in json.dumps(slow["Config"]["Labels"])

    relay.wait_for("the canary is 40 characters long", where="stdout")
    relay.wait_for('msg="Handler timed out; its container was killed"', timeout=60)
    relay.wait_for('msg="Entry dead-lettered"', timeout=60, count=3)
    assert relay.stderr.count('msg="Handler failed; attempts exhausted"') == 3  # fails, slow, node
    assert relay.stderr.count('level=DEBUG') > 0

    images = {}  # read while Relay runs: a stopped Relay's images are anyone's to collect
    tags = re.findall(r'msg="Function ready" function=\S+ image=(\S+)', relay.stderr)
    assert len(tags) == 4, relay.stderr[-3000:]
    for tag in tags:
        images[f"history of {tag}"] = subprocess.run(
            ["docker", "image", "history", "--no-trunc", tag], capture_output=True, text=True, check=True,
            timeout=60).stdout
        images[f"inspect of {tag}"] = json.dumps(docker_engine.api.inspect_image(tag))
    metrics = b""
    try:
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
    except OSError:
        pass  # no metrics endpoint in this build yet: nothing to search
    assert relay.stop(signal.SIGTERM) == 0

    inspected = "".join(
        subprocess.run(secret_command(state, *args, program=("-m", "relay")), cwd=ROOT, env=base_env(),
                       capture_output=True, text=True, timeout=60).stdout
        for args in [("function", "ls"), *(("function", "inspect", name) for name in names.values())])
    places = {"relay stdout": relay.stdout, "relay function ls/inspect": inspected, "relay stderr": relay.stderr,
              "relay secret output": cli.stdout + cli.stderr + listed.stdout + listed.stderr,
              "metrics": metrics.decode(errors="replace"),
              "redis": redis_dump(redis_client).decode(errors="replace"), **images}
    for path in state.rglob("*"):  # the state database and anything else Relay keeps, bar the store
        if path.is_file() and state / "secrets" not in path.parents:
            places[str(path.relative_to(state))] = path.read_bytes().decode(errors="replace")
    places["slow container labels"] = json.dumps(slow["Config"]["Labels"])

    assert "relay.function" in places["slow container labels"] and "ENTRYPOINT" in places[f"history of {tags[0]}"]
    assert all(message_id in places["redis"] for message_id in message_ids[1:])  # the DLQ was searched
    leaks = [where for where, text in places.items() if canary in text or canary[:16] in text]
    assert leaks == []


# --- the executor's error paths --------------------------------------------------------------


def test_an_engine_error_that_echoes_the_environment_is_not_repeated(docker_engine, caplog):
    """runc refuses a NUL byte in the environment and quotes the NAME=value entry in its error.
    The store never hands out such a value; the executor must not repeat it either."""
    canary = secrets.token_hex(20)
    hostname = f"secret-echo-{secrets.token_hex(3)}"
    invocation = Invocation(function="echo-probe", handler="app.handler", image="python:3.14-slim",
                            payload=b"{}", timeout=30 * SECOND, env={"CANARY": f"x\0{canary}"})
    with caplog.at_level("DEBUG", logger="relay"):
        outcome = ColdExecutor(docker_engine, hostname).run(invocation)
    assert not outcome.ok and "the container did not start" in outcome.error, outcome.error
    assert canary not in outcome.error and canary not in caplog.text
