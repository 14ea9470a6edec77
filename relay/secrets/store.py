"""Secrets: the provider the runner reads from, and the local file store behind it.

The runner needs one thing from a secret backend: the value of a reference,
asked for right before each invocation (``SecretProvider.get``). That is the
whole contract, so another backend (Vault, a secrets API) plugs in without
touching templates or the runner, and a rotated value is used by the very
next invocation with no rebuild, restart or fingerprint change.

``FileSecretStore`` keeps one file per secret under /var/lib/relay/secrets:
the directory is made with mode 0700 on the first write, an existing one is
narrowed to 0700 whenever a store is opened (``relay start`` and every
``relay secret`` command), and each file is written atomically (temporary
file, fsync, rename) with mode 0600. The directory and the files belong to
the owner of the directory above the store (the state directory) even when
root writes them: the service, running as that owner, must read what ``sudo
relay secret set`` stored (see relay.files). It also lists, writes and
removes secrets for ``relay secret``.

The secret named by ``relay git set --webhook-secret`` signs webhook
deliveries; it belongs to Relay, and ``environment`` never hands it to a
function, whatever the template says (the function loader refuses such a
template too; see relay.functions.function). Which secret that is, the store
is told (*webhook_secret*) by the part that reads the git source. The
console's login token, ``console-token``, is refused the same way.

Values never appear in an error message, a log line or a repr; errors name
the reference only. This module stays light (no YAML, gevent, Docker or
Redis) because the admin commands import it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import Protocol

from relay.config import STATE_DIR
from relay.errors import SecretError, reason
from relay.files import owner_of, private_directory, sync_directory, write_atomically
from relay.names import secret_name_problem

SECRETS_DIR = Path(STATE_DIR) / "secrets"
MAX_VALUE_BYTES = 64 * 1024  # far below what one environment variable may hold
WEBHOOK_REFUSAL = ("secret {name!r} is the git webhook's HMAC secret (relay git set --webhook-secret) "
                   "and is never handed to a function")
CONSOLE_TOKEN = "console-token"   # the console's login token (relay.console.auth); never handed to a function
CONSOLE_REFUSAL = ("secret {name!r} is the console's login token (relay secret set console-token) "
                   "and is never handed to a function")


class SecretProvider(Protocol):
    """What the runner needs from a secret backend.

    A backend may also have ``webhook_secret()``, the name of the secret it
    keeps for the webhook (or None): that one is never handed to a function.
    """

    def get(self, name: str) -> str:
        """The value of secret *name*; SecretError naming *name* (never a value) if it cannot."""


class _Settings(Protocol):
    """What ``environment`` reads of a template (relay.functions.Template)."""

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def secrets(self) -> Mapping[str, str]: ...   # variable -> secret name


class Configured(Protocol):
    """What ``environment`` reads of a function (relay.functions.Function): its template's env and secrets.

    A Protocol, not the class: relay.functions imports this module.
    """

    @property
    def template(self) -> _Settings: ...


def value_problem(data: bytes) -> str | None:
    """Why *data* (bytes) cannot be a secret's value, or None when it can. Never quotes it."""
    if not data:
        return "the value is empty"
    if b"\0" in data:
        return "the value contains a NUL byte, which an environment variable cannot hold"
    if len(data) > MAX_VALUE_BYTES:
        return f"the value is larger than {MAX_VALUE_BYTES // 1024} KiB"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "the value is not UTF-8 text"
    return None


class FileSecretStore:
    """The local provider: one file per secret in *directory*."""

    def __init__(self, directory: str | os.PathLike[str] = SECRETS_DIR,
                 webhook_secret: Callable[[], str | None] | None = None) -> None:
        """Opening the store narrows an existing directory to 0700 (an older Relay, or someone
        by hand, may have left it readable by others); one it cannot change is left as it is.
        *webhook_secret()* names the secret that signs webhook deliveries, or None."""
        self.directory = Path(directory)
        self._webhook_secret = webhook_secret
        with suppress(FileNotFoundError, NotADirectoryError, PermissionError):
            if os.stat(self.directory).st_mode & 0o077:
                os.chmod(self.directory, 0o700)

    def webhook_secret(self) -> str | None:
        """The name of the secret that signs webhook deliveries, or None; asked at every call."""
        return self._webhook_secret() if self._webhook_secret is not None else None

    def get(self, name: str) -> str:
        path = self._path(name)
        try:
            with open(path, "rb") as file:
                data = file.read(MAX_VALUE_BYTES + 1)
        except FileNotFoundError:
            raise SecretError(f"secret {name!r} is not in the secret store") from None
        except OSError as error:
            raise SecretError(f"secret {name!r} cannot be read: {reason(error)}") from None
        problem = value_problem(data)
        if problem:
            raise SecretError(f"secret {name!r} cannot be used: {problem}")
        return data.decode("utf-8")

    def names(self) -> list[str]:
        """The stored secrets' names, sorted; none when the directory does not exist yet."""
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return []
        except OSError as error:
            raise SecretError(f"cannot list {self.directory}: {reason(error)}") from None
        # Temporary files of a write in progress start with a dot, which no secret name does.
        return sorted(entry.name for entry in entries
                      if secret_name_problem(entry.name) is None and entry.is_file())

    def set(self, name: str, value: bytes) -> None:
        """Store *value* (bytes, kept exactly as given) as secret *name*, replacing it atomically."""
        path = self._path(name)
        problem = value_problem(value)
        if problem:
            raise SecretError(f"{problem}; secret {name!r} was not changed")
        owner = owner_of(self.directory.parent)
        try:
            if not self.directory.exists() or owner is not None:  # a file in its place fails: "Not a directory"
                private_directory(self.directory, owner)
            write_atomically(path, value, mode=0o600, owner=owner)
        except OSError as error:
            raise SecretError(f"cannot store secret {name!r} in {self.directory}: {reason(error)}") from None

    def remove(self, name: str) -> None:
        path = self._path(name)
        try:
            os.unlink(path)
        except FileNotFoundError:
            raise SecretError(f"secret {name!r} is not in the secret store") from None
        except OSError as error:
            raise SecretError(f"cannot remove secret {name!r}: {reason(error)}") from None
        sync_directory(self.directory)

    def _path(self, name: str) -> Path:
        problem = secret_name_problem(name)
        if problem:
            raise SecretError(problem)
        return self.directory / name


def environment(function: Configured, provider: SecretProvider) -> dict[str, str]:
    """The variables of one invocation: the template's env as written, then its resolved secrets.

    The webhook's secret is refused even when the template was loaded before
    ``relay git set --webhook-secret`` named it.
    """
    template = function.template
    variables = dict(template.env)
    webhook = provider.webhook_secret() if template.secrets and hasattr(provider, "webhook_secret") else None
    for variable, reference in template.secrets.items():
        if reference == CONSOLE_TOKEN:
            raise SecretError(f"cannot set {variable}: {CONSOLE_REFUSAL.format(name=reference)}")
        if reference == webhook:
            raise SecretError(f"cannot set {variable}: {WEBHOOK_REFUSAL.format(name=reference)}")
        try:
            variables[variable] = provider.get(reference)
        except SecretError as error:
            raise SecretError(f"cannot set {variable}: {error}") from None
    return variables
