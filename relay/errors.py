"""Relay's exceptions: one root, one subclass per failure domain.

Every exception Relay raises on purpose is a RelayError, so a caller that
must not crash (the start, a command, a dispatch) catches one class:

    RelayError
        ConfigError             an environment variable Relay cannot accept
        DependencyError         Redis or the Docker engine
        ReplyTooLarge           a Redis reply over what this worker holds
        DurationError           a Go duration string
        TemplateError           a function's name, template or pattern
            MissingTemplate
            InvalidTemplate
                TemplateTooLarge
        LinkOutside             a function file reached through a link out of it
        BuildError              a function's image
        ExecutionError          one invocation
            DeadlineExceeded
            ProtocolBreak
            ContainerExited
            ImageMissing
        SecretError             the secret store
        DeadLetterError         a ``relay dlq`` command
        StateError              the state database
        UnknownFunction         a name the state database does not know
        GitSyncError            a ``relay git`` command
            SourceError
            DeployKeyError
            HostKeyError
        WebhookError            the git webhook
            WebhookBindError
            MalformedDelivery
        ConsoleError            the console cannot be served as configured

``reason(error)`` turns any exception into the short phrase Relay's messages
end with. Standard library only: everything imports this module, the admin
commands included.
"""

MAX_LISTED = 20  # the problems an InvalidTemplate lists; the others are counted


class RelayError(Exception):
    """Base class of every error Relay raises on purpose."""


class ConfigError(RelayError):
    """An environment variable is missing or has a value Relay cannot accept."""


class DependencyError(RelayError):
    """Redis or the Docker engine cannot be reached or refused a request."""


class ReplyTooLarge(RelayError):
    """A Redis reply grew past the worker's cap; the connection was dropped with the rest unread."""


class DurationError(RelayError):
    """A string that Go's time.ParseDuration would reject."""


# --- functions ------------------------------------------------------------------------


class TemplateError(RelayError):
    """A function's name, template.yaml or pattern is invalid."""


class MissingTemplate(TemplateError):
    """The directory has no template.yaml (yet): not a function, or not ready."""


class InvalidTemplate(TemplateError):
    """A template, pattern or function file with one or more problems, all counted, the first MAX_LISTED listed."""

    def __init__(self, source, problems):
        # *problems*: relay.functions.problems.Problem records (field path, message, line, file),
        # each printed as "line 5: events[0].pattern: ..."
        self.source = source
        self.problems = tuple(problems)
        count = len(self.problems)
        lines = [f"{source}: {count} problem{'s' if count != 1 else ''}"]
        lines += [f"  {problem}" for problem in self.problems[:MAX_LISTED]]
        if count > MAX_LISTED:
            lines.append(f"  ... and {count - MAX_LISTED} more")
        super().__init__("\n".join(lines))


class TemplateTooLarge(InvalidTemplate):
    """A template past a limit (bytes, expanded nodes, nesting depth): refused before it is built."""

    def __init__(self, source, problem):  # *problem*: the one Problem that says which limit
        TemplateError.__init__(self, f"{source}: {problem}")
        self.source = source
        self.problems = (problem,)


class LinkOutside(RelayError):
    """A file of a function is, or is reached through, a link that leads outside the function."""


# --- running them ---------------------------------------------------------------------


class BuildError(RelayError):
    """A function's image could not be built."""


class ExecutionError(RelayError):
    """A handler invocation failed, timed out or could not be started."""


class DeadlineExceeded(ExecutionError):
    """The invocation's deadline passed while Relay was waiting on the engine."""


class ProtocolBreak(ExecutionError):
    """A warm container wrote something its protocol does not allow."""


class ContainerExited(ExecutionError):
    """A warm container's process ended."""


class ImageMissing(ExecutionError):
    """The function's image is gone from the engine: the invocation is not charged, the image is rebuilt."""

    def __init__(self, image):
        super().__init__(f"image {image} does not exist")
        self.image = image


class SecretError(RelayError):
    """A secret is missing, unreadable, unusable or has an invalid name."""


class DeadLetterError(RelayError):
    """A dead-letter entry that is not there, or cannot be sent back."""


# --- the state view -------------------------------------------------------------------


class RunsError(RelayError):
    """A ``relay runs`` or ``relay replay`` request that cannot be carried out: a bad time, id or filter."""


class StateError(RelayError):
    """The state database cannot be opened, read or written."""


class UnknownFunction(RelayError):
    """A name the state database has no function for; printed as it is."""


# --- git sync -------------------------------------------------------------------------


class GitSyncError(RelayError):
    """A ``relay git`` command cannot do what it was asked."""


class SourceError(GitSyncError):
    """The git source is invalid, missing or its stored config is corrupt."""


class DeployKeyError(GitSyncError):
    """The deploy key is missing, or exists where keygen was told not to overwrite it."""


class HostKeyError(GitSyncError):
    """A host's key does not match the key pinned in Relay's known_hosts."""


class WebhookError(RelayError):
    """The git webhook cannot listen, or a delivery cannot be understood."""


class WebhookBindError(WebhookError):
    """The webhook server cannot listen on GIT_WEBHOOK_ADDR; fatal at start."""


class MalformedDelivery(WebhookError):
    """The body of a webhook delivery is not a GitHub payload Relay can read."""


class ConsoleError(RelayError):
    """The console cannot be served as configured (a non-loopback address without a token, a port in use)."""


# --- the words of an error ------------------------------------------------------------


def reason(error, *, strerror=True, innermost=False, limit=None):
    """*error* as a short phrase for the end of a message.

    An OSError says its strerror ("Permission denied", not "[Errno 13]
    Permission denied: '/x'") unless *strerror* is false; a docker-py error
    says the engine's explanation, not the HTTP status line before it; any
    other error says its message, stripped, or its type's name when it has
    none. *innermost* explains the innermost cause of a chain of wrapped
    errors instead ("Connection refused" beats three wrappers); *limit* cuts
    a longer text to that many characters, "..." included.
    """
    if innermost:
        while (error.__cause__ or error.__context__) is not None:
            error = error.__cause__ or error.__context__
    if strerror and isinstance(error, OSError) and error.strerror:
        text = error.strerror
    else:
        text = str(getattr(error, "explanation", None) or error).strip() or type(error).__name__
    if limit is not None and len(text) > limit:
        return text[:limit - 3] + "..."
    return text
