"""The HTTP server under the metrics endpoint and the webhook: gevent.pywsgi with limits.

A client that connects and sends nothing, or sends a request a byte at a
time, must not take the server or the worker with it. Three limits:

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
- **Shedding the idle under pressure.** When the cap is reached, the server
  does not leave new connections queued in the kernel's backlog until a
  deadline frees a slot (a scrape would wait up to 10 s). It shuts down the
  connection that has waited longest without sending a complete request
  head, and accepts the next one as soon as that slot is free. A connection
  whose request is being handled is never shed. So 300 idle sockets cost 32
  descriptors, and a scrape or a delivery among them is answered at once.
"""

import logging
import resource
import socket
import time

from gevent.pool import Pool
from gevent.pywsgi import WSGIHandler, WSGIServer

log = logging.getLogger("relay.http")

READ_TIMEOUT = 10.0    # seconds for a whole request, from the first wait to the answer
MAX_CONNECTIONS = 64   # the cap whatever the file limit
MIN_CONNECTIONS = 4
FILE_LIMIT_SHARE = 8   # one server takes at most 1/8 of the soft RLIMIT_NOFILE
SHED_WARNING_INTERVAL = 60.0


def connection_cap(soft_limit=None):
    """The number of connections one server keeps open at most, from the open-file soft limit."""
    if soft_limit is None:
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_limit == resource.RLIM_INFINITY or soft_limit < 0:
        return MAX_CONNECTIONS
    return max(MIN_CONNECTIONS, min(MAX_CONNECTIONS, soft_limit // FILE_LIMIT_SHARE))


class BoundedWSGIServer(WSGIServer):
    """A WSGIServer with a connection cap, a per-request deadline and shedding of idle connections.

    *name* ("Metrics", "Webhook") prefixes the warning logged when connections are shed.
    """

    def __init__(self, address, app, *, name, cap=None, read_timeout=READ_TIMEOUT):
        self.cap = cap or connection_cap()
        super().__init__(address, app, log=None, error_log=None, spawn=Pool(self.cap),
                         handler_class=_Connection)
        self.name = name
        self.read_timeout = read_timeout
        self.waiting = {}  # sockets of connections waiting for a request head, oldest first
        self._shed_since_warning = 0
        self._last_warning = None
        self.full = self._full_after_shedding  # gevent set it to the pool's full(); same hook, our rule

    def do_handle(self, sock, address):
        """A connection just accepted waits for its request from now on (before its greenlet runs)."""
        self.waiting[sock] = None
        super().do_handle(sock, address)

    def handle(self, sock, address):
        try:
            super().handle(sock, address)
        finally:
            self.waiting.pop(sock, None)

    def _full_after_shedding(self):
        """Called before each accept. At the cap, shed the oldest idle connection: its slot
        frees when its greenlet ends, and the pool then restarts accepting."""
        if not self.pool.full():
            return False
        if self.waiting:
            oldest = next(iter(self.waiting))
            del self.waiting[oldest]
            cut(oldest)
            self._warn_about_shedding()
        return True

    def _warn_about_shedding(self):
        self._shed_since_warning += 1
        now = time.monotonic()
        if self._last_warning is None or now - self._last_warning >= SHED_WARNING_INTERVAL:
            log.warning(f"{self.name} http server at its connection limit; closing connections that sent no request",
                        extra={"limit": self.cap, "closed": self._shed_since_warning})
            self._last_warning, self._shed_since_warning = now, 0


class _Connection(WSGIHandler):
    """One client connection: each request runs under the server's deadline, and the
    connection counts as waiting (sheddable) until its request head is read."""

    def handle_one_request(self):
        server, sock = self.server, self.socket
        deadline = server.loop.timer(server.read_timeout)
        deadline.start(cut, sock)
        server.waiting.setdefault(sock, None)
        try:
            return super().handle_one_request()
        finally:
            deadline.close()
            server.waiting.pop(sock, None)

    def read_request(self, raw_requestline):
        try:
            return super().read_request(raw_requestline)
        finally:
            self.server.waiting.pop(self.socket, None)

    def _handle_client_error(self, ex):
        if isinstance(ex, OSError):  # the peer went away or was cut: close without a word
            return None
        return super()._handle_client_error(ex)


def cut(sock):
    """Shut *sock* down: a blocked read returns end-of-stream, a write fails, and the
    connection ends the ordinary way (closed by its handler, nothing logged)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
