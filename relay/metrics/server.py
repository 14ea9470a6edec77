"""GET /metrics on METRICS_ADDR: the Prometheus registry in text format.

Operationally isolated: a port that cannot be bound is logged and retried
with backoff (never fatal), a failing scrape never touches consumption, and
the server stops gracefully on shutdown. Idle or slow clients are bounded
by relay.http_server: a connection cap, a 10 s request deadline, and room
kept for new connections by closing the oldest trickling one. A scrape
that carries a body is answered like any other, the body unread, and the
connection closes after the answer.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import bottle
from gevent.event import Event
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from relay.http_server import BoundedWSGIServer

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from relay.config import ListenAddress

log = logging.getLogger("relay.metrics.server")

FIRST_RETRY = 1.0
MAX_RETRY = 30.0


def metrics_app(registry: CollectorRegistry) -> bottle.Bottle:
    app = bottle.Bottle()

    @app.get("/metrics")
    def metrics() -> bytes:
        bottle.response.content_type = CONTENT_TYPE_LATEST
        return generate_latest(registry)

    return app


class MetricsServer:
    def __init__(self, address: ListenAddress, registry: CollectorRegistry) -> None:
        self.address = address
        self.app = metrics_app(registry)
        self.stopping = Event()
        self.server: BoundedWSGIServer | None = None

    def loop(self) -> None:
        delay = FIRST_RETRY
        while not self.stopping.is_set():
            server = BoundedWSGIServer((self.address.host, self.address.port), self.app, name="Metrics")
            try:
                server.start()
            except OSError as error:
                log.warning("Metrics server cannot listen; retrying", extra={
                    "addr": str(self.address), "error": error.strerror or str(error), "retry_in": f"{delay:g}s"})
                if self.stopping.wait(delay):
                    return
                delay = min(delay * 2, MAX_RETRY)
                continue
            self.server = server
            log.info("Metrics http server listening", extra={"addr": str(self.address)})
            self.stopping.wait()
            return

    def stop(self) -> None:
        self.stopping.set()
        if self.server is not None:
            self.server.stop(timeout=5)
            log.info("Metrics http server stopped", extra={"addr": str(self.address)})
