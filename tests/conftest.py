"""Shared fixtures: a real redis-server per test session, the Docker engine, and
a way to run Relay as a subprocess exactly as an operator would."""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """A throw-away redis-server on a free loopback port."""

    def __init__(self, directory, port=None, password=None):
        self.directory = Path(directory)
        self.port = port or free_port()
        self.password = password
        self.extra_args = []
        self.process = None

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed: run scripts/setup (the README's test command does)")
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.directory)]
        if self.password:
            args += ["--requirepass", self.password]
        args += self.extra_args
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        pytest.fail(f"redis-server did not start on port {self.port}")

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    def client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_client(redis_server):
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="session")
def docker_engine():
    """The real Docker engine; the test command's setup starts it."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as error:
        pytest.fail(f"the Docker engine is not reachable ({error}); run scripts/setup first")
    yield client
    client.close()


@pytest.fixture
def created(docker_engine):
    """Image tags a test makes; removed afterwards."""
    from tests.runtime_helpers import remove_images

    tags = []
    yield tags
    remove_images(docker_engine, tags)


@pytest.fixture
def workers():
    """Relay processes a test starts (tests.engine.workers.Worker); killed afterwards."""
    started = []
    yield started
    for worker in started:
        worker.kill()


def base_env(**overrides):
    """The environment of a Relay subprocess: this one minus Relay's own variables."""
    env = {key: value for key, value in os.environ.items()
           if key not in RELAY_VARIABLES and not key.startswith("DOCKER_")}
    env.update({key: value for key, value in overrides.items() if value is not None})
    return env


RELAY_VARIABLES = (
    "REDIS_URI", "REDIS_STREAM", "REDIS_GROUP", "REDIS_STREAM_RETENTION", "METRICS_ADDR",
    "GIT_WEBHOOK_ADDR", "LOG_LEVEL", "MAX_CONCURRENCY", "MAX_BUFFERED_EVENTS",
    "MAX_EVENT_BYTES",
)


def relay_command(*args):
    return [sys.executable, "-m", "relay", *args]


def run_relay(*args, env=None, timeout=60, input=None):
    return subprocess.run(relay_command(*args), cwd=ROOT, env=env or base_env(), capture_output=True,
                          text=True, timeout=timeout, input=input)


@pytest.fixture(scope="session")
def pyz(tmp_path_factory):
    """relay.pyz built once per test session by build_zipapp.py."""
    output = tmp_path_factory.mktemp("build") / "relay.pyz"
    result = subprocess.run([sys.executable, str(ROOT / "build_zipapp.py"), "-o", str(output)],
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr
    return output
