"""The local secret store: one file per secret under /var/lib/relay/secrets.

Values are read at the moment of each invocation, so a rotated secret is
used by the very next invocation without a rebuild or restart.
"""

from pathlib import Path

from relay.config import STATE_DIR
from relay.errors import RelayError
from relay.functions import secret_name_problem

SECRETS_DIR = Path(STATE_DIR) / "secrets"


class SecretError(RelayError):
    """A secret is missing, unreadable or has an invalid name."""


class FileSecretStore:
    """The secret provider: ``get(name) -> str``. Another backend needs only that."""

    def __init__(self, directory=SECRETS_DIR):
        self.directory = Path(directory)

    def get(self, name):
        problem = secret_name_problem(name)
        if problem:
            raise SecretError(problem)
        try:
            return (self.directory / name).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SecretError(f"secret {name!r} is not in the secret store") from None
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else type(error).__name__
            raise SecretError(f"secret {name!r} cannot be read: {reason}") from None


def environment(function, store):
    """The variables of one invocation: the template's env, then its resolved secrets."""
    template = function.template
    variables = dict(template.env)
    for variable, reference in template.secrets.items():
        variables[variable] = store.get(reference)
    return variables
