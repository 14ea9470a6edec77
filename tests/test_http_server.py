"""The bounded HTTP server under /metrics and the webhook: cap, request deadline, minimum body rate,
unread bodies, and room kept for new connections by closing the oldest trickling one.

Clients use gevent's sockets so that they and the server share this thread's hub.
"""

import resource

import gevent
import pytest
from gevent import socket

from relay.http_server import (
    MAX_CONNECTIONS,
    MIN_CONNECTIONS,
    BoundedWSGIServer,
    body_below_rate,
    body_wait_left,
    connection_cap,
)


def hello(environ, start_response):
    """Answers at once without reading a body; /slow after working half a second."""
    if environ["PATH_INFO"] == "/slow":
        gevent.sleep(0.5)
        return greet(start_response, b"slow")
    return greet(start_response, b"")


def greet(start_response, text):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello " + text]


@pytest.fixture
def server():
    started = []

    def start(app=hello, **options):
        started.append(BoundedWSGIServer(("127.0.0.1", 0), app, name="Test", **options))
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
    assert served.connections == set()   # nothing stale left to shed


def test_a_request_head_sent_a_byte_at_a_time_is_cut_at_the_deadline(server):
    served = server(read_timeout=0.5)
    with connect(served) as client:
        client.sendall(b"GET / HT")
        with gevent.Timeout(5):
            assert read_all(client) == b""
    assert get(served).endswith(b"hello ")


def test_a_body_that_never_ends_is_cut_at_the_deadline(server):
    served = server(app=echo_or_408, read_timeout=0.5)
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
        slow.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")  # its application takes 0.5 s
        gevent.sleep(0.1)
        idle = [connect(served) for _ in range(5)]
        assert slow.recv(4096).endswith(b"hello slow")
        for client in idle:
            client.close()


def echo_or_408(environ, start_response):
    """Reads the whole body, as the webhook does; a body that ends early is 408."""
    try:
        body = environ["wsgi.input"].read()
    except OSError:
        start_response("408 Request Timeout", [("Content-Type", "text/plain"), ("Connection", "close")])
        return [b"too slow"]
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"got %d" % len(body)]


LONG_BODY = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"
LONG_CHUNKED_BODY = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffff\r\n"


@pytest.mark.parametrize("tricklers", [3, 50])
def test_connections_stalled_in_their_body_are_shed_for_a_request_at_the_cap(server, tricklers):
    """The issue's attack: full heads, then bodies that hardly move. The connection that fills
    the pool is read first (with 3 it is the request itself), and a trickler gives way."""
    served = server(cap=4, body_rate_grace=60, read_timeout=60)
    stalled = []
    for number in range(tricklers):
        stalled.append(connect(served))
        stalled[-1].sendall((LONG_BODY, LONG_CHUNKED_BODY)[number % 2] + b"x")
    gevent.sleep(0.3)
    with gevent.Timeout(2):   # the bound
        assert get(served).endswith(b"hello ")
    assert len(served.pool) <= 4
    for client in stalled:
        client.close()


def test_accepting_resumes_when_connections_accepted_together_start_to_wait(server):
    """The two that fill the pool are accepted before either was read, so nothing can be shed
    yet; once they wait for their clients, one gives way to the request queued behind them."""
    served = server(cap=2, read_timeout=60)
    idle = [connect(served), connect(served)]
    with gevent.Timeout(2):
        assert get(served).endswith(b"hello ")
    for client in idle:
        client.close()


@pytest.mark.parametrize("head", [LONG_BODY, LONG_CHUNKED_BODY])
def test_a_body_below_the_minimum_rate_is_cut_after_the_grace(server, head):
    served = server(app=echo_or_408, read_timeout=30, min_body_rate=100, body_rate_grace=0.5)
    with connect(served) as client:
        client.sendall(head)
        with gevent.Timeout(10):  # far below the 30 s deadline: the rate cut it
            trickle(client, interval=0.1)   # 10 bytes a second
    assert served.slow_bodies.last_warning is not None


def test_a_stalled_body_is_answered_by_the_application_before_the_connection_closes(server):
    served = server(app=echo_or_408, read_timeout=30, min_body_rate=100, body_rate_grace=0.5)
    with connect(served) as client:
        client.sendall(LONG_BODY + b"xyz")
        with gevent.Timeout(10):
            answer = read_all(client)
    assert answer.startswith(b"HTTP/1.1 408") and answer.endswith(b"too slow")


def trickle(client, interval):
    """Send a byte every *interval* seconds until the server ends the connection."""
    client.settimeout(interval)
    while True:
        try:
            client.sendall(b"x")
            if not client.recv(4096):
                return
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return


def test_a_body_at_the_minimum_rate_is_read_in_full_and_never_shed(server):
    served = server(app=echo_or_408, cap=2, min_body_rate=1024, body_rate_grace=0.2)
    idle = []
    try:
        with connect(served) as upload:
            upload.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 40960\r\n\r\n" + b"y" * 4096)
            for _ in range(9):   # 40 KiB/s, while idle connections keep coming
                gevent.sleep(0.1)
                idle.append(connect(served))
                upload.sendall(b"y" * 4096)
            assert upload.recv(4096).endswith(b"got 40960")
        assert served.shed.last_warning is not None   # the idle ones gave way instead
    finally:
        for client in idle:
            client.close()


@pytest.mark.parametrize("head", [b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n",
                                  b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabc"])
def test_a_body_the_application_does_not_read_is_answered_at_once_and_never_read(server, head):
    served = server(read_timeout=30)
    with connect(served) as client:
        client.sendall(head)
        with gevent.Timeout(5):  # not held until the 30 s deadline reading what nobody wants
            answer = read_all(client)
    assert answer.startswith(b"HTTP/1.1 200") and b"\r\nConnection: close\r\n" in answer
    assert answer.endswith(b"hello ")


@pytest.mark.parametrize(("received", "elapsed", "below"), [
    (0, 0.0, True), (2047, 0.5, True), (2048, 0.5, False), (2048, 2.0, False), (3000, 3.0, True),
    (3072, 3.0, False),
])
def test_a_body_is_below_the_rate_over_at_least_the_grace_period(received, elapsed, below):
    assert body_below_rate(received, elapsed, min_rate=1024, grace=2.0) is below


@pytest.mark.parametrize(("received", "elapsed", "left"), [
    (0, 0.0, 2.0), (0, 1.5, 0.5), (0, 2.5, -0.5), (4096, 2.0, 2.0), (4096, 5.0, -1.0),
])
def test_a_body_may_wait_until_its_average_would_fall_below_the_rate(received, elapsed, left):
    assert body_wait_left(received, elapsed, min_rate=1024, grace=2.0) == left


@pytest.mark.parametrize("head", [b"POST / HTTP/1.1\r\nHost: x\r\nX-Padding: xxxx", b"GET / HT"])
def test_a_head_cut_short_by_the_end_of_the_stream_is_not_a_request(server, head):
    """gevent would take the headers read so far for the whole head and run the application."""
    calls = []

    def counting(environ, start_response):
        calls.append(environ["PATH_INFO"])
        return hello(environ, start_response)

    served = server(app=counting)
    with connect(served) as client:
        client.sendall(head)
        client.shutdown(socket.SHUT_WR)
        with gevent.Timeout(5):
            assert read_all(client) == b""
    assert calls == []


def test_a_body_that_arrived_in_time_is_read_however_late_the_application_reads_it(server):
    def late(environ, start_response):
        gevent.sleep(0.5)   # past the grace before the first read
        return echo_or_408(environ, start_response)

    served = server(app=late, min_body_rate=1024, body_rate_grace=0.2)
    with connect(served) as client:
        client.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\nConnection: close\r\n\r\n")
        gevent.sleep(0.1)   # the head is read alone; the body waits in the socket
        client.sendall(b"z" * 20000)
        assert read_all(client).endswith(b"got 20000")


def test_connections_send_small_answers_at_once(server):
    """Nagle's algorithm off: a kept-alive connection's later answers (head and body in two
    sends) do not wait for the client's delayed acknowledgment (40 ms each on Linux)."""
    nodelay = []

    def report(environ, start_response):
        (connection,) = served.connections
        nodelay.append(connection.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        return greet(start_response, b"")

    served = server(app=report)
    assert get(served).endswith(b"hello ")
    assert nodelay == [1]
