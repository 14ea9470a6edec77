"""Names that end up in Docker tags, environment variables and file names.

Names are validated, never sanitized: a bad name is an error the operator sees.
Light on purpose (only ``re`` and relay.quoting): the secret commands use it too.
A rejected name is quoted short, whatever its length or type; *render* says how
(relay.quoting.quote, or relay.quoting.show for a template's messages, which
write values as YAML does).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from relay.quoting import quote

Render = Callable[[object], str]   # how a rejected name is quoted in the message

MAX_NAME_LENGTH = 63
_FUNCTION_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*", re.ASCII)
_SECRET_NAME = re.compile(r"[a-z0-9_-](?:[a-z0-9._-]*[a-z0-9_-])?", re.ASCII)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)


def function_name_problem(name: object, *, render: Render = quote) -> str | None:
    """Why *name* is not a valid function name, or None when it is."""
    if not isinstance(name, str) or not _FUNCTION_NAME.fullmatch(name):
        return (f"{render(name)} is not a valid function name: use lowercase letters, digits, '.', '_' and '-', "
                f"starting with a letter or digit")
    if len(name) > MAX_NAME_LENGTH:
        return f"{render(name)} is not a valid function name: it is longer than {MAX_NAME_LENGTH} characters"
    if name.endswith("."):
        return f"{render(name)} is not a valid function name: it ends with a dot"
    return None


def secret_name_problem(name: object, *, render: Render = quote) -> str | None:
    """Why *name* is not a valid secret name, or None when it is."""
    if not isinstance(name, str) or not _SECRET_NAME.fullmatch(name):
        return (f"{render(name)} is not a valid secret name: use lowercase letters, digits, '.', '_' and '-', "
                f"not starting or ending with '.'")
    if len(name) > MAX_NAME_LENGTH:
        return f"{render(name)} is not a valid secret name: it is longer than {MAX_NAME_LENGTH} characters"
    return None


def env_name_problem(name: object, *, render: Render = quote) -> str | None:
    """Why *name* is not a valid environment variable name, or None when it is."""
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        return (f"{render(name)} is not a valid environment variable name: use letters, digits and '_', "
                f"not starting with a digit")
    return None
