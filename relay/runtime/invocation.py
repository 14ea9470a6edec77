"""What the dispatcher asks an executor for, and what it gets back.

An Invocation is one handler run on one event; an Outcome says how it
went, cold or warm, without ever raising for a failing handler or an engine
error. Neither ever prints the environment: it holds resolved secrets.
Each executor logs the outcomes that are not plain successes
(``log_outcome``), with the same attributes cold or warm.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from requests.exceptions import ConnectionError as RequestsConnectionError
from requests.exceptions import Timeout as RequestsTimeout

from relay.errors import reason
from relay.functions.template import Warm

log = logging.getLogger("relay.runtime.executor")

_PRINTABLE_RUN = re.compile(r"[^\x00-\x1f\x7f]{4,}")


@dataclass(frozen=True)
class Invocation:
    function: str            # function name
    handler: str             # e.g. "events.created.handler"
    image: str               # image tag to run, e.g. relay-fn-x:0123456789abcdef
    payload: bytes           # event JSON written to stdin
    timeout: int             # nanoseconds (relay.durations)
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # template env + secrets
    message_id: str | None = None
    event_id: str | None = None
    event_name: str | None = None
    network: str | None = None  # the template's network ("none"), or None for the engine's default
    runtime: str = "python3.14"  # the template's runtime: which warm bootstrap to start
    warm: Warm | None = None     # the template's warm settings; None runs a throw-away container
    attempt: int = 1             # 1-based: RELAY_ATTEMPT
    idempotency_key: str | None = None  # RELAY_IDEMPOTENCY_KEY (relay.stream.keys.idempotency_key)

    def __repr__(self) -> str:  # env holds secret values: never print them
        return (f"Invocation(function={self.function!r}, handler={self.handler!r}, image={self.image!r}, "
                f"message_id={self.message_id!r}, event_id={self.event_id!r})")


SIGKILL_EXIT = 137   # 128 + SIGKILL: what the engine reports for a container whose process was killed


@dataclass(frozen=True)
class Outcome:
    """How one invocation went, and what the run ledger (issue #32) records of it.

    The tails are the last TAIL_BYTES (relay.runtime.output.Tail) of the
    lines the handler wrote on each stream during this invocation, as they
    were forwarded. They are the handler's own words: they may hold the
    secret values it was given, so they are left out of the repr, and
    whoever stores or shows them masks and escapes them.
    """

    ok: bool
    exit_code: int | None    # None when it never ran to an exit (start failure, timeout)
    duration: float          # seconds
    timed_out: bool = False
    error: str | None = None  # why it is not ok; never contains env or secret values
    engine_unavailable: bool = False  # no container to run on (engine unreachable, warm start failed): not charged
    stdout_tail: str = field(default="", repr=False)
    stderr_tail: str = field(default="", repr=False)
    container_id: str | None = None  # the engine's full id of the container it ran in; None when none was created
    warm: bool = False               # the warm executor ran it (in a reused container)

    @property
    def killed(self) -> bool:
        """The handler's process was killed with SIGKILL (exit code 137) -- by the kernel's OOM killer
        at the container's memory limit, or from outside (``docker kill``, a stopping engine) --
        rather than ending on its own or being timed out by Relay (a timeout has no exit code).
        The engine does not say which of the two: AutoRemove deletes the container with its
        OOMKilled flag."""
        return not self.ok and not self.timed_out and self.exit_code == SIGKILL_EXIT

    @classmethod
    def not_started(cls, error: str) -> Outcome:
        """An invocation that failed before it reached Docker (e.g. a missing secret)."""
        return cls(ok=False, exit_code=None, duration=0.0, error=error)


def is_unreachable(error: BaseException) -> bool:
    """No connection to the engine, or no answer from it in time (it is stopping,
    restarting or hung), as opposed to an answer that refused the request."""
    return isinstance(error, (RequestsConnectionError, RequestsTimeout, ConnectionError, FileNotFoundError))


def engine_error_text(error: BaseException, env: Mapping[str, str]) -> str:
    """A caught engine error's message, short and without *env*'s values."""
    return redact(reason(error, strerror=False, limit=300), env)


def redact(text: str, env: Mapping[str, str]) -> str:
    """*text* from the engine without the values of *env*.

    The engine's errors may quote the container's environment (runc names
    the offending ``NAME=value`` when it refuses one), and env holds resolved
    secrets. Every ``NAME=...`` is cut, and so is every run of four or more
    printable characters of a value wherever it appears.
    """
    for name, value in env.items():
        text = re.sub(rf"\b{re.escape(name)}=(?:\\.|[^\s\"'\\])*", f"{name}=<redacted>", text)
        for piece in _PRINTABLE_RUN.findall(value):
            text = text.replace(piece, "<redacted>")
    return text


def log_outcome(invocation: Invocation, outcome: Outcome) -> None:
    """The container's side of an outcome: a timeout or an invocation that could not run at WARNING,
    any other exit at DEBUG (the dispatcher logs the outcome of each invocation)."""
    if outcome.ok and not log.isEnabledFor(logging.DEBUG):
        return
    attributes = {**log_attributes(invocation), "duration": round(outcome.duration, 3),
                  "exit_code": outcome.exit_code}
    if outcome.timed_out:
        log.warning("Handler timed out; its container was killed", extra=attributes)
    elif outcome.exit_code is None:
        log.warning("Handler could not run", extra={**attributes, "error": outcome.error})
    else:
        log.debug("Handler container exited", extra=attributes)


def log_attributes(invocation: Invocation) -> dict[str, str | None]:
    """What names an invocation in a log line (never its env or payload)."""
    return {"function": invocation.function, "handler": invocation.handler, "message_id": invocation.message_id,
            "event_id": invocation.event_id, "event_name": invocation.event_name}
