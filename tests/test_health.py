"""``relay health`` against a real redis-server and the real Docker engine."""

import os
import subprocess

import pytest

from tests.support.commands import with_service_env
from tests.support.redis_server import RedisServer, free_port
from tests.support.relay_process import ROOT, base_env, relay_command, run_relay

# Every test runs relay health as a process, most against Redis: no fixture says so, hence the mark.
pytestmark = pytest.mark.integration


def test_healthy(redis_server, docker_engine):
    result = run_relay("health", env=base_env(REDIS_URI=redis_server.address))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"redis: ok (redis://{redis_server.address}/0)",
        "docker: ok (unix:///var/run/docker.sock)",
    ]
    assert result.stderr == ""


def test_redis_down(docker_engine):
    port = free_port()
    result = run_relay("health", env=base_env(REDIS_URI=f"redis://127.0.0.1:{port}"))
    assert result.returncode == 1
    assert result.stderr == f"relay health: Redis at redis://127.0.0.1:{port}/0 is unreachable: Connection refused\n"


def test_docker_socket_dead(redis_server, tmp_path):
    socket_path = tmp_path / "dead.sock"
    result = run_relay("health", env=base_env(REDIS_URI=redis_server.address, DOCKER_HOST=f"unix://{socket_path}"))
    assert result.returncode == 1
    assert result.stdout.startswith("redis: ok")
    assert result.stderr == (
        f"relay health: Docker engine at unix://{socket_path} is unreachable: No such file or directory\n")


def test_docker_port_closed(redis_server):
    port = free_port()
    result = run_relay("health", env=base_env(REDIS_URI=redis_server.address, DOCKER_HOST=f"tcp://127.0.0.1:{port}"))
    assert result.returncode == 1
    assert "Docker engine at tcp://127.0.0.1:" in result.stderr and "Connection refused" in result.stderr


def test_needs_only_redis_uri(redis_server, docker_engine):
    env = base_env(REDIS_URI=redis_server.address, LOG_LEVEL="nonsense", MAX_CONCURRENCY="0")
    assert run_relay("health", env=env).returncode == 0


def test_missing_redis_uri():
    result = run_relay("health", env=base_env())
    assert result.returncode == 1
    assert result.stderr == "relay health: REDIS_URI is required and must not be empty\n"


@pytest.fixture
def password_redis(tmp_path):
    server = RedisServer(tmp_path, password="s3cr3t-pw").start()
    yield server
    server.stop()


def test_password_never_printed(password_redis, docker_engine):
    good = run_relay("health", env=base_env(REDIS_URI=f"redis://default:s3cr3t-pw@{password_redis.address}"))
    assert good.returncode == 0, good.stderr
    bad = run_relay("health", env=base_env(REDIS_URI=f"redis://default:wr0ng-pw@{password_redis.address}"))
    assert bad.returncode == 1
    assert "invalid username-password pair" in bad.stderr
    for result in (good, bad):
        output = result.stdout + result.stderr
        assert "s3cr3t-pw" not in output and "wr0ng-pw" not in output
        assert "default:***@" in output


def test_a_dependency_that_never_answers_fails_within_the_deadline():
    """Redis and the engine both accept a connection and say nothing: the whole command takes about 5 s."""
    import socket
    import time

    listeners = []
    for _ in range(2):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listeners.append(listener)
    redis_port, docker_port = (listener.getsockname()[1] for listener in listeners)
    began = time.monotonic()
    result = run_relay("health", env=base_env(REDIS_URI=f"127.0.0.1:{redis_port}",
                                              DOCKER_HOST=f"tcp://127.0.0.1:{docker_port}"))
    took = time.monotonic() - began
    for listener in listeners:
        listener.close()
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == f"relay health: Redis at redis://127.0.0.1:{redis_port}/0 did not answer within 5s\n"
    assert took < 9, f"relay health took {took:.1f}s"


def health_with_service_env(etc, *args, as_uid=None):
    """``relay health`` where the directory *etc* is /etc/relay, with none of Relay's variables set."""
    command = relay_command("health", *args)
    if as_uid is not None:
        command = ["setpriv", f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups", *command]
    return subprocess.run(with_service_env(command, etc), cwd=ROOT, env=base_env(), capture_output=True, text=True,
                          timeout=60)


def test_health_reads_the_services_environment_file(redis_server, docker_engine, tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "relay.env").write_text(f"REDIS_URI={redis_server.address}\nREDIS_STREAM=events\nREDIS_GROUP=relay\n")
    result = health_with_service_env(etc)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines()[0] == f"redis: ok (redis://{redis_server.address}/0)"


def test_a_malformed_or_unreadable_environment_file_is_one_line(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    env_file = etc / "relay.env"
    env_file.write_text("REDIS_URI=redis://relay:hunter2@127.0.0.1:1\nREDIS_STREAM events\n")
    result = health_with_service_env(etc)
    assert result.returncode == 1
    assert result.stderr == 'relay health: /etc/relay/relay.env, line 2: not NAME=value (there is no "=")\n'
    env_file.write_text("REDIS_URI=redis://127.0.0.1:1\n")
    os.chmod(env_file, 0o600)
    nobody = health_with_service_env(etc, as_uid=65534)
    assert nobody.returncode == 1
    assert nobody.stderr == ("relay health: cannot read the environment file /etc/relay/relay.env: "
                             "Permission denied\n")
