"""The webhook's secret: named in the git source, kept in the secret store.

``relay git set --webhook-secret <name>`` names a secret of the store that
signs webhook deliveries; it belongs to Relay and is never handed to a
function. The store (relay.secrets) knows nothing of git: ``secret_store``
tells it which secret that is, read from the git source next to it
(<state>/git/source.json) every time, so a ``relay git set`` made after the
start counts at once.

Light, like the admin commands that import it: no git, paramiko or gevent.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from relay.config import STATE_DIR
from relay.errors import SourceError
from relay.gitsync.layout import Layout
from relay.gitsync.source import load_source
from relay.secrets.store import SECRETS_DIR, FileSecretStore


def webhook_secret_name(state_dir: str | os.PathLike[str] = STATE_DIR) -> str | None:
    """The webhook's secret name in the git source under *state_dir*, or None (none configured,
    or a source file so broken that neither git sync nor the webhook uses it)."""
    try:
        source = load_source(Layout(state_dir=Path(state_dir)))
    except SourceError:
        return None
    return source.webhook_secret if source is not None else None


def secret_store(directory: str | os.PathLike[str] = SECRETS_DIR) -> FileSecretStore:
    """The FileSecretStore in *directory* that knows the webhook's secret from the git source next to it."""
    return FileSecretStore(directory, webhook_secret=partial(webhook_secret_name, Path(directory).parent))
