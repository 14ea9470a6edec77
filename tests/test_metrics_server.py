"""The /metrics endpoint: text format, isolation from bind failures."""

import socket
import urllib.request

import gevent
import pytest
from prometheus_client.parser import text_string_to_metric_families

from relay.config import ListenAddress
from relay.metrics.prometheus import Metrics
from relay.metrics.server import MetricsServer
from tests.support.redis_server import free_port


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        return {family.name: family for family in text_string_to_metric_families(response.read().decode())}


def wait_until(condition, timeout=10):
    for _ in range(int(timeout / 0.05)):
        if condition():
            return True
        gevent.sleep(0.05)
    return False


@pytest.fixture
def served():
    servers = []

    def serve(port):
        server = MetricsServer(ListenAddress(host="127.0.0.1", port=port), metrics.registry)
        servers.append((server, gevent.spawn(server.loop)))
        return server

    metrics = Metrics()
    yield metrics, serve
    for server, loop in servers:
        server.stop()
        loop.join(timeout=5)


def test_scrape(served):
    metrics, serve = served
    port = free_port()
    server = serve(port)
    assert wait_until(lambda: server.server is not None)
    metrics.events_received.inc(3)
    metrics.handler_invocations.labels("success", "fn", "h.handler").inc()
    families = gevent.get_hub().threadpool.apply(scrape, (port,))
    assert families["events_received"].type == "counter"
    assert families["events_received"].samples[0].value == 3
    assert not any(sample.name.endswith("_created") for family in families.values() for sample in family.samples)


def test_a_taken_port_is_retried_until_it_frees(served):
    metrics, serve = served
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    server = serve(port)
    gevent.sleep(1.5)
    assert server.server is None
    blocker.close()
    assert wait_until(lambda: server.server is not None, timeout=10)
    families = gevent.get_hub().threadpool.apply(scrape, (port,))
    assert "pending_entries" in families
