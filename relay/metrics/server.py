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

from typing import TYPE_CHECKING

import bottle
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from relay.http_server import RetriedListener

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from relay.config import ListenAddress


def metrics_app(registry: CollectorRegistry) -> bottle.Bottle:
    app = bottle.Bottle()

    @app.get("/metrics")
    def metrics() -> bytes:
        bottle.response.content_type = CONTENT_TYPE_LATEST
        return generate_latest(registry)

    return app


def metrics_server(address: ListenAddress, registry: CollectorRegistry) -> RetriedListener:
    """The metrics endpoint as a side loop of ``relay start``."""
    return RetriedListener("Metrics", address, metrics_app(registry))
