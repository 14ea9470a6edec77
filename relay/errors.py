"""Relay's exceptions: one root, one subclass per failure domain."""


class RelayError(Exception):
    """Base class of every error Relay raises on purpose."""


class ConfigError(RelayError):
    """An environment variable is missing or has a value Relay cannot accept."""


class DependencyError(RelayError):
    """Redis or the Docker engine cannot be reached or refused a request."""


class TemplateError(RelayError):
    """A function's name, template.yaml or pattern is invalid."""


class BuildError(RelayError):
    """A function's image could not be built."""


class ExecutionError(RelayError):
    """A handler invocation failed, timed out or could not be started."""
