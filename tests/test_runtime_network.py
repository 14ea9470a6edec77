"""``network: none`` in a template: the function's containers run without any network, as the
engine itself reports (HostConfig.NetworkMode "none"), and a template edit switches it on the
next invocation. Without the key, containers keep the engine's default network."""

import os
import secrets
import signal
import threading

import pytest

from relay.durations import SECOND
from relay.errors import TemplateError
from relay.functions import load_function
from relay.runtime.cold import ColdExecutor
from relay.runtime.images import ImageBuilder
from relay.runtime.invocation import Invocation
from tests.support.workers import Worker, engine_env, namespaced_relay_command, publish, wait_until, write_function

SOURCE = """
import time

def handler(event):
    with open("/proc/net/dev") as devices:
        names = sorted(line.split(":")[0].strip() for line in devices.readlines()[2:])
    print(f"{event['kind']} n={event['n']} interfaces={','.join(names)}", flush=True)
    time.sleep(float(event.get("linger", 0)))
"""


def template(kind, network=None):
    return (f"runtime: python3.14\n{f'network: {network}' + chr(10) if network else ''}"
            f"events:\n  - handler: app.handler\n    pattern: {{kind: [{kind}]}}\n    timeout: 60s\n")


def test_network_accepts_none_or_nothing(tmp_path):
    for name, network in (("with-none", "none"), ("without", None)):
        directory = write_function(tmp_path, name, template("x", network), {"app.py": SOURCE})
        assert load_function(directory).template.network == network
    directory = write_function(tmp_path, "with-host", template("x", "host"), {"app.py": SOURCE})
    with pytest.raises(TemplateError) as raised:
        load_function(directory)
    assert "network: \"host\" is not supported; use none, or leave network out for the engine's default network" \
        in str(raised.value)


def run_and_inspect(docker_engine, function, image, hostname):
    """Run one invocation of *function*; the engine's inspect of its container while it ran."""
    executor = ColdExecutor(docker_engine, hostname, output=open(os.devnull, "w"))
    invocation = Invocation(function=function.name, handler="app.handler", image=image,
                            payload=b'{"kind": "x", "n": 1, "linger": 3}', timeout=60 * SECOND,
                            network=function.template.network)
    inspected = {}

    def container():
        found = docker_engine.api.containers(filters={"label": f"relay.hostname={hostname}"})
        if found:
            inspected.update(docker_engine.api.inspect_container(found[0]["Id"]))
        return bool(found)

    runner = threading.Thread(target=lambda: inspected.setdefault("outcome", executor.run(invocation)))
    runner.start()
    wait_until(container, timeout=60, what="the handler's container")
    runner.join(90)
    assert inspected["outcome"].ok, inspected["outcome"]
    return inspected


def test_network_none_reaches_the_container(docker_engine, tmp_path, created):
    suffix = secrets.token_hex(3)
    builder = ImageBuilder(docker_engine)
    closed = load_function(write_function(tmp_path, f"net-none-{suffix}", template("x", "none"), {"app.py": SOURCE}))
    usual = load_function(write_function(tmp_path, f"net-default-{suffix}", template("x"), {"app.py": SOURCE}))
    created.extend([closed.image, usual.image])
    closed_inspect = run_and_inspect(docker_engine, closed, builder.prepare(closed), f"net-none-{suffix}")
    usual_inspect = run_and_inspect(docker_engine, usual, builder.prepare(usual), f"net-default-{suffix}")
    assert closed_inspect["HostConfig"]["NetworkMode"] == "none"
    assert usual_inspect["HostConfig"]["NetworkMode"] != "none"
    for inspected in (closed_inspect, usual_inspect):  # the rest of the hardening is the same
        assert inspected["HostConfig"]["ReadonlyRootfs"] and inspected["HostConfig"]["CapDrop"] == ["ALL"]


def test_a_template_edit_of_network_takes_effect_on_hot_reload(redis_server, redis_client, docker_engine,
                                                                tmp_path, created):
    suffix = secrets.token_hex(3)
    name, kind = f"net-reload-{suffix}", f"net-reload-{suffix}"
    functions, state = tmp_path / "functions", tmp_path / "state"
    state.mkdir()
    directory = write_function(functions, name, template(kind), {"app.py": SOURCE})
    relay = Worker(namespaced_relay_command(functions, state, f"net-{suffix}"), engine_env(redis_server),
                   tmp_path, "relay")
    modes = []

    def running_container():
        found = docker_engine.api.containers(filters={"label": f"relay.function={name}"})
        if found:
            modes.append(docker_engine.api.inspect_container(found[0]["Id"])["HostConfig"]["NetworkMode"])
        return bool(found)

    try:
        relay.wait_for('msg="Relay started"', timeout=300)
        publish(redis_client, {"kind": kind, "n": 1, "linger": 3})
        wait_until(running_container, timeout=60, what="the first handler's container")
        relay.wait_for(f"{kind} n=1 interfaces=", where="stdout", timeout=60)

        (directory / "template.yaml").write_text(template(kind, "none"))
        relay.wait_for(f'msg="Function updated" function={name} ', timeout=180)
        publish(redis_client, {"kind": kind, "n": 2, "linger": 3})
        wait_until(lambda: running_container() and modes[-1] == "none", timeout=60, what="a container without network")
        relay.wait_for(f"{kind} n=2 interfaces=lo", where="stdout", timeout=60)
        assert relay.stop(signal.SIGTERM) == 0
    finally:
        relay.kill()
        created.extend(tag for image in docker_engine.api.images(name=f"relay-fn-{name}")
                     for tag in image.get("RepoTags") or ())
    assert modes[0] != "none" and modes[-1] == "none"
