"""``redis+sentinel://`` against real Sentinels: ``relay health`` names the step that failed,
and ``relay start`` refuses to start with the same one line."""

import time

import pytest

from tests.support.redis_server import free_port
from tests.support.relay_process import base_env, run_relay
from tests.support.sentinel import SentinelRedis

pytestmark = pytest.mark.integration

PASSWORD, SENTINEL_PASSWORD = "data-pw", "sentinel-pw"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """Sentinels that take a minute to call a silent primary down: no failover during these tests."""
    started = SentinelRedis(tmp_path_factory.mktemp("sentinel"), password=PASSWORD,
                            sentinel_password=SENTINEL_PASSWORD, down_after_ms=60_000).start()
    yield started
    started.stop()


def health(uri, **variables):
    result = run_relay("health", env=base_env(REDIS_URI=uri, **variables))
    return result.returncode, result.stdout, result.stderr


def redis_line(stderr):
    assert stderr.startswith("relay health: ") and stderr.count("\n") == 1, stderr
    return stderr.removeprefix("relay health: ").rstrip("\n")


def test_healthy_names_the_primary(deployment, docker_engine):
    code, stdout, stderr = health(deployment.uri(login=f":{PASSWORD}"), REDIS_SENTINEL_PASSWORD=SENTINEL_PASSWORD)
    assert code == 0, stderr
    hosts = ",".join(f"127.0.0.1:{node.port}" for node in deployment.sentinels)
    assert stdout.splitlines()[0] == (f"redis: ok (redis+sentinel://:***@{hosts}/relaymaster/0, "
                                      f"primary 127.0.0.1:{deployment.primary().port})")
    assert PASSWORD not in stdout + stderr and SENTINEL_PASSWORD not in stdout + stderr


def test_no_sentinel_answered():
    ports = free_port(), free_port()
    code, _, stderr = health(f"redis+sentinel://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/relaymaster")
    assert code == 1
    assert redis_line(stderr) == (f"Redis at redis+sentinel://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/relaymaster/0 "
                                  f"is unreachable: no sentinel answered (127.0.0.1:{ports[0]}, "
                                  f"127.0.0.1:{ports[1]}: Connection refused)")


def test_sentinels_that_want_a_password_say_which_variable(deployment):
    code, _, stderr = health(deployment.uri(login=f":{PASSWORD}"))
    assert code == 1
    assert redis_line(stderr).endswith(": it asks for a password; set REDIS_SENTINEL_PASSWORD)")
    code, _, stderr = health(deployment.uri(login=f":{PASSWORD}"), REDIS_SENTINEL_PASSWORD="wrong")
    assert code == 1
    assert redis_line(stderr).endswith(": it refused REDIS_SENTINEL_PASSWORD)")
    assert "no sentinel answered" in stderr and "wrong" not in stderr


def test_a_master_the_sentinels_do_not_know(deployment):
    uri = deployment.uri(login=f":{PASSWORD}").replace("/relaymaster", "/mymaster")
    code, _, stderr = health(uri, REDIS_SENTINEL_PASSWORD=SENTINEL_PASSWORD)
    assert code == 1
    assert redis_line(stderr).endswith(' is unreachable: master "mymaster" unknown to the sentinels')


def test_a_primary_that_refuses_the_login(deployment):
    code, _, stderr = health(deployment.uri(login=":wrong"), REDIS_SENTINEL_PASSWORD=SENTINEL_PASSWORD)
    assert code == 1
    assert redis_line(stderr).endswith(f" is unreachable: primary 127.0.0.1:{deployment.primary().port} did not "
                                       "answer: invalid username-password pair or user is disabled.")


def test_a_primary_that_never_answers_is_named_at_the_deadline(deployment):
    primary = deployment.primary()
    primary.freeze()
    try:
        code, _, stderr = health(deployment.uri(login=f":{PASSWORD}"), REDIS_SENTINEL_PASSWORD=SENTINEL_PASSWORD)
    finally:
        primary.thaw()
    assert code == 1
    assert redis_line(stderr).endswith(f"/relaymaster/0: primary 127.0.0.1:{primary.port} did not answer within 5s")


def test_start_refuses_with_the_same_line(deployment):
    uri = deployment.uri(login=f":{PASSWORD}").replace("/relaymaster", "/mymaster")
    result = run_relay("start", env=base_env(REDIS_URI=uri, REDIS_SENTINEL_PASSWORD=SENTINEL_PASSWORD,
                                             REDIS_STREAM="events", REDIS_GROUP="relay"))
    assert result.returncode == 1
    assert 'is unreachable: master \\"mymaster\\" unknown to the sentinels"' in result.stderr   # logfmt
    assert PASSWORD not in result.stderr and SENTINEL_PASSWORD not in result.stderr


def test_a_primary_down_before_its_replica_is_promoted(tmp_path):
    """Two of three Sentinels gone: the last one sees the primary down but cannot reach a quorum to promote."""
    lonely = SentinelRedis(tmp_path, down_after_ms=500).start()
    try:
        for node in lonely.sentinels[1:]:
            node.kill()
        primary = lonely.kill_primary()
        deadline = time.monotonic() + 30
        while not lonely.sentinel_state(0)["is_sdown"]:
            assert time.monotonic() < deadline, "the Sentinel never saw the primary down"
            time.sleep(0.1)
        code, _, stderr = health(lonely.uri())
    finally:
        lonely.stop()
    assert code == 1
    assert redis_line(stderr).endswith(f" is unreachable: the sentinels see primary 127.0.0.1:{primary.port} of "
                                       'master "relaymaster" down and have not promoted a replica yet')
