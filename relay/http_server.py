"""The HTTP server under the metrics endpoint, the console and the webhook: gevent.pywsgi with limits.

A client that connects and sends nothing, sends its request a byte at a
time, or sends a full head and then trickles its body must not take the
server or the worker with it, nor keep a scrape or a delivery waiting.

- **A connection cap.** At most ``connection_cap()`` connections are open at
  once: ``min(64, soft RLIMIT_NOFILE // 8)``, at least 4. With ``ulimit -n
  256`` that is 32 per server, so the two servers together hold at most a
  quarter of Relay's descriptors and Redis, Docker and SQLite keep the rest.
- **A request deadline.** Each request must arrive and be answered within
  ``READ_TIMEOUT`` (10 s) from the moment the server starts waiting for it:
  request line, headers and body alike. At the deadline the socket is shut
  down, so whatever read was blocked sees the end of the stream and the
  connection closes quietly. A kept-alive connection gets a new deadline
  for each request, so an idle one is closed after 10 s.
- **A minimum body rate.** Counted from the moment its head was read, a
  request body must average ``MIN_BODY_RATE`` (1 KiB/s) once
  ``BODY_RATE_GRACE`` (2 s) have passed: a read that would wait past the
  moment the body falls below that average is not made, the application
  sees the body end early (the webhook answers 408) and the connection
  closes after the answer.
- **A body the application leaves is never read.** When the application
  answers without reading the whole body (``GET /metrics`` with a body, a
  413 for an oversized delivery), the answer carries ``Connection: close``
  and the connection closes after it; the rest of the body is not read.
- **Room for new connections.** Whenever the pool is full, the server
  closes one *trickling* connection so that the next client is accepted at
  once rather than queued until a deadline frees a slot. A connection is
  trickling while the server is blocked reading from it and it is either
  waiting for (the rest of) a request head (this includes a connection that
  has sent nothing yet and a kept-alive one idle between requests), or
  reading a body that is below the minimum rate counted over at least the
  grace period (``received < MIN_BODY_RATE * max(elapsed, BODY_RATE_GRACE)``,
  so a body that has not started yet counts). Of the trickling connections,
  the one whose current request began first is closed. Never closed for
  room: a connection the server has not yet read (just accepted: its
  request may already be waiting in the socket), one whose application is
  working or sending its answer, and one whose body arrives at least at the
  minimum rate. When nothing can be closed, accepting waits until a slot
  frees or a connection starts trickling.
- **No wait on small answers.** gevent writes an answer's head and body in
  two sends. With Nagle's algorithm on, the body of each answer after the
  first on a kept-alive connection waited for the client's delayed
  acknowledgment of the head: 40 ms on Linux, on every console page and
  scrape. Connections set ``TCP_NODELAY``, as Go's net/http does.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import resource
import socket
import time
from collections.abc import Callable
from operator import attrgetter
from types import TracebackType
from typing import TYPE_CHECKING

from gevent.event import Event
from gevent.pool import Pool
from gevent.pywsgi import Input, WSGIHandler, WSGIServer

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer
    from _typeshed.wsgi import WSGIApplication, WSGIEnvironment

    from relay.config import ListenAddress

log = logging.getLogger("relay.http")

READ_TIMEOUT = 10.0    # seconds for a whole request, from the first wait to the answer
MIN_BODY_RATE = 1024   # bytes per second a request body averages at least, after the grace period
BODY_RATE_GRACE = 2.0  # seconds from the end of the head before the body's average rate counts
MAX_CONNECTIONS = 64   # the cap whatever the file limit
MIN_CONNECTIONS = 4
FILE_LIMIT_SHARE = 8   # one server takes at most 1/8 of the soft RLIMIT_NOFILE
LISTEN_BACKLOG = 1024  # connections the kernel queues for accept (capped by net.core.somaxconn)
WARNING_INTERVAL = 60.0
FIRST_RETRY = 1.0      # seconds before a RetriedListener tries its port again; doubled up to MAX_RETRY
MAX_RETRY = 30.0


def connection_cap(soft_limit: int | None = None) -> int:
    """The number of connections one server keeps open at most, from the open-file soft limit."""
    if soft_limit is None:
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_limit == resource.RLIM_INFINITY or soft_limit < 0:
        return MAX_CONNECTIONS
    return max(MIN_CONNECTIONS, min(MAX_CONNECTIONS, soft_limit // FILE_LIMIT_SHARE))


def body_below_rate(received: int, elapsed: float, min_rate: float, grace: float) -> bool:
    """Whether a body that sent *received* bytes in *elapsed* seconds is below *min_rate*,
    counted over at least *grace* seconds (so a body that has barely started is below it)."""
    return received < min_rate * max(elapsed, grace)


def body_wait_left(received: int, elapsed: float, min_rate: float, grace: float) -> float:
    """Seconds a body that sent *received* bytes in *elapsed* seconds may still wait for its next
    byte before its average falls below *min_rate* (the first *grace* seconds are free)."""
    return max(grace, received / min_rate) - elapsed


class BoundedWSGIServer(WSGIServer):
    """A WSGIServer with a connection cap, a request deadline, a minimum body rate, and room
    kept for new connections by closing the oldest trickling one.

    *name* ("Metrics", "Webhook") prefixes the warnings logged when connections are closed.
    """

    def __init__(self, address: tuple[str, int], app: WSGIApplication, *, name: str, cap: int | None = None,
                 read_timeout: float = READ_TIMEOUT, min_body_rate: float = MIN_BODY_RATE,
                 body_rate_grace: float = BODY_RATE_GRACE) -> None:
        self.cap = cap or connection_cap()
        super().__init__(address, app, backlog=LISTEN_BACKLOG, log=None, error_log=None, spawn=Pool(self.cap),
                         handler_class=_Connection)
        self.name = name
        self.read_timeout = read_timeout
        self.min_body_rate = min_body_rate
        self.body_rate_grace = body_rate_grace
        self.connections: set[_Connection] = set()  # the connections the server has started reading
        self.starved = False      # the pool is full and nothing could be closed: accepting waits
        self.shed = RareWarning(f"{name} http server at its connection limit; closing the oldest connections "
                                 "waiting on a slow client", limit=self.cap)
        self.slow_bodies = RareWarning(f"{name} http server closed connections whose request body arrived "
                                        "below the minimum rate", min_bytes_per_second=min_body_rate)
        self.full = self._full_after_shedding  # gevent set it to the pool's full(); same hook, our rule

    def _full_after_shedding(self) -> bool:
        """Called before each accept, including right after the accept that fills the pool.
        At the cap, close the oldest trickling connection: its slot frees when its greenlet
        ends, and the pool then restarts accepting."""
        if not self.pool.full():
            return False
        victim = self.oldest_trickling()
        self.starved = victim is None
        if victim is not None:
            victim.cut()
            self.shed.count()
        return True

    def oldest_trickling(self) -> _Connection | None:
        now = time.monotonic()
        trickling = [connection for connection in self.connections if connection.trickling(now)]
        return min(trickling, key=attrgetter("request_began"), default=None)

    def client_awaited(self) -> None:
        """A connection is about to wait for its client. If accepting stopped because nothing
        could be closed, look again: this one may be what the next client replaces."""
        if self.starved and self._watcher is None and self._timer is None and self.started:
            self.starved = False
            self.start_accepting()


class _Connection(WSGIHandler):
    """One client connection: its reads go through receive_into, which knows what the server
    waits for (a head, a body) and how fast the body comes; each request has the deadline."""

    server: BoundedWSGIServer
    wsgi_input: _Body | None

    def __init__(self, sock: socket.socket, address: tuple[str, int], server: BoundedWSGIServer,
                 rfile: io.BufferedReader | None = None) -> None:
        super().__init__(sock, address, server, rfile or io.BufferedReader(_ClientStream(self)))
        with contextlib.suppress(OSError):  # a client already gone: the first read ends the connection
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request_began = time.monotonic()  # when the server began waiting for the current request
        self.head_read_at: float | None = None  # when its head was read; None while the head is awaited
        self.received = 0                      # bytes read from the socket, all requests
        self.head_end = 0                      # the stream offset where the current request's head ended
        self.awaiting_client = False           # blocked reading from the socket right now
        self.ended = False                     # a read found the end of the stream
        self.was_cut = False                   # the server shut the socket down

    def handle(self) -> None:
        self.server.connections.add(self)
        try:
            super().handle()
        except ConnectionError:  # an error answer to a client that went away
            pass
        finally:
            self.server.connections.discard(self)

    def handle_one_request(self) -> object:
        self.request_began, self.head_read_at = time.monotonic(), None
        deadline = self.server.loop.timer(self.server.read_timeout)
        deadline.start(self.cut)
        try:
            result = super().handle_one_request()
        finally:
            deadline.close()
        if self.was_cut or (result is True and self._body_left()):
            return None  # close: the socket is shut down, or a body is left unread on it
        return result

    def read_request(self, raw_requestline: str) -> object:
        parsed = self.ended or super().read_request(raw_requestline)
        if self.ended:  # gevent takes a head cut short by the end of the stream for a whole one
            raise ConnectionAbortedError("the request head ended early")
        self.head_read_at, self.head_end = time.monotonic(), self.rfile.tell()  # tell: what the parser took
        return parsed

    def get_environ(self) -> WSGIEnvironment:
        environ = super().get_environ()
        body: Input = self.wsgi_input  # gevent's, which super().get_environ() just made
        self.wsgi_input = _Body(body.rfile, body.content_length, socket=body.socket, chunked_input=body.chunked_input)
        if environ["wsgi.input"] is body:
            environ["wsgi.input"] = self.wsgi_input
        return environ

    def start_response(self, status: str, headers: list[tuple[str, str]],
                       exc_info: tuple[type[BaseException], BaseException, TracebackType] | None = None,
                       ) -> Callable[[bytes], object]:
        if self._body_left():
            headers = [(name, value) for name, value in headers if name.lower() != "connection"]
            headers.append(("Connection", "close"))
        return super().start_response(status, headers, exc_info)

    def receive_into(self, buffer: WriteableBuffer) -> int:
        """Read from the socket into *buffer*, as the raw stream under ``self.rfile``."""
        wait = self._body_wait_left()  # past it, only what has already arrived is taken
        sock = self.socket
        self.awaiting_client = True
        self.server.client_awaited()
        try:
            if wait is not None:
                sock.settimeout(max(wait, 0.0))
            count = sock.recv_into(buffer)
        except (TimeoutError, BlockingIOError):
            return self._too_slow()
        finally:
            self.awaiting_client = False
            if wait is not None:
                sock.settimeout(None)
        self.received += count
        self.ended = count == 0
        return count

    def trickling(self, now: float) -> bool:
        """Whether the server waits on this connection for a head, or for a body below the rate."""
        if not self.awaiting_client or self.was_cut:
            return False
        if self.head_read_at is None:
            return True
        server = self.server
        return body_below_rate(self.received - self.head_end, now - self.head_read_at,
                               server.min_body_rate, server.body_rate_grace)

    def cut(self) -> None:
        """Shut the socket down: a blocked read returns end-of-stream, a write fails, and the
        connection ends the ordinary way (closed by its handler, nothing logged)."""
        self.was_cut = True
        _shutdown(self.socket, socket.SHUT_RDWR)

    def _too_slow(self) -> int:
        """The body fell below the minimum rate: its reads end here (the application may still
        answer, on a connection that then closes)."""
        if not self.was_cut:
            self.was_cut = True
            _shutdown(self.socket, socket.SHUT_RD)
            self.server.slow_bodies.count()
        return 0

    def _body_wait_left(self) -> float | None:
        if self.head_read_at is None:
            return None
        server = self.server
        return body_wait_left(self.received - self.head_end, time.monotonic() - self.head_read_at,
                              server.min_body_rate, server.body_rate_grace)

    def _body_left(self) -> bool:
        body = self.wsgi_input
        return body is not None and body.unread()

    def handle_error(self, t: type[BaseException], v: BaseException, tb: TracebackType | None) -> None:
        if self.was_cut:  # the application's read or write failed because the server cut it
            self.close_connection = True
            return
        super().handle_error(t, v, tb)

    def _handle_client_error(self, ex: BaseException) -> object:
        if isinstance(ex, OSError):  # the peer went away or was cut: close without a word
            return None
        return super()._handle_client_error(ex)


class _ClientStream(io.RawIOBase):
    """The raw stream under a connection's buffered rfile: every read is the connection's."""

    def __init__(self, connection: _Connection) -> None:
        self.connection = connection

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        return self.connection.receive_into(buffer)

    def tell(self) -> int:
        return self.connection.received


class _Body(Input):
    """gevent's request body, except that what the application left is never read: the
    connection closes instead (see _Connection.start_response and handle_one_request)."""

    __slots__ = ()

    def unread(self) -> bool:
        if self.chunked_input:  # up to its last chunk, or stopped by a malformed one
            return self.chunk_length != 0 or self._chunked_input_error
        return self.position < (self.content_length or 0)

    def _discard(self) -> None:
        pass


class RareWarning:
    """Counts what a client was refused and logs a warning about it at most once a WARNING_INTERVAL,
    with how many times it happened since the last one (under *counted*: closed connections by default)."""

    def __init__(self, message: str, counted: str = "closed", logger: logging.Logger = log, **extra: object) -> None:
        self.message, self.counted, self.logger, self.extra = message, counted, logger, extra
        self.since_warning = 0
        self.last_warning: float | None = None

    def count(self) -> None:
        self.since_warning += 1
        now = time.monotonic()
        if self.last_warning is None or now - self.last_warning >= WARNING_INTERVAL:
            self.logger.warning(self.message, extra={**self.extra, self.counted: self.since_warning})
            self.last_warning, self.since_warning = now, 0


def _shutdown(sock: socket.socket, how: int) -> None:
    try:
        sock.shutdown(how)
    except OSError:
        pass


class RetriedListener:
    """An HTTP server as a side loop of ``relay start`` (the metrics endpoint, the console).

    A port that cannot be bound is logged and tried again with a capped backoff, never fatal:
    an observability endpoint must not stop consumption. ``stop`` closes it gracefully.
    *name* names it in its log lines ("Metrics http server listening").
    """

    def __init__(self, name: str, address: ListenAddress, app: WSGIApplication) -> None:
        self.name = name
        self.address = address
        self.app = app
        self.stopping = Event()
        self.server: BoundedWSGIServer | None = None

    def loop(self) -> None:
        delay = FIRST_RETRY
        while not self.stopping.is_set():
            server = BoundedWSGIServer((self.address.host, self.address.port), self.app, name=self.name)
            try:
                server.start()
            except OSError as error:   # gevent appends the address to strerror; the errno's text is enough
                log.warning(f"{self.name} http server cannot listen; retrying", extra={
                    "addr": str(self.address), "error": os.strerror(error.errno) if error.errno else str(error),
                    "retry_in": f"{delay:g}s"})
                if self.stopping.wait(delay):
                    return
                delay = min(delay * 2, MAX_RETRY)
                continue
            self.server = server
            log.info(f"{self.name} http server listening", extra={"addr": str(self.address)})
            self.stopping.wait()
            return

    def stop(self) -> None:
        self.stopping.set()
        if self.server is not None:
            self.server.stop(timeout=5)
            log.info(f"{self.name} http server stopped", extra={"addr": str(self.address)})
