"""Host keys, trusted on first use and pinned in Relay's own known_hosts.

Relay never reads the system's or the operator's known_hosts and never runs
ssh-keyscan. Before git connects, ``verify_host`` opens one SSH handshake
with paramiko (the handshake proves the server holds the key it shows):

* no pin for the host yet: the key is trusted, reported as
  ``Trusted new host <host> (fingerprint SHA256:…)`` and appended to
  /var/lib/relay/ssh/known_hosts (0600, rewritten atomically);
* a pin exists: the server is asked for a key of the pinned type(s) only,
  and anything but the pinned key fails the sync with a man-in-the-middle
  warning. A pin is never replaced here: the operator edits the file.

git's own ssh then runs with StrictHostKeyChecking=yes against the same
file, so it accepts nothing this check did not pin.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import paramiko

from relay.errors import GitSyncError, HostKeyError, reason
from relay.files import private_directory, write_atomically

if TYPE_CHECKING:
    from paramiko.pkey import PKey

    from relay.gitsync.layout import Layout
    from relay.gitsync.source import SshUrl

CONNECT_TIMEOUT = 15.0  # seconds, for the TCP connection and for the handshake each

# paramiko logs a failed handshake at ERROR on its own logger; the error reaches the operator anyway.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

# The host key algorithms that prove a pinned key of each type.
_ALGORITHMS = {"ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")}


def key_fingerprint(key: PKey) -> str:
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def verify_host(url: SshUrl, layout: Layout, report: Callable[[str], None]) -> None:
    """Pin the host of *url* on first contact, else check it against its pin; HostKeyError on a mismatch."""
    name = url.known_hosts_name
    pinned = _pins(layout, name)
    key = fetch_host_key(url.host, url.connect_port, name, pinned)
    if key is None:
        raise HostKeyError(_changed(layout, name, f"it offers none of the pinned key types, pinned: {_listed(pinned)}"))
    if not pinned:
        _pin(layout, name, key)
        report(f"Trusted new host {name} (fingerprint {key_fingerprint(key)})")
        return
    if any(pin.get_name() == key.get_name() and pin.asbytes() == key.asbytes() for pin in pinned):
        return
    raise HostKeyError(_changed(layout, name, f"it now presents {key.get_name()} {key_fingerprint(key)}, "
                                              f"pinned: {_listed(pinned)}"))


def fetch_host_key(host: str, port: int, name: str, pinned: Sequence[PKey] = ()) -> PKey | None:
    """The key the server at *host*:*port* proves it holds. With pins, only a key of the pinned
    type(s) is asked for, and None means the server offers none of them."""
    try:
        sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
    except OSError as error:
        raise GitSyncError(f"cannot connect to {name}: {reason(error)}") from None
    transport = paramiko.Transport(sock)
    try:
        if pinned:
            options = transport.get_security_options()
            wanted = {algorithm for pin in pinned for algorithm in _ALGORITHMS.get(pin.get_name(), (pin.get_name(),))}
            usable = [algorithm for algorithm in options.key_types if algorithm in wanted]
            if not usable:
                raise GitSyncError(f"cannot verify {name}: Relay cannot check its pinned key type(s) "
                                   f"{', '.join(sorted({pin.get_name() for pin in pinned}))}")
            options.key_types = usable
        try:
            transport.start_client(timeout=CONNECT_TIMEOUT)
        except paramiko.ssh_exception.IncompatiblePeer as error:
            if pinned and "host key" in str(error):
                return None
            raise GitSyncError(f"SSH handshake with {name} failed: {error}") from None
        except (paramiko.SSHException, EOFError, OSError) as error:
            raise GitSyncError(f"SSH handshake with {name} failed: {error or type(error).__name__}") from None
        return transport.get_remote_server_key()
    finally:
        transport.close()
        sock.close()


def _pins(layout: Layout, name: str) -> list[PKey]:
    try:
        keys = paramiko.HostKeys(str(layout.known_hosts))
    except FileNotFoundError:
        return []
    except (OSError, paramiko.SSHException, ValueError) as error:
        raise GitSyncError(f"cannot read {layout.known_hosts}: {error}") from None
    found = keys.lookup(name)
    return list(found.values()) if found else []


def _pin(layout: Layout, name: str, key: PKey) -> None:
    try:
        owner = layout.owner
        private_directory(layout.ssh_dir, owner)
        try:
            existing = layout.known_hosts.read_bytes()
        except FileNotFoundError:
            existing = b""
        if existing and not existing.endswith(b"\n"):
            existing += b"\n"
        write_atomically(layout.known_hosts,
                         existing + f"{name} {key.get_name()} {key.get_base64()}\n".encode(), mode=0o600,
                         owner=owner)
    except OSError as error:
        raise GitSyncError(f"cannot write {layout.known_hosts}: {reason(error)}") from None


def _changed(layout: Layout, name: str, detail: str) -> str:
    return (f"WARNING: the host key of {name} has changed ({detail}). Someone may be intercepting "
            f"the connection (a man-in-the-middle attack), or the server's key was rotated. Nothing was "
            f"synced and the pin was kept. If the change is expected, remove the {name} line from "
            f"{layout.known_hosts} and sync again.")


def _listed(keys: Sequence[PKey]) -> str:
    return ", ".join(f"{key.get_name()} {key_fingerprint(key)}" for key in keys)
