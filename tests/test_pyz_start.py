"""The built relay.pyz running ``start``: gevent patches first, cold and warm."""

import signal

import pytest

from tests.support.relay_process import RelayProcess, base_env
from tests.support.workers import with_private_paths
from tests.support.zipapps import find_python

STREAM, GROUP = "events", "relay"


@pytest.mark.parametrize("version", ["3.11", "3.12", "3.13"])
def test_start_from_the_pyz_cold_then_warm(pyz, redis_server, redis_client, docker_engine, tmp_path, version):
    python = find_python(version)
    env = base_env(REDIS_URI=redis_server.address, REDIS_STREAM=STREAM, REDIS_GROUP=GROUP,
                   RELAY_PYZ_CACHE=str(tmp_path / "cache"))
    for temperature in ("cold", "warm"):
        relay = RelayProcess(env, with_private_paths([python, str(pyz), "start"], tmp_path / "functions",
                                                     tmp_path / "state"))
        try:
            relay.wait_for('msg="Relay started"', timeout=120)
            assert relay.stop(signal.SIGTERM) == 0, (temperature, relay.stderr)
        finally:
            if relay.process.poll() is None:
                relay.process.kill()
        assert "imported before gevent" not in relay.stderr, (temperature, relay.stderr)
        assert "Monkey-patching" not in relay.stderr, (temperature, relay.stderr)
        assert "Traceback" not in relay.stderr, (temperature, relay.stderr)
