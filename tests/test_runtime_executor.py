"""Executing handlers in real containers: Python and Node handlers, failures,
timeouts, output forwarding, hardening, clean-up, and concurrency under gevent."""

import io
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from relay.durations import SECOND
from relay.functions.runtimes import RUNTIMES
from relay.runtime.cold import ColdExecutor
from relay.runtime.containers import MEMORY_BYTES
from relay.runtime.invocation import Invocation, redact
from relay.runtime.output import MAX_LINE_BYTES, TAIL_BYTES, TRUNCATED
from relay.runtime.recipes import dependency_recipe
from tests.support.runtime import (
    RuntimeEvents,
    built_fixtures,
    clean_hostname,
    containers_of,
    remove_images,
    token,
    wait_until,
)

ROOT = Path(__file__).resolve().parent.parent
SECRET = "s3cr3t-value-never-logged"
FIXTURES = ("rt-python", "rt-node-esm", "rt-node-pkg", "rt-node-cjs")


@pytest.fixture(scope="module")
def images(docker_engine, tmp_path_factory):
    """The fixture functions under per-session names, built once: {fixture: (Function, tag)}."""
    with built_fixtures(docker_engine, tmp_path_factory.mktemp("functions"), FIXTURES) as built:
        yield built


@pytest.fixture
def hostname(docker_engine):
    with clean_hostname(docker_engine, "rt-exec") as name:
        yield name


@pytest.fixture
def output():
    return io.StringIO()


@pytest.fixture
def executor(docker_engine, hostname, output):
    return ColdExecutor(docker_engine, hostname, output)


def invoke(executor, images, fixture, handler, event=None, timeout=20 * SECOND, **extra):
    function, tag = images[fixture]
    env = {**function.template.env, "API_TOKEN": SECRET} if "python" in fixture else dict(function.template.env)
    payload = json.dumps(event if event is not None else {"n": 1}).encode()
    return executor.run(Invocation(function=function.name, handler=handler, image=tag, payload=payload,
                                   timeout=timeout, env=env, message_id=extra.get("message_id", "1-0"),
                                   event_id=extra.get("event_id", "evt-1"), event_name="INSERT"))


def lines(output, images, fixture, handler, message_id="1-0", event_id="evt-1"):
    function, _ = images[fixture]
    prefix = f'relay: function "{function.name}" handler "{handler}" message "{message_id}" event "{event_id}": '
    found = output.getvalue().splitlines()
    assert all(line.startswith(prefix) for line in found), found
    return [line[len(prefix):] for line in found]


# --- Python ---

def test_python_sync_handler_gets_the_event_and_env(executor, images, output):
    outcome = invoke(executor, images, "rt-python", "handler.handler", {"n": 1, "user": {"id": "u1"}})
    assert outcome.ok and outcome.exit_code == 0 and not outcome.timed_out and outcome.error is None
    assert 0 < outcome.duration < 20
    assert lines(output, images, "rt-python", "handler.handler") == [
        'sync {"n": 1, "user": {"id": "u1"}}', f"env hello {SECRET} handler.handler"]


def test_python_async_handler(executor, images, output):
    assert invoke(executor, images, "rt-python", "coroutines.handler", {"n": 7}).ok
    assert lines(output, images, "rt-python", "coroutines.handler") == ["async 7"]


def test_python_nested_handler_in_a_namespace_package(executor, images, output):
    assert invoke(executor, images, "rt-python", "pkg.inner.jobs.run").ok
    assert lines(output, images, "rt-python", "pkg.inner.jobs.run") == ["nested pkg.inner.jobs"]


def test_python_failing_handler_exits_one_with_a_traceback(executor, images, output, caplog):
    with caplog.at_level(logging.DEBUG, logger="relay"):
        outcome = invoke(executor, images, "rt-python", "failing.handler")
    function, _ = images["rt-python"]
    assert not outcome.ok and outcome.exit_code == 1 and not outcome.timed_out
    assert outcome.error == f'function "{function.name}" handler "failing.handler": exited with code 1'
    forwarded = lines(output, images, "rt-python", "failing.handler")
    assert "about to fail" in forwarded  # stdout; stdout and stderr are separate pipes, with no order between them
    stderr = [line for line in forwarded if line != "about to fail"]
    assert stderr[0] == "Traceback (most recent call last):"
    assert stderr[-1] == "RuntimeError: handler failed on purpose"
    assert SECRET not in caplog.text and SECRET not in repr(outcome)


def is_container_id(value):
    return isinstance(value, str) and len(value) == 64 and all(digit in "0123456789abcdef" for digit in value)


def test_the_outcome_carries_both_output_tails_the_exit_code_and_the_container(executor, images, output):
    outcome = invoke(executor, images, "rt-python", "failing.handler")
    assert (outcome.ok, outcome.exit_code, outcome.timed_out, outcome.killed, outcome.warm) == (False, 1, False,
                                                                                                False, False)
    assert is_container_id(outcome.container_id)
    assert outcome.stdout_tail == "about to fail"
    stderr = outcome.stderr_tail.split("\n")
    assert stderr[0] == "Traceback (most recent call last):"
    assert stderr[-1] == "RuntimeError: handler failed on purpose"
    assert sorted(outcome.stdout_tail.split("\n") + stderr) == sorted(
        lines(output, images, "rt-python", "failing.handler"))
    assert "about to fail" not in repr(outcome)       # the handler's words may hold secrets: never in the repr


def test_the_tails_are_the_last_4_kib_of_each_stream(executor, images, output):
    outcome = invoke(executor, images, "rt-python", "chatty.many", {"lines": 1000})
    assert outcome.ok and outcome.exit_code == 0
    forwarded = lines(output, images, "rt-python", "chatty.many")
    for stream, tail in (("out", outcome.stdout_tail), ("err", outcome.stderr_tail)):
        assert tail == "\n".join(line for line in forwarded if line.startswith(stream))[-TAIL_BYTES:]
        assert tail.endswith(f"{stream} 00998\n{stream} 00999")
    long = invoke(executor, images, "rt-python", "chatty.handler")                # a 64 KiB line, cut, then one more
    assert long.stdout_tail == ("z" * MAX_LINE_BYTES + TRUNCATED + "\nno newline at the end")[-TAIL_BYTES:]
    assert long.stderr_tail == "to stderr"


def test_a_handler_past_its_memory_limit_is_killed_not_timed_out(executor, images):
    outcome = invoke(executor, images, "rt-python", "failing.memory", {"mib": 2 * MEMORY_BYTES // 2**20})
    assert (outcome.ok, outcome.exit_code, outcome.timed_out, outcome.killed) == (False, 137, False, True)
    assert outcome.stdout_tail == "allocating" and is_container_id(outcome.container_id)


def test_the_exit_code_is_the_handlers(executor, images):
    outcome = invoke(executor, images, "rt-python", "failing.exits", {"code": 42})
    assert not outcome.ok and outcome.exit_code == 42


def test_output_is_forwarded_line_by_line_with_long_lines_cut(executor, images, output):
    assert invoke(executor, images, "rt-python", "chatty.handler").ok
    forwarded = lines(output, images, "rt-python", "chatty.handler")
    assert sorted(forwarded, key=len)[:3] == ["to stderr", "no newline at the end", "first half second half"]
    stdout = [line for line in forwarded if line != "to stderr"]
    assert stdout == ["first half second half", "z" * MAX_LINE_BYTES + TRUNCATED, "no newline at the end"]


def test_a_large_event_reaches_stdin(executor, images, output):
    event = {"blob": "x" * 2_000_000}
    assert invoke(executor, images, "rt-python", "handler.size", event).ok
    assert lines(output, images, "rt-python", "handler.size") == [f"received {len(json.dumps(event))} bytes"]


def test_a_hostile_event_id_neither_forges_nor_drops_output_lines(docker_engine, hostname, images):
    """Relay's stdout is a strict UTF-8 text stream: a lone surrogate written raw would fail the write."""
    raw = io.BytesIO()
    strict = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    event_id = 'evt-1\nrelay: function "forged" handler "x": level=ERROR \ud800 "q" \x1b[31m'
    outcome = invoke(ColdExecutor(docker_engine, hostname, strict), images, "rt-python", "handler.handler",
                     {"n": 1}, event_id=event_id)
    assert outcome.ok
    function, _ = images["rt-python"]
    prefix = (f'relay: function "{function.name}" handler "handler.handler" message "1-0" event '
              '"evt-1\\nrelay: function \\"forged\\" handler \\"x\\": level=ERROR \\ud800 \\"q\\" \\x1b[31m": ')
    found = raw.getvalue().decode("utf-8").split("\n")
    assert found[-1] == ""
    lines = [line.removeprefix(prefix) for line in found[:-1]]
    assert lines == ['sync {"n": 1}', f"env hello {SECRET} handler.handler"]


def test_a_timeout_kills_the_container_and_leaves_nothing(executor, images, output, docker_engine, hostname):
    started = time.monotonic()
    outcome = invoke(executor, images, "rt-python", "slow.handler", {"seconds": 60}, timeout=SECOND)
    assert time.monotonic() - started < 5
    assert outcome.timed_out and not outcome.ok and outcome.exit_code is None and not outcome.killed
    assert outcome.error.endswith('handler "slow.handler": timed out after 1s')
    assert outcome.stdout_tail == "started" and outcome.stderr_tail == "" and is_container_id(outcome.container_id)
    assert lines(output, images, "rt-python", "slow.handler") == ["started"]
    assert wait_until(lambda: not containers_of(docker_engine, hostname), timeout=5)


def test_a_missing_image_is_not_charged_and_is_reported_for_a_rebuild(docker_engine, hostname, output, images):
    function, _ = images["rt-python"]
    events = RuntimeEvents()
    executor = ColdExecutor(docker_engine, hostname, output, observer=events)
    image = f"relay-fn-{function.name}:ffffffffffffffff"
    outcome = executor.run(Invocation(function=function.name, handler="handler.handler", image=image,
                                      payload=b"{}", timeout=5 * SECOND, env={}))
    assert not outcome.ok and outcome.exit_code is None and not outcome.timed_out
    assert f"image {image} does not exist" in outcome.error and outcome.engine_unavailable
    assert (outcome.container_id, outcome.stdout_tail, outcome.stderr_tail) == (None, "", "")
    assert events.missing == [(function.name, image)]


def test_a_start_failure_is_cleaned_up(executor, docker_engine, hostname):
    tag = f"relay-fn-rt-broken-{token()}:0000000000000000"
    context = io.BytesIO()
    import tarfile
    with tarfile.open(fileobj=context, mode="w") as tar:
        dockerfile = b'FROM python:3.14-slim\nENTRYPOINT ["/no/such/program"]\n'
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    context.seek(0)
    list(docker_engine.api.build(fileobj=context, custom_context=True, tag=tag, rm=True, decode=True))
    try:
        outcome = executor.run(Invocation(function="rt-broken", handler="h.h", image=tag, payload=b"{}",
                                          timeout=10 * SECOND, env={}))
        assert not outcome.ok and outcome.exit_code is None
        assert "did not start" in outcome.error
        assert wait_until(lambda: not containers_of(docker_engine, hostname), timeout=5)
    finally:
        remove_images(docker_engine, [tag])


def test_hardening_and_labels_read_back_from_a_running_container(executor, images, output, docker_engine, hostname):
    function, tag = images["rt-python"]
    result = {}
    worker = threading.Thread(target=lambda: result.update(outcome=invoke(
        executor, images, "rt-python", "probe.handler", {"linger": 4}, message_id="1700000000000-7",
        event_id="evt-probe")))
    worker.start()
    try:
        running = wait_until(lambda: [c for c in containers_of(docker_engine, hostname) if c["State"] == "running"],
                             timeout=15)
        assert running, "the probe container never ran"
        info = docker_engine.api.inspect_container(running[0]["Id"])
    finally:
        worker.join(30)
    config, host = info["Config"], info["HostConfig"]
    assert config["User"] == "10001:10001"
    assert host["Memory"] == 128 * 1024 * 1024
    assert host["NanoCpus"] == 1_000_000_000
    assert host["PidsLimit"] == 128
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["ReadonlyRootfs"] is True
    assert host["Tmpfs"] == {"/tmp": "rw,nosuid,nodev,size=64m,mode=1777"}
    assert host["AutoRemove"] is True
    assert host["NetworkMode"] == "default"  # the engine's default network: outbound stays possible
    assert host["LogConfig"]["Type"] == "none"
    assert config["OpenStdin"] and config["StdinOnce"]
    labels = {key: value for key, value in config["Labels"].items() if key.startswith("relay.")
              and not key.startswith("relay.build.")}
    assert labels == {
        "relay.function": function.name, "relay.handler": "probe.handler", "relay.message_id": "1700000000000-7",
        "relay.event_id": "evt-probe", "relay.event_name": "INSERT", "relay.hostname": hostname,
        "relay.image": tag}
    assert "RELAY_HANDLER=probe.handler" in config["Env"] and "GREETING=hello" in config["Env"]
    assert f"API_TOKEN={SECRET}" in config["Env"]  # secrets live only in the container's env
    assert docker_engine.api.inspect_image(tag)["Config"]["User"] == "10001:10001"  # baked into the image
    assert result["outcome"].ok
    forwarded = lines(output, images, "rt-python", "probe.handler", "1700000000000-7", "evt-probe")
    assert forwarded == ["uid=10001 gid=10001 home=/tmp", "CapPrm: 0000000000000000", "CapEff: 0000000000000000",
                         "NoNewPrivs: 1", "write /function/written: Read-only file system", "write /tmp/written: ok"]


def test_the_image_holds_the_source_but_not_the_template(docker_engine, images):
    _, tag = images["rt-python"]
    listing = docker_engine.containers.run(tag, entrypoint=["ls", "-A", "/function", "/opt/relay"], remove=True,
                                           network_disabled=True)
    assert listing.decode().split() == [
        "/function:", "chatty.py", "coroutines.py", "failing.py", "handler.py", "pkg", "probe.py", "slow.py",
        "/opt/relay:", "relay_bootstrap.py"]


# --- Node ---

def test_node_esm_without_package_json(executor, images, output, docker_engine):
    assert invoke(executor, images, "rt-node-esm", "handler.handler", {"n": 3}).ok
    assert lines(output, images, "rt-node-esm", "handler.handler") == ['esm {"n":3} hello handler.handler']
    _, tag = images["rt-node-esm"]
    injected = docker_engine.containers.run(tag, entrypoint=["cat", "/function/package.json"], remove=True,
                                            network_disabled=True)
    assert injected == b'{"type":"module"}\n'


@pytest.mark.parametrize("handler, expected", [("lib.greet.handler", "nested 1"), ("legacy.handler", "cjs file 1")])
def test_node_module_lookup_by_file(executor, images, output, handler, expected):
    assert invoke(executor, images, "rt-node-esm", handler).ok
    assert lines(output, images, "rt-node-esm", handler) == [expected]


def test_node_failing_handler_exits_one_with_its_stack(executor, images, output):
    outcome = invoke(executor, images, "rt-node-esm", "failing.handler")
    assert not outcome.ok and outcome.exit_code == 1
    forwarded = lines(output, images, "rt-node-esm", "failing.handler")
    assert "about to fail" in forwarded
    stderr = [line for line in forwarded if line != "about to fail"]
    assert stderr[0] == "Error: handler failed on purpose"
    assert stderr[1].strip().startswith("at ")


def test_node_missing_module_is_reported(executor, images, output):
    outcome = invoke(executor, images, "rt-node-esm", "nothere.handler")
    assert outcome.exit_code == 1
    assert lines(output, images, "rt-node-esm", "nothere.handler") == [
        "relay: no module nothere: none of /function/nothere.js, /function/nothere.mjs, /function/nothere.cjs exists"]


def test_node_esm_with_a_package_json(executor, images, output):
    assert invoke(executor, images, "rt-node-pkg", "handler.handler", {"n": 5}).ok
    assert lines(output, images, "rt-node-pkg", "handler.handler") == ["esm with package.json module 5"]


def test_node_commonjs_package(executor, images, output):
    assert invoke(executor, images, "rt-node-cjs", "handler.handler", {"n": 6}).ok
    assert lines(output, images, "rt-node-cjs", "handler.handler") == ["commonjs object handler.js 6"]


# --- Concurrency and resources ---

def test_threads_run_invocations_in_parallel(executor, images):
    outcomes = []
    started = time.monotonic()
    workers = [threading.Thread(target=lambda: outcomes.append(
        invoke(executor, images, "rt-python", "slow.handler", {"seconds": 1.5}))) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert [outcome.ok for outcome in outcomes] == [True] * 3
    assert time.monotonic() - started < 4.5 - 0.5  # serially it would take at least 4.5 s


def test_no_file_descriptors_leak(executor, images):
    invoke(executor, images, "rt-python", "coroutines.handler")  # warm the connection pool
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(8):
        invoke(executor, images, "rt-python", "coroutines.handler")
    invoke(executor, images, "rt-python", "slow.handler", {"seconds": 30}, timeout=SECOND // 2)
    assert len(os.listdir("/proc/self/fd")) <= before + 2


GEVENT_SCRIPT = r"""
from gevent import monkey
monkey.patch_all()

import io, json, sys, time
import docker
import gevent
from relay.durations import SECOND
from relay.runtime.cold import ColdExecutor
from relay.runtime.invocation import Invocation, redact

function, image, hostname = sys.argv[1:4]
client = docker.from_env()
output = io.StringIO()
executor = ColdExecutor(client, hostname, output)

def invocation(number, seconds, timeout=30 * SECOND):
    return Invocation(function=function, handler="slow.handler", image=image, timeout=timeout, env={},
                      payload=json.dumps({"seconds": seconds}).encode(), message_id=f"{number}-0")

ticks, gaps = [], []
def ticker():
    last = time.monotonic()
    while True:
        gevent.sleep(0.02)
        now = time.monotonic()
        gaps.append(now - last)
        last = now

tick = gevent.spawn(ticker)
started = time.monotonic()
jobs = [gevent.spawn(executor.run, invocation(number, 1.5)) for number in range(4)]
gevent.joinall(jobs, timeout=60)
elapsed = time.monotonic() - started

# Cancelling a running invocation (killing its greenlet) must still remove its container.
cancelled = gevent.spawn(executor.run, invocation(9, 60))
while output.getvalue().count("started") < 5:  # the fifth handler is running
    gevent.sleep(0.05)
cancelled.kill(block=True, timeout=30)
left = client.api.containers(all=True, filters={"label": f"relay.hostname={hostname}"})
tick.kill()
print(json.dumps({
    "elapsed": elapsed, "ok": [job.value.ok for job in jobs], "max_gap": max(gaps),
    "lines": output.getvalue().count("started"), "cancelled_dead": cancelled.dead,
    "left_after_cancel": len(left),
}))
"""


def test_gevent_invocations_overlap_and_the_hub_keeps_running(images, docker_engine, hostname):
    function, tag = images["rt-python"]
    result = subprocess.run([sys.executable, "-c", GEVENT_SCRIPT, function.name, tag, hostname],
                            capture_output=True, text=True, cwd=ROOT, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] == [True] * 4
    assert report["elapsed"] < 4.0  # four 1.5 s handlers one after the other would take 6 s and more
    assert report["max_gap"] < 0.5  # no invocation step blocked the hub for long
    assert report["lines"] == 5
    assert report["cancelled_dead"] and report["left_after_cancel"] == 0
    assert wait_until(lambda: not containers_of(docker_engine, hostname), timeout=10)


@pytest.mark.parametrize("fixture, command", [
    ("rt-node-pkg", ("npm", "install", "--omit=dev")), ("rt-node-cjs", ("npm", "ci", "--omit=dev"))])
def test_node_dependencies_are_installed_in_a_dependency_image(docker_engine, images, fixture, command):
    function, tag = images[fixture]
    recipe = dependency_recipe(function.directory, RUNTIMES["node24"], docker_engine.api.version()["Arch"])
    assert recipe.installer.command == command
    dependency_layers = docker_engine.api.inspect_image(recipe.tag)["RootFS"]["Layers"]
    assert docker_engine.api.inspect_image(tag)["RootFS"]["Layers"][:len(dependency_layers)] == dependency_layers


def test_engine_errors_never_repeat_env_values(executor, images, caplog):
    function, tag = images["rt-python"]
    canary = token() * 4
    env = {"API_TOKEN": f"x\0{canary}", "GREETING": "hello there"}  # the engine refuses NUL and quotes NAME=value
    with caplog.at_level(logging.DEBUG, logger="relay"):
        outcome = executor.run(Invocation(function=function.name, handler="handler.handler", image=tag,
                                          payload=b"{}", timeout=20 * SECOND, env=env))
    assert not outcome.ok and "did not start" in outcome.error
    assert "API_TOKEN=<redacted>" in outcome.error
    assert canary not in outcome.error and canary not in caplog.text


@pytest.mark.parametrize("text, expected", [
    ('refused "TOKEN=abc\\x00defghij": unknown', 'refused "TOKEN=<redacted>": unknown'),
    ("value defghij leaked, TOKEN=abc", "value <redacted> leaked, TOKEN=<redacted>"),
    ("NOTTOKEN=1 stays", "NOTTOKEN=1 stays"),
    ("short ab values stay", "short ab values stay"),
])
def test_redact(text, expected):
    assert redact(text, {"TOKEN": "abc\0defghij", "SHORT": "ab"}) == expected


@pytest.mark.parametrize("base_url", ["unix:///nonexistent/docker.sock", "tcp://127.0.0.1:1"])
def test_an_unreachable_engine_is_flagged_as_not_the_handlers_failure(base_url):
    import docker

    client = docker.DockerClient(base_url=base_url, version="1.41", timeout=2)
    outcome = ColdExecutor(client, "host-x", output=io.StringIO()).run(
        Invocation(function="f", handler="h.handler", image="relay-fn-f:0", payload=b"{}", timeout=5 * SECOND))
    assert (outcome.ok, outcome.engine_unavailable) == (False, True)
    assert "the Docker engine is unreachable" in outcome.error

