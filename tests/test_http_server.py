"""The bounded HTTP server under /metrics and the webhook: cap, request deadline, shedding idle connections.

Clients use gevent's sockets so that they and the server share this thread's hub.
"""

import resource

import gevent
import pytest
from gevent import socket

from relay.http_server import MAX_CONNECTIONS, MIN_CONNECTIONS, BoundedWSGIServer, connection_cap


def hello(environ, start_response):
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello " + body]


@pytest.fixture
def server():
    started = []

    def start(**options):
        started.append(BoundedWSGIServer(("127.0.0.1", 0), hello, name="Test", **options))
        started[-1].start()
        return started[-1]

    yield start
    for item in started:
        item.stop(timeout=1)


def connect(server):
    return socket.create_connection(("127.0.0.1", server.server_port), timeout=10)


def get(server):
    with connect(server) as client:
        client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return read_all(client)


def read_all(client):
    chunks = []
    while chunk := client.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(("soft_limit", "cap"), [
    (256, 32), (1024, MAX_CONNECTIONS), (1_048_576, MAX_CONNECTIONS), (16, MIN_CONNECTIONS),
    (resource.RLIM_INFINITY, MAX_CONNECTIONS),
])
def test_the_cap_is_a_share_of_the_open_file_limit(soft_limit, cap):
    assert connection_cap(soft_limit) == cap


def test_idle_connections_are_shed_for_a_request_at_the_cap(server):
    served = server(cap=4)
    idle = [connect(served) for _ in range(50)]
    gevent.sleep(0.2)
    with gevent.Timeout(2):
        assert get(served).endswith(b"hello ")
    assert len(served.pool) <= 4
    for client in idle:
        client.close()
    with gevent.Timeout(5):
        while len(served.pool):
            gevent.sleep(0.05)
    assert served.waiting == {}   # nothing stale left to shed


def test_a_request_head_sent_a_byte_at_a_time_is_cut_at_the_deadline(server):
    served = server(read_timeout=0.5)
    with connect(served) as client:
        client.sendall(b"GET / HT")
        with gevent.Timeout(5):
            assert read_all(client) == b""
    assert get(served).endswith(b"hello ")


def test_a_body_that_never_ends_is_cut_at_the_deadline(server):
    served = server(read_timeout=0.5)
    with connect(served) as client:
        client.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\npart")
        with gevent.Timeout(5):
            read_all(client)
    assert len(served.pool) == 0


def test_a_kept_alive_connection_gets_a_fresh_deadline_per_request_and_closes_when_idle(server):
    served = server(read_timeout=0.5)
    with connect(served) as client:
        for _ in range(3):
            client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b"hello " in client.recv(4096)
            gevent.sleep(0.3)
        with gevent.Timeout(5):
            assert read_all(client) == b""


def test_a_request_being_handled_is_never_shed(server):
    served = server(cap=2)
    with connect(served) as slow:
        slow.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")  # its app is reading the body
        gevent.sleep(0.2)
        idle = [connect(served) for _ in range(5)]
        gevent.sleep(0.2)
        slow.sendall(b"cd")
        assert slow.recv(4096).endswith(b"hello abcd")
        for client in idle:
            client.close()
