"""``relay secret ls | set <name> | rm <name>``: manage the local secret store.

They need neither Redis nor Docker and import nothing heavy. ``set`` reads
the value from the terminal with echo off, or else all of standard input,
and stores it byte for byte (``echo`` adds a newline; ``printf`` does not).
A value is never echoed, printed or put in an error message. ``ls`` marks
the secret that signs webhook deliveries (``relay git set --webhook-secret``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from relay.errors import SecretError
from relay.gitsync.webhook_secret import secret_store
from relay.names import secret_name_problem
from relay.secrets.store import MAX_VALUE_BYTES

if TYPE_CHECKING:
    from relay.commands import Arguments
    from relay.secrets.store import FileSecretStore


def run(args: Arguments, store: FileSecretStore | None = None, stdin: TextIO | None = None) -> int:
    """Run one ``relay secret`` command from docopt's *args*; return the exit code."""
    store = secret_store() if store is None else store
    stdin = sys.stdin if stdin is None else stdin
    name = args["<name>"]
    command = next(word for word in ("ls", "set", "rm") if args[word])
    try:
        if name is not None and secret_name_problem(name):  # before anyone types a value
            raise SecretError(secret_name_problem(name))
        if command == "ls":
            webhook = store.webhook_secret()
            print("\n".join(["NAME", *(f"{secret}  (webhook secret: never handed to a function)"
                                        if secret == webhook else secret for secret in store.names())]))
        elif command == "set":
            store.set(name, read_value(name, stdin))
        else:
            store.remove(name)
    except SecretError as error:
        print(f"relay secret {command}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\nrelay secret {command}: interrupted; nothing was changed", file=sys.stderr)
        return 130
    return 0


def read_value(name: str, stdin: TextIO | None) -> bytes:
    """The value to store, as bytes: typed without echo on a terminal, else all of *stdin*."""
    if stdin is None or stdin.closed:
        return b""
    if stdin.isatty():
        import getpass

        try:
            return getpass.getpass(f"Value of secret {name}: ").encode("utf-8")
        except EOFError:
            return b""
    return stdin.buffer.read(MAX_VALUE_BYTES + 1)  # one byte more tells "too large" apart
