"""Who may use the console: reading on a loopback bind is open; anything else needs the console token.

The token is the secret ``console-token`` in the local secret store
(``relay secret set console-token``), which is never handed to a function
(relay.secrets.store). An operator logs in by typing it into the login
form; the console then sets a session cookie: ``<expiry>.<HMAC-SHA256 of
it under the token>``, HttpOnly and SameSite=Strict, valid for SESSION_S.
Every POST carries a CSRF token, the HMAC of the session under the token
with another label, in a hidden field. Changing the token ends every
session. Every comparison of a secret goes through hmac.compare_digest.

Reading (every GET) needs the session too when the console listens on
anything but a loopback address; such a bind without a token set is
refused at start (``check_bind``). Every action (redrive, purge, replay)
needs the session and the CSRF token, on any bind.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import time
from collections.abc import Callable

from relay.config import ListenAddress
from relay.errors import ConsoleError, SecretError
from relay.secrets.store import CONSOLE_TOKEN, SecretProvider

SESSION_COOKIE = "relay_console"
SESSION_S = 12 * 3600


def is_loopback(host: str) -> bool:
    """Whether *host* (a listen address's host; "" is every interface) reaches only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def console_token(secrets: SecretProvider) -> str | None:
    """The console token from the secret store, or None when it is not set (or cannot be read)."""
    try:
        return secrets.get(CONSOLE_TOKEN)
    except SecretError:
        return None


def check_bind(address: ListenAddress, token: str | None, variable: str = "CONSOLE_ADDR") -> None:
    """ConsoleError (one line) when *address* is not loopback and no token is set."""
    if token is None and not is_loopback(address.host):
        where = address.host or "every interface"
        raise ConsoleError(f"{variable}={address} listens on {where}, which is not a loopback address, and no console "
                           f"token is set: set one with 'relay secret set {CONSOLE_TOKEN}', or listen on "
                           f"127.0.0.1:{address.port}")


class Auth:
    """The console's sessions and CSRF tokens under *token* (None: nobody can log in)."""

    def __init__(self, token: str | None, *, loopback: bool, clock: Callable[[], float] = time.time) -> None:
        self.token = token
        self.open_reading = loopback
        self.clock = clock

    @property
    def can_login(self) -> bool:
        return self.token is not None

    def token_matches(self, given: str) -> bool:
        if self.token is None:
            return False
        return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self.token.encode())

    def new_session(self) -> str:
        expiry = str(int(self.clock()) + SESSION_S)
        return f"{expiry}.{self._sign('session', expiry)}"

    def session_valid(self, cookie: str | None) -> bool:
        if self.token is None or not cookie:
            return False
        expiry, _, signature = cookie.partition(".")
        if not (expiry.isascii() and expiry.isdigit() and len(expiry) <= 12):
            return False
        return hmac.compare_digest(signature, self._sign("session", expiry)) and int(expiry) > self.clock()

    def csrf(self, cookie: str) -> str:
        """The CSRF token that goes with the session *cookie*."""
        return self._sign("csrf", cookie)

    def csrf_valid(self, cookie: str | None, given: str | None) -> bool:
        if not self.session_valid(cookie) or not given or cookie is None:
            return False
        return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self.csrf(cookie).encode())

    def _sign(self, label: str, value: str) -> str:
        assert self.token is not None
        return hmac.new(self.token.encode(), f"{label}:{value}".encode(), hashlib.sha256).hexdigest()
