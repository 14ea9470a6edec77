"""The handler context: the RELAY_* variables every invocation sees.

    RELAY_FUNCTION         the function's name
    RELAY_HANDLER          the handler, module.function
    RELAY_MESSAGE_ID       the stream entry's id
    RELAY_EVENT_ID         the event's event_id, only when it has one
    RELAY_ATTEMPT          1 for the first attempt, 2 for the first retry, ...
    RELAY_DEADLINE         when the invocation's timeout ends, RFC 3339 in UTC with milliseconds
    RELAY_IDEMPOTENCY_KEY  the same on every attempt and delivery of this handler on this entry

A cold container has them all in its environment from its creation. A warm
container has RELAY_FUNCTION from its start; each request carries
RELAY_HANDLER in its header and the others (``request_variables``) as a
JSON object, which the bootstrap puts in the environment for the handler
call and takes out after it. A value Relay cannot pass in an environment
variable (a NUL character, a lone surrogate, more than MAX_VALUE_BYTES
of UTF-8) leaves its variable unset; only values taken from the
entry (its event_id, a schedule field) can be such.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.runtime.invocation import Invocation

FUNCTION = "RELAY_FUNCTION"
HANDLER = "RELAY_HANDLER"
MESSAGE_ID = "RELAY_MESSAGE_ID"
EVENT_ID = "RELAY_EVENT_ID"
ATTEMPT = "RELAY_ATTEMPT"
DEADLINE = "RELAY_DEADLINE"
IDEMPOTENCY_KEY = "RELAY_IDEMPOTENCY_KEY"
NAMES = (FUNCTION, HANDLER, MESSAGE_ID, EVENT_ID, ATTEMPT, DEADLINE, IDEMPOTENCY_KEY)
MAX_VALUE_BYTES = 4096


def environment(invocation: Invocation, deadline: float) -> dict[str, str]:
    """A cold container's environment: the function's variables and the whole context.

    *deadline* is when the invocation's timeout ends, in unix seconds.
    """
    return {**invocation.env, FUNCTION: invocation.function, HANDLER: invocation.handler,
            **request_variables(invocation, deadline)}


def request_variables(invocation: Invocation, deadline: float) -> dict[str, str]:
    """The context a warm request carries: every variable but RELAY_FUNCTION and RELAY_HANDLER."""
    values: dict[str, str | None] = {
        MESSAGE_ID: invocation.message_id, EVENT_ID: invocation.event_id, ATTEMPT: str(invocation.attempt),
        DEADLINE: rfc3339(deadline), IDEMPOTENCY_KEY: invocation.idempotency_key}
    return {name: value for name, value in values.items() if value is not None and _passable(value)}


def rfc3339(unix_seconds: float) -> str:
    """*unix_seconds* as ``2026-12-06T10:00:06.250Z``, cut (not rounded) to the millisecond."""
    milliseconds = int(unix_seconds * 1000)
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(milliseconds // 1000))
    return f"{whole}.{milliseconds % 1000:03d}Z"


def _passable(value: str) -> bool:
    if "\0" in value:
        return False
    try:
        return len(value.encode("utf-8")) <= MAX_VALUE_BYTES
    except UnicodeEncodeError:    # a lone surrogate: JSON "\ud800" decodes to one
        return False
