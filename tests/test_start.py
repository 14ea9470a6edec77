"""``relay start`` as a real process: fail fast, consumer group, orderly signals."""

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.support.redis_server import free_port
from tests.support.relay_process import ROOT, RelayProcess, base_env, relay_command
from tests.support.workers import wait_until, with_private_paths, write_function

# Every test runs relay start as a process: no fixture says so, hence the mark.
pytestmark = pytest.mark.integration

STREAM, GROUP = "events", "relay"


def start_env(redis_server, **overrides):
    return base_env(**{"REDIS_URI": redis_server.address, "REDIS_STREAM": STREAM, "REDIS_GROUP": GROUP, **overrides})


@pytest.fixture
def isolate(tmp_path):
    """Wrap a command so that Relay sees temporary directories at /functions and /var/lib/relay."""
    return lambda command: with_private_paths(command, tmp_path / "functions", tmp_path / "state")


@pytest.fixture
def relay_process(isolate):
    started = []

    def launch(env, command=None):
        started.append(RelayProcess(env, isolate(command or relay_command("start"))))
        return started[-1]

    yield launch
    for item in started:
        if item.process.poll() is None:
            item.process.kill()
            item.process.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_ends_an_idle_start_with_exit_0(redis_server, redis_client, docker_engine, relay_process, signum):
    relay = relay_process(start_env(redis_server))
    relay.wait_for('msg="Relay started"')
    assert relay.stop(signum) == 0
    assert 'msg="Relay stopping"' in relay.stderr and 'msg="Relay stopped"' in relay.stderr
    assert "Traceback" not in relay.stderr


def test_group_is_created_at_the_start_of_the_stream(redis_server, redis_client, docker_engine, relay_process):
    early = redis_client.xadd(STREAM, {"event": '{"event_name": "INSERT"}'})
    relay = relay_process(start_env(redis_server))
    relay.wait_for('msg="Relay started"')
    deadline = time.monotonic() + 20
    while redis_client.xinfo_groups(STREAM)[0]["last-delivered-id"] != early and time.monotonic() < deadline:
        time.sleep(0.05)
    assert relay.stop() == 0
    (group,) = redis_client.xinfo_groups(STREAM)
    assert group["name"] == GROUP.encode()
    assert group["last-delivered-id"] == early      # the entry published before the first start was delivered
    assert group["pending"] == 0                    # and, matching no function, acknowledged


def test_group_on_a_missing_stream_creates_the_stream(redis_server, redis_client, docker_engine, relay_process):
    relay = relay_process(start_env(redis_server))
    relay.wait_for('msg="Relay started"')
    assert redis_client.type(STREAM) == b"stream"
    assert 'msg="Created consumer group"' in relay.stderr
    assert relay.stop() == 0


def test_an_existing_group_is_kept(redis_server, redis_client, docker_engine, relay_process):
    redis_client.xadd(STREAM, {"event": "{}"})
    redis_client.xgroup_create(STREAM, GROUP, id="$")
    relay = relay_process(start_env(redis_server))
    relay.wait_for('msg="Relay started"')
    assert relay.stop() == 0
    (group,) = redis_client.xinfo_groups(STREAM)
    assert group["last-delivered-id"] != b"0-0"
    assert "Created consumer group" not in relay.stderr


def test_consumer_name_is_the_hostname(redis_server, redis_client, docker_engine, relay_process):
    relay = relay_process(start_env(redis_server))
    line = relay.wait_for('msg="Relay started"')
    assert f"consumer={socket.gethostname()}" in line
    assert relay.stop() == 0


def test_a_key_of_the_wrong_type_fails_clearly(redis_server, redis_client, docker_engine, isolate):
    redis_client.set(STREAM, "not a stream")
    result = subprocess.run(isolate(relay_command("start")), cwd=ROOT, env=start_env(redis_server), capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert f"cannot create consumer group '{GROUP}' on stream '{STREAM}': WRONGTYPE" in result.stderr


@pytest.mark.parametrize(("variables", "message"), [
    ({"REDIS_GROUP": ""}, "relay start: REDIS_GROUP is required and must not be empty\n"),
    ({"LOG_LEVEL": "WARNING"},
     "relay start: LOG_LEVEL='WARNING' is not a log level; use one of DEBUG, INFO, WARN, ERROR\n"),
    ({"MAX_BUFFERED_EVENTS": "-1"},
     "relay start: MAX_BUFFERED_EVENTS='-1' must be a positive whole number such as 16\n"),
    ({"REDIS_STREAM_RETENTION": "0"}, "relay start: REDIS_STREAM_RETENTION='0' must be longer than zero, e.g. 6h\n"),
    ({"METRICS_ADDR": "9090"}, "relay start: METRICS_ADDR='9090' is not a listen address; "
                                "use [host]:port, e.g. :9090 or 127.0.0.1:9090, with a port from 1 to 65535\n"),
])
def test_a_bad_value_stops_start_with_one_line(redis_server, variables, message, isolate):
    result = subprocess.run(isolate(relay_command("start")), cwd=ROOT, env=start_env(redis_server, **variables),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr == message


@pytest.mark.parametrize("uri", ["admin:hunter2@127.0.0.1:6379", "redis:/admin:hunter2@127.0.0.1",
                                 "redis://:hunter2@[::1", "redis://:hunter2@[zz]:1",
                                 "redis://admin:hunter2@127.0.0.1:" + "9" * 5000,
                                 "redis://admin:hun?ter2@127.0.0.1", "redis+sentinel://:hun?ter2@127.0.0.1/m",
                                 "admin:hun?ter2@127.0.0.1:6379"])
def test_a_hostile_redis_uri_stops_start_with_one_redacted_line(uri, isolate):
    env = base_env(REDIS_URI=uri, REDIS_STREAM=STREAM, REDIS_GROUP=GROUP)
    result = subprocess.run(isolate(relay_command("start")), cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1
    assert result.stderr.startswith("relay start: REDIS_URI=") and result.stderr.count("\n") == 1
    assert "hun" not in result.stderr and "ter2" not in result.stderr and "Traceback" not in result.stderr


def test_unreachable_redis_fails_fast(docker_engine, isolate):
    port = free_port()
    env = base_env(REDIS_URI=f"redis://user:topsecret@127.0.0.1:{port}", REDIS_STREAM=STREAM, REDIS_GROUP=GROUP)
    began = time.monotonic()
    result = subprocess.run(isolate(relay_command("start")), cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1
    assert time.monotonic() - began < 20
    assert (f'level=ERROR msg="Relay cannot start" error="Redis at redis://user:***@127.0.0.1:{port}/0 '
            'is unreachable: Connection refused"') in result.stderr
    assert "topsecret" not in result.stderr


def test_unreachable_docker_fails_fast(redis_server, redis_client, tmp_path, isolate):
    env = start_env(redis_server, DOCKER_HOST=f"unix://{tmp_path}/nothing.sock")
    result = subprocess.run(isolate(relay_command("start")), cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1
    assert f'error="Docker engine at unix://{tmp_path}/nothing.sock is unreachable: No such file or directory"' \
        in result.stderr
    assert not redis_client.exists(STREAM)


IMPORT_PROBE = """
import sys
record = open(sys.argv[1], "w")

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in ("redis", "docker", "urllib3", "requests", "ssl"):
            patched = "gevent.monkey" in sys.modules and sys.modules["gevent.monkey"].is_module_patched("socket")
            record.write(f"{name} patched={patched}\\n")
            record.flush()
        return None

sys.meta_path.insert(0, Watch())
from relay.entry import main
sys.exit(main(["start"]))
"""


def test_heavy_modules_are_imported_only_after_gevent_patched(redis_server, redis_client, docker_engine,
                                                              relay_process, tmp_path):
    record = tmp_path / "imports.txt"
    relay = relay_process(start_env(redis_server), [sys.executable, "-c", IMPORT_PROBE, str(record)])
    relay.wait_for('msg="Relay started"')
    assert relay.stop() == 0
    seen = record.read_text().splitlines()
    assert {line.split()[0] for line in seen} >= {"redis", "docker", "urllib3", "requests"}
    assert all(line.endswith("patched=True") for line in seen), seen
    assert "imported before gevent" not in relay.stderr


FAULT_PROBE = """
import os, sys
from gevent import monkey
monkey.patch_all()
from relay import supervisor
from relay.stream.consumer import Consumer

trigger, mode = sys.argv[1], sys.argv[2]

def reclaim_loop(self):  # a test-only fault, set off from outside by creating the trigger file
    while not os.path.exists(trigger):
        if self.stopping.wait(0.1):
            return
    if mode == "raise":
        raise RuntimeError("injected fault in the reclaimer")

Consumer.reclaim_loop = reclaim_loop
sys.exit(supervisor.start())
"""
SLOW_HANDLER = "import time\n\ndef handle(event):\n    time.sleep(4)\n    print('finished', flush=True)\n"


@pytest.mark.parametrize("mode", ["raise", "return"])
def test_a_dead_loop_stops_relay_with_exit_1_after_the_drain(mode, redis_server, redis_client, docker_engine,
                                                             relay_process, tmp_path):
    write_function(tmp_path / "functions", "slow",
                   "runtime: python3.14\nevents:\n  - handler: app.handle\n    pattern: {kind: [slow]}\n",
                   {"app.py": SLOW_HANDLER})
    trigger = tmp_path / "fault"
    relay = relay_process(start_env(redis_server), [sys.executable, "-c", FAULT_PROBE, str(trigger), mode])
    relay.wait_for('msg="Relay started"', timeout=300)
    redis_client.xadd(STREAM, {"event": '{"kind": "slow"}'})
    wait_until(lambda: redis_client.xpending(STREAM, GROUP)["pending"] == 1, what="the entry to be taken")
    trigger.touch()
    stdout, rest = relay.process.communicate(timeout=60)
    relay.lines.extend(rest.splitlines(keepends=True))
    assert relay.process.returncode == 1
    errors = [line for line in relay.lines if "level=ERROR" in line]
    if mode == "raise":
        assert 'msg="Loop ended unexpectedly; Relay stops" loop=reclaimer error="Traceback' in errors[0]
        assert "RuntimeError: injected fault in the reclaimer" in errors[0]
    else:
        assert 'msg="Loop returned while Relay was running; Relay stops" loop=reclaimer' in errors[0]
    assert 'msg="Relay stopped because a loop ended unexpectedly" loop=reclaimer' in errors[-1]
    assert len(errors) == 2 and "Traceback" not in "".join(line for line in relay.lines if line not in errors)
    assert 'msg="Relay stopping"' in relay.stderr
    assert "finished" in stdout                                  # the running invocation was drained,
    assert redis_client.xpending(STREAM, GROUP)["pending"] == 0   # and its entry acknowledged


def test_a_hostile_event_id_neither_forges_nor_drops_handler_output(redis_server, redis_client, docker_engine,
                                                                   relay_process, tmp_path):
    write_function(tmp_path / "functions", "echo",
                   "runtime: python3.14\nevents:\n  - handler: app.handle\n    pattern: {kind: [echo]}\n",
                   {"app.py": "def handle(event):\n    print('one', flush=True)\n    print('two', flush=True)\n"})
    relay = relay_process(start_env(redis_server))
    relay.wait_for('msg="Relay started"', timeout=300)
    event_id = 'e-1\nrelay: function "forged" handler "x": \ud800'
    message_id = redis_client.xadd(STREAM, {"event": json.dumps({"kind": "echo", "event_id": event_id})}).decode()
    relay.wait_for('msg="Handler executed"')
    relay.process.send_signal(signal.SIGTERM)
    stdout, rest = relay.process.communicate(timeout=60)
    assert relay.process.returncode == 0
    prefix = (f'relay: function "echo" handler "app.handle" message "{message_id}" '
              'event "e-1\\nrelay: function \\"forged\\" handler \\"x\\": \\ud800": ')
    assert stdout.splitlines() == [prefix + "one", prefix + "two"]
