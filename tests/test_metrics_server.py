"""The /metrics endpoint: text format, isolation from bind failures."""

import socket
import urllib.request

import gevent
import pytest
from prometheus_client.parser import text_string_to_metric_families

from relay.config import ListenAddress
from relay.metrics.prometheus import Metrics
from relay.metrics.server import metrics_server
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
        server = metrics_server(ListenAddress(host="127.0.0.1", port=port), metrics.registry)
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


@pytest.mark.parametrize("head", [b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{",
                                  b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nff\r\n"])
def test_a_scrape_with_a_body_is_answered_at_once_and_the_body_is_never_read(served, head):
    from gevent import socket

    metrics, serve = served
    port = free_port()
    server = serve(port)
    assert wait_until(lambda: server.server is not None)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(head)   # and nothing more
        answer = b""
        with gevent.Timeout(5):   # not held until the 10 s deadline
            while chunk := client.recv(65536):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 200") and b"\r\nConnection: close\r\n" in answer
    assert b"\nevents_received_total 0.0\n" in answer
