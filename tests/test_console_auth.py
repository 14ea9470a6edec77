"""The console's auth (relay.console.auth): loopback, sessions, CSRF, and the refusal at start."""

import pytest

from relay.config import ListenAddress, load_config
from relay.console.auth import Auth, check_bind, is_loopback
from relay.console.server import console_site
from relay.errors import ConsoleError
from relay.secrets.store import FileSecretStore


class Clock:
    now = 1_000_000.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True),
                                                ("localhost", True), ("", False), ("0.0.0.0", False),
                                                ("10.0.0.1", False), ("example.com", False), ("::", False)])
def test_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_sessions_are_signed_with_the_token_and_expire():
    clock = Clock()
    auth = Auth("secret", loopback=True, clock=clock)
    cookie = auth.new_session()
    assert auth.session_valid(cookie)
    expiry, _, signature = cookie.partition(".")
    assert not auth.session_valid(f"{int(expiry) + 1}.{signature}")        # a longer life is not signed
    assert not auth.session_valid(cookie[:-1] + ("0" if cookie[-1] != "0" else "1"))
    assert not Auth("another", loopback=True, clock=clock).session_valid(cookie)   # a new token ends sessions
    assert not auth.session_valid("") and not auth.session_valid(None) and not auth.session_valid("x.y")
    clock.now += 12 * 3600 + 1
    assert not auth.session_valid(cookie)


def test_csrf_tokens_go_with_their_session():
    auth = Auth("secret", loopback=True)
    one, two = auth.new_session(), Auth("secret", loopback=True, clock=lambda: 5e9).new_session()
    assert auth.csrf_valid(one, auth.csrf(one))
    assert not auth.csrf_valid(one, auth.csrf(two)) and not auth.csrf_valid(one, "") and not auth.csrf_valid(one, None)
    assert not auth.csrf_valid(None, auth.csrf(one))


def test_without_a_token_nobody_logs_in():
    auth = Auth(None, loopback=True)
    assert not auth.can_login and not auth.token_matches("") and not auth.session_valid("1.2")


def test_a_public_bind_without_a_token_is_refused_in_one_line(tmp_path):
    check_bind(ListenAddress(host="127.0.0.1", port=8080), None)
    check_bind(ListenAddress(host="", port=8080), "token")
    with pytest.raises(ConsoleError) as refused:
        console_site(None, stream="s", group="g", address=ListenAddress(host="", port=8080),
                     secrets=FileSecretStore(tmp_path / "secrets"), functions=list, max_event_bytes=1)
    assert str(refused.value) == (
        "CONSOLE_ADDR=:8080 listens on every interface, which is not a loopback address, and no console token is "
        "set: set one with 'relay secret set console-token', or listen on 127.0.0.1:8080")


def test_console_addr_is_read_and_empty_is_off():
    base = {"REDIS_URI": "127.0.0.1:6379", "REDIS_STREAM": "s", "REDIS_GROUP": "g"}
    assert load_config(base, hostname="h").console_addr is None
    assert load_config({**base, "CONSOLE_ADDR": ""}, hostname="h").console_addr is None
    assert load_config({**base, "CONSOLE_ADDR": "127.0.0.1:8080"}, hostname="h").console_addr == ListenAddress(
        host="127.0.0.1", port=8080)
