"""The deploy key: one ed25519 key pair in OpenSSH format.

``relay git keygen`` is the only writer. The private key goes to
/var/lib/relay/ssh/id_ed25519 (directory 0700, file 0600, written
atomically, owned by the state directory's owner even when root runs
keygen); its public half goes next to it as id_ed25519.pub (0644), which
is what the operator registers as a read-only deploy key and what ``relay git
status`` fingerprints. Nothing here ever prints or logs the private key.
"""

from __future__ import annotations

import base64
import hashlib
import socket
from typing import TYPE_CHECKING

from relay.errors import DeployKeyError, reason
from relay.files import private_directory, write_atomically

if TYPE_CHECKING:
    from relay.gitsync.layout import Layout


def generate_key(layout: Layout, force: bool = False) -> str:
    """Write a new key pair; return the public key line. Refuses to replace a key unless *force*."""
    if layout.key.exists() and not force:
        raise DeployKeyError(
            f"a deploy key already exists at {layout.key}; keeping it. Use --force to replace it "
            f"(the old public key then stops working wherever it is registered)")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    line = f"{public.decode()} relay@{socket.gethostname()}"
    owner = layout.owner
    try:
        private_directory(layout.ssh_dir, owner)
        write_atomically(layout.key, private, mode=0o600, owner=owner)
        write_atomically(layout.public_key, f"{line}\n".encode(), mode=0o644, owner=owner)
    except OSError as error:
        raise DeployKeyError(f"cannot write the deploy key to {layout.ssh_dir}: {reason(error)}") from None
    return line


def public_key_line(layout: Layout) -> str | None:
    """The public key line, or None when there is no key pair."""
    try:
        return layout.public_key.read_text().strip() or None
    except FileNotFoundError:
        return None


def fingerprint(public_line: str) -> str:
    """The SHA256 fingerprint of an OpenSSH public key line, as ssh-keygen -l prints it."""
    blob = base64.b64decode(public_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
