"""POST /github on GIT_WEBHOOK_ADDR: GitHub pushes schedule a sync.

Opt-in twice: the server starts only when GIT_WEBHOOK_ADDR is set and a
git source is configured (read once, at start); otherwise it logs why and
binds nothing. A port it cannot bind is fatal at start (WebhookBindError),
so a conflict surfaces instead of healing out of sight.

    401  a webhook secret is configured and X-Hub-Signature-256 is missing or wrong
    408  the body did not arrive in full (the client stopped sending, sent below the minimum
         rate of 1 KiB/s after 2 s, or was cut at the deadline)
    413  the body is larger than GitHub ever sends (25 MiB); a Content-Length over it is
         answered before a byte of the body is read, and the connection closes
    400  a push whose payload is not JSON
    202  a push to the configured repository and ref: a sync is scheduled
    200  anything else (pings, other events, repositories or refs, deleted refs): ignored

No sync runs in the request path: the handler only asks the coalescing
runner. The secret's value is read from the secret store on every delivery
(a rotation applies at once) and is never logged or put in a response.

Slow or idle clients are bounded by relay.http_server: a connection cap,
a 10 s deadline for each request (headers and body), a minimum body rate,
and room kept for new connections by closing the oldest trickling one, so
a signed delivery is answered while hundreds of clients trickle.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import bottle
from gevent.event import Event

from relay.coalesce import CoalescingRunner
from relay.errors import MalformedDelivery, SecretError, WebhookBindError
from relay.gitsync.delivery import SIGNATURE_HEADER, parse_payload, push_mismatch, signature_valid
from relay.gitsync.layout import Layout
from relay.gitsync.source import load_source
from relay.http_server import BoundedWSGIServer, RareWarning
from relay.secrets.store import FileSecretStore, SecretProvider

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

    from relay.config import ListenAddress
    from relay.gitsync.source import Source

log = logging.getLogger("relay.gitsync")

MAX_BODY = 25 * 1024 * 1024  # GitHub does not send larger deliveries
BODIES_IN_FLIGHT = 64 * 1024 * 1024   # bytes the deliveries being received may hold together
STOP_GRACE = 10.0            # seconds a running sync may take to finish at shutdown


def webhook_service(address: ListenAddress | None, *, layout: Layout | None = None,
                    secrets: SecretProvider | None = None, job: Callable[[], object] | None = None,
                    ) -> WebhookServer | None:
    """The webhook server, already listening; None (after logging why) when it is not enabled."""
    if address is None:
        log.info("Webhook server disabled: GIT_WEBHOOK_ADDR is not set")
        return None
    source = load_source(layout or Layout())  # a corrupt source is fatal: the operator asked for the webhook
    if source is None:
        log.warning("Webhook server disabled: no git source is configured (relay git set)",
                    extra={"addr": str(address)})
        return None
    if job is None:
        from relay.gitsync.sync_process import run_sync_process

        job = run_sync_process
    secrets = secrets or FileSecretStore()
    runner = CoalescingRunner(lambda _key: job(), _sync_failed)
    server = WebhookServer(address, webhook_app(source, secrets, runner), runner)
    server.listen()
    _warn_about_the_secret(source, secrets, address)
    return server


def _sync_failed(_key: object) -> None:
    log.exception("Git sync failed unexpectedly")


def _warn_about_the_secret(source: Source, secrets: SecretProvider, address: ListenAddress) -> None:
    if source.webhook_secret is None:
        log.warning("Webhook deliveries are not authenticated: no webhook secret is configured; "
                    "anyone who reaches the address can trigger a sync", extra={"addr": str(address)})
        return
    try:
        secrets.get(source.webhook_secret)
    except SecretError as error:
        log.warning("Webhook secret cannot be used yet; deliveries are refused until it can",
                    extra={"error": str(error)})


class BodyBudget:
    """The bytes the deliveries being received may hold together, so that many large bodies at once
    cannot grow the worker without bound; a delivery that does not fit is refused, not queued."""

    def __init__(self, total: int) -> None:
        self.total, self.used = total, 0

    def take(self, size: int) -> bool:
        if self.used + size > self.total:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used -= size


def webhook_app(source: Source, secrets: SecretProvider, runner: CoalescingRunner) -> bottle.Bottle:
    app = bottle.Bottle()
    budget = BodyBudget(BODIES_IN_FLIGHT)
    refused = RareWarning("Webhook deliveries refused: the bodies being received fill the budget",
                          counted="refused", logger=log, budget=budget.total)

    @app.post("/github")
    def github() -> bottle.HTTPResponse:
        size = _declared_size(bottle.request.environ)
        if size > MAX_BODY:
            return _answer(413, "payload too large")
        if not budget.take(size):
            refused.count()
            return _answer(503, "too many deliveries being received; try again", close=True,
                           headers={"Retry-After": "5"})
        try:
            return _deliver(bottle.request, source, secrets, runner)
        finally:
            budget.give(size)

    return app


def _deliver(request: bottle.BaseRequest, source: Source, secrets: SecretProvider,
             runner: CoalescingRunner) -> bottle.HTTPResponse:
    """Read, authenticate and act on one delivery (its body fits the budget)."""
    delivery = request.headers.get("X-GitHub-Delivery", "")
    try:
        body = _body(request.environ)
    except OSError:  # the client stopped sending, or the request deadline cut it
        return _answer(408, "request body incomplete", close=True)
    if body is None:
        return _answer(413, "payload too large")
    if source.webhook_secret is not None:
        try:
            secret = secrets.get(source.webhook_secret)
        except SecretError as error:
            log.error("Webhook delivery refused: the webhook secret cannot be read",
                      extra={"delivery": delivery, "error": str(error)})
            return _answer(500, "webhook secret unavailable")
        if not signature_valid(secret, body, request.headers.get(SIGNATURE_HEADER)):
            log.warning("Webhook delivery rejected: missing or invalid signature", extra={"delivery": delivery})
            return _answer(401, "invalid signature")
    event = request.headers.get("X-GitHub-Event", "")
    if event != "push":
        log.debug("Webhook delivery ignored", extra={"delivery": delivery, "event": event})
        return _answer(200, f"ignored: {event or 'no'} event")
    try:
        payload = parse_payload(body, request.headers.get("Content-Type"))
    except MalformedDelivery as error:
        return _answer(400, str(error))
    mismatch = push_mismatch(payload, source)
    if mismatch:
        log.info("Webhook push ignored", extra={"delivery": delivery, "reason": mismatch})
        return _answer(200, f"ignored: {mismatch}")
    log.info("Webhook push accepted; sync scheduled", extra={"delivery": delivery, "ref": payload.get("ref"),
                                                              "after": payload.get("after")})
    runner.request()
    return _answer(202, "sync scheduled")


class WebhookServer:
    def __init__(self, address: ListenAddress, app: bottle.Bottle, runner: CoalescingRunner) -> None:
        self.address = address
        self.app = app
        self.runner = runner
        self.stopping = Event()
        self.server: BoundedWSGIServer | None = None

    def listen(self) -> None:
        server = BoundedWSGIServer((self.address.host, self.address.port), self.app, name="Webhook")
        try:
            server.start()
        except OSError as error:  # gevent appends the address to strerror; the errno's text is enough
            why = os.strerror(error.errno) if error.errno else str(error)
            raise WebhookBindError(f"the webhook server cannot listen on {self.address} (GIT_WEBHOOK_ADDR): "
                                   f"{why}") from None
        self.server = server
        log.info("Webhook http server listening", extra={"addr": str(self.address)})

    def loop(self) -> None:
        self.stopping.wait()

    def stop(self) -> None:
        self.stopping.set()
        if self.server is not None:
            self.server.stop(timeout=5)
            self._stop_sync()
            log.info("Webhook http server stopped", extra={"addr": str(self.address)})

    def _stop_sync(self) -> None:
        """Take no more deliveries; let a running sync finish within STOP_GRACE, then kill it."""
        self.runner.stop()
        if not self.runner.join(STOP_GRACE):
            log.warning("Git sync still running at shutdown; stopped", extra={"waited": f"{STOP_GRACE:g}s"})
            self.runner.kill(timeout=5)


def _declared_size(environ: WSGIEnvironment) -> int:
    """The body's size as its Content-Length gives it; MAX_BODY, the most it may be, when it has none (chunked)."""
    length = environ.get("CONTENT_LENGTH") or ""
    return int(length) if length.isascii() and length.isdigit() else MAX_BODY


def _body(environ: WSGIEnvironment) -> bytes | None:
    """The request body, or None when it is larger than MAX_BODY."""
    data = environ["wsgi.input"].read(MAX_BODY + 1)
    return None if len(data) > MAX_BODY else data


def _answer(status: int, text: str, close: bool = False,
            headers: Mapping[str, str] | None = None) -> bottle.HTTPResponse:
    headers = {"Content-Type": "text/plain; charset=utf-8", **({"Connection": "close"} if close else {}),
               **(headers or {})}
    return bottle.HTTPResponse(text + "\n", status=status, headers=headers)
