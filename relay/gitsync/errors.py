"""The git sync's exceptions, all under RelayError."""

from relay.errors import RelayError


class GitSyncError(RelayError):
    """A ``relay git`` command cannot do what it was asked."""


class SourceError(GitSyncError):
    """The git source is invalid, missing or its stored config is corrupt."""


class DeployKeyError(GitSyncError):
    """The deploy key is missing, or exists where keygen was told not to overwrite it."""


class HostKeyError(GitSyncError):
    """A host's key does not match the key pinned in Relay's known_hosts."""


class WebhookBindError(RelayError):
    """The webhook server cannot listen on GIT_WEBHOOK_ADDR; fatal at start."""
