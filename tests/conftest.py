"""Shared fixtures: a real redis-server per test session, the Docker engine,
relay.pyz, the git server, and the Relay processes a test starts. The helpers
behind them live in tests/support/."""

import secrets
import subprocess
import sys

import pytest

from tests.support.browser import screenshot_directory, start_browser
from tests.support.gitserver import git_server  # noqa: F401  (a fixture, requested by name)
from tests.support.redis_server import RedisServer
from tests.support.relay_process import ROOT

# A test that asks for one of these, directly or through another fixture,
# needs a real service or build: it is marked integration.
INTEGRATION_FIXTURES = frozenset({"redis_server", "docker_engine", "pyz", "git_server", "chromium"})


def pytest_collection_modifyitems(items):
    """Mark integration every test whose fixture closure holds an INTEGRATION_FIXTURES
    member; modules that start Relay or other processes themselves mark their own."""
    for item in items:
        if INTEGRATION_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


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
def chromium(tmp_path_factory):
    """One headless Chromium for the session (tests.support.browser.Browser); tests ask for ``browser``."""
    started = start_browser(tmp_path_factory.mktemp("chromium") / "profile",
                            screenshot_directory(tmp_path_factory.mktemp("screenshots")))
    yield started
    started.quit()


@pytest.fixture
def browser(chromium):
    """The session's headless Chromium on a blank page, with no cookie left from another test."""
    chromium.reset()
    return chromium


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
    from tests.support.runtime import remove_images

    tags = []
    yield tags
    remove_images(docker_engine, tags)


@pytest.fixture
def token():
    """A short random suffix for the names of the functions and images a test makes."""
    return secrets.token_hex(3)


@pytest.fixture
def workers():
    """Relay processes a test starts (tests.support.workers.Worker); killed afterwards."""
    started = []
    yield started
    for worker in started:
        worker.kill()


@pytest.fixture(scope="session")
def pyz(tmp_path_factory):
    """relay.pyz built once per test session by build_zipapp.py."""
    output = tmp_path_factory.mktemp("build") / "relay.pyz"
    result = subprocess.run([sys.executable, str(ROOT / "build_zipapp.py"), "-o", str(output)],
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr
    return output
