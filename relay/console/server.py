"""Serving the console: from ``relay start`` (CONSOLE_ADDR, a side loop) or alone (``relay console``).

Both build the same app (``console_site``) on the same BoundedWSGIServer as
the metrics endpoint and the webhook (relay.http_server: a connection cap, a
request deadline, room kept for new connections), so a slow browser never
holds the worker. ``console_site`` refuses, with one line, a non-loopback
address when no console token is set (relay.console.auth). In ``relay
start`` a port that cannot be bound is retried with backoff, as the metrics
server's is, never fatal; ``relay console`` stops with one line instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import redis

from relay.console.app import Site, console_app
from relay.console.auth import Auth, check_bind, console_token, is_loopback
from relay.console.replays import Replays
from relay.errors import ConsoleError
from relay.http_server import BoundedWSGIServer, RetriedListener

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

    from relay.config import ListenAddress
    from relay.functions import ActiveFunction
    from relay.secrets.store import SecretProvider


def console_site(client: redis.Redis, *, stream: str, group: str, address: ListenAddress, secrets: SecretProvider,
                 functions: Callable[[], Sequence[ActiveFunction]], max_event_bytes: int,
                 named: str = "CONSOLE_ADDR") -> WSGIApplication:
    """The console's app for *address*; ConsoleError when *address* (the value of *named*) is not loopback
    and no token is set."""
    token = console_token(secrets)
    check_bind(address, token, named)
    auth = Auth(token, loopback=is_loopback(address.host))
    replays = Replays(client, stream, functions, max_event_bytes)
    return console_app(Site(client=client, stream=stream, group=group, auth=auth, replays=replays))


def listen(address: ListenAddress, app: WSGIApplication) -> BoundedWSGIServer:
    """The server, listening now; ConsoleError (one line) when the address cannot be bound."""
    server = BoundedWSGIServer((address.host, address.port), app, name="Console")
    try:
        server.start()
    except OSError as error:
        raise ConsoleError(f"cannot listen on {address}: {error.strerror or error}") from None
    return server


def console_server(address: ListenAddress, app: WSGIApplication) -> RetriedListener:
    """The console as a side loop of ``relay start`` (its app from ``console_site``)."""
    return RetriedListener("Console", address, app)
