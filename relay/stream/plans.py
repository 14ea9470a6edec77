"""Planning a stream entry: malformed, matching nothing, or these targets.

A Plan is what the consumer, the dispatcher and the settle decision pass
around for one entry; ``plan_entry`` makes it. Whatever an entry holds,
planning it never raises: an event field over MAX_EVENT_BYTES is not read
at all, nor an entry whose other fields hold more than MAX_OTHER_FIELD_BYTES
together (such an entry may arrive already cut, as an ``Oversized``: see
relay.stream.claims), an event too deep to decode or nested deeper than MAX_EVENT_DEPTH
levels goes to no handler, and any other exception while decoding or
matching makes that one entry malformed. A malformed entry is
dead-lettered; the batch it came in goes on. The event is decoded by
relay.jsontext.loads: orjson where it is installed, with json.loads' answer,
error and message wherever the two would differ.

An entry ``relay replay`` added (a ``replay_for`` field, and ``replay_of``:
the id of the entry it copies) runs only for the function, or the one
handler of it, that ``replay_for`` names. The fields are looked up only in
an entry with more than an event, so the common entry pays nothing for them.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, final

from relay.config import DEFAULT_MAX_EVENT_BYTES
from relay.functions.rules import Target
from relay.jsontext import loads
from relay.names import function_name_problem
from relay.quoting import quote
from relay.stream.keys import (
    EVENT_FIELD,
    REPLAY_FOR,
    REPLAY_FOR_FIELD,
    REPLAY_OF,
    REPLAY_OF_FIELD,
    SCHEDULE_FIELD,
    parse_occurrence_id,
)

if TYPE_CHECKING:
    from relay.functions import ActiveFunction, Function
    from relay.functions.rules import Rules

log = logging.getLogger("relay.stream.plans")

MAX_EVENT_DEPTH = 64        # nested objects and arrays, the event object itself being level 1
KEPT_PREFIX_BYTES = 4096    # what a dead-letter entry keeps of an event over MAX_EVENT_BYTES
MAX_OTHER_FIELD_BYTES = 64 * 1024   # the names and values of an entry's fields but its event, together
TOO_DEEP = f"the event nests deeper than {MAX_EVENT_DEPTH} levels"
MAX_REPLAY_FOR_CHARS = 320  # ``function/handler``: a function name is at most 63 characters
_ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}", re.ASCII)


@final     # nothing derives from it, so ``type(fields) is Oversized`` tells the type checker too
@dataclass(frozen=True, slots=True)
class Oversized:
    """An entry measured in Redis and found over the limits: its sizes, and its event only as a dead letter keeps it."""

    event: bytes | None     # the event field: whole when within MAX_EVENT_BYTES, else its first KEPT_PREFIX_BYTES
    event_bytes: int        # the event field's size (0: no event field)
    other_bytes: int        # the names and values of the other fields, together


Fields = dict[bytes, bytes] | Oversized
"""A stream entry's fields as redis-py returns them, or an Oversized when they were measured over the limits."""


@dataclass(slots=True)
class Plan:
    message_id: str
    payload: str | None          # the event field as text, when it was text
    event: dict[str, object] | None = None
    targets: tuple[Target, ...] = ()
    problem: str | None = None   # why the entry can never succeed (malformed)
    scheduled: bool = False      # a schedule occurrence, not an event
    obsolete: bool = False       # a schedule occurrence whose function or handler is gone
    waiting: tuple[str, ...] = ()  # names of matching functions whose image is not built yet
    raw: bytes | None = None     # the event field's bytes when they are not text, or their start when too big
    event_bytes: int = 0         # the event field's size when it was too big to read (raw is cut)
    trimmed: bool = False        # the entry was trimmed away while it was pending: nothing left to run
    occurrence: str | None = None  # a schedule occurrence's id (its idempotency key)
    replay_of: str | None = None   # a replayed entry (``relay replay``): the id of the entry it copies
    replay_for: str | None = None  # ... and the function (``name``) or handler (``name/handler``) it runs for

    @property
    def kept(self) -> str | bytes | None:
        """What a dead-letter entry keeps of the event field: its text, else its raw bytes."""
        return self.payload if self.payload is not None else self.raw

    @property
    def is_event(self) -> bool:
        """An event published to the stream: not a schedule occurrence, not a trimmed entry."""
        return not (self.scheduled or self.trimmed)

    @property
    def added_at(self) -> int | None:
        """When the entry was added to the stream, in unix nanoseconds (its id's milliseconds), or None.

        A redriven entry is a new entry (``relay dlq redrive``), so for it this is when it was redriven.
        """
        milliseconds = self.message_id.partition("-")[0]
        return int(milliseconds) * 1_000_000 if milliseconds.isascii() and milliseconds.isdigit() else None

    @property
    def event_id(self) -> str | None:
        return _text(self.event.get("event_id")) if self.event else None

    @property
    def event_name(self) -> str | None:
        return _text(self.event.get("event_name")) if self.event else None


def plan_entry(message_id: str, fields: Fields | None, rules: Rules, waiting: Sequence[Function] = (),
               max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> Plan:
    """Decode *fields* and match the event against *rules* (a relay.functions.rules.Rules).

    Targets come in function name order, then rule file order; two matching
    rules with the same handler are both targets. *waiting* are functions
    loaded but never built: an event one of them matches must wait for it,
    not be acknowledged without it. Never raises: an entry that cannot be
    read is a Plan with a problem; one trimmed away while pending (no
    fields) is a trimmed Plan. *fields* may be an Oversized, always a problem.
    """
    if fields is None:
        return Plan(message_id, None, trimmed=True)
    try:
        return _plan(message_id, fields, rules, waiting, max_event_bytes)
    except Exception as error:
        log.warning("Reading the entry failed unexpectedly", exc_info=True, extra={"message_id": message_id})
        raw = fields.get(EVENT_FIELD) if isinstance(fields, dict) else None
        return Plan(message_id, None, problem=f"{type(error).__name__}: {error}",
                    raw=raw if isinstance(raw, bytes) and len(raw) <= max_event_bytes else None)


def _plan(message_id: str, fields: Fields, rules: Rules, waiting: Sequence[Function], max_event_bytes: int) -> Plan:
    if type(fields) is Oversized:
        return _oversized(message_id, fields, max_event_bytes)
    raw = fields.get(EVENT_FIELD)
    if raw is None:
        return Plan(message_id, None, problem="the entry has no 'event' field")
    oversized = _measure(fields, raw, max_event_bytes)
    if oversized is not None:
        return _oversized(message_id, oversized, max_event_bytes)
    try:
        payload = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return Plan(message_id, None, problem=f"the 'event' field is not UTF-8 text: {error}", raw=raw)
    try:
        event = loads(payload)
    except RecursionError:
        return Plan(message_id, payload, problem=TOO_DEEP)
    except ValueError as error:
        return Plan(message_id, payload, problem=f"the 'event' field is not valid JSON: {error}")
    if type(event) is not dict:
        return Plan(message_id, payload, problem=f"the event is a JSON {type(event).__name__}, not an object")
    extra = len(fields) > 1     # an event alone, the common case, has no other field to look up
    occurrence = fields.get(SCHEDULE_FIELD) if extra else None
    replay_for = fields.get(REPLAY_FOR_FIELD) if extra else None
    if occurrence is not None:
        planned = _scheduled(message_id, payload, event, occurrence, rules.functions, waiting)
    elif replay_for is not None:
        planned = _replayed(message_id, payload, event, replay_for, fields.get(REPLAY_OF_FIELD), rules, waiting)
    elif waiting:
        blocked = tuple(function.name for function in waiting
                        if any(rule.pattern.matches(event) for rule in function.template.rules))
        planned = Plan(message_id, payload, event, rules.matching(event), waiting=blocked)
    else:
        planned = Plan(message_id, payload, event, rules.matching(event))
    if (planned.targets or planned.waiting) and _too_deep(payload, event):
        return Plan(message_id, payload, problem=TOO_DEEP)
    return planned


def _measure(fields: dict[bytes, bytes], raw: bytes, max_event_bytes: int) -> Oversized | None:
    """An Oversized for an entry read whole (*raw* its event) that is over the limits, else None."""
    if len(raw) > max_event_bytes:
        return Oversized(raw[:KEPT_PREFIX_BYTES], len(raw), 0)
    if len(fields) > 1:
        other_bytes = sum(len(name) + len(value) for name, value in fields.items()) - len(EVENT_FIELD) - len(raw)
        if other_bytes > MAX_OTHER_FIELD_BYTES:
            return Oversized(raw, len(raw), other_bytes)
    return None


def _oversized(message_id: str, oversized: Oversized, max_event_bytes: int) -> Plan:
    """The plan of an entry over the limits: dead-lettered with what can be kept of its event."""
    size, event = oversized.event_bytes, oversized.event
    if size > max_event_bytes:
        return Plan(message_id, None, problem=f"event is {size} bytes, over MAX_EVENT_BYTES ({max_event_bytes})",
                    raw=event, event_bytes=size)
    problem = (f"the fields other than 'event' hold {oversized.other_bytes} bytes, "
               f"over the {MAX_OTHER_FIELD_BYTES} Relay reads")
    if event is None:
        return Plan(message_id, None, problem=problem)
    try:
        return Plan(message_id, event.decode("utf-8"), problem=problem)
    except UnicodeDecodeError:
        return Plan(message_id, None, problem=problem, raw=event)


def _scheduled(message_id: str, payload: str, event: dict[str, object], occurrence: bytes,
               snapshot: Sequence[ActiveFunction], waiting: Sequence[Function]) -> Plan:
    """A schedule occurrence runs exactly its function's handler; no pattern matching."""
    occurrence_id = occurrence.decode("utf-8", "replace")
    parsed = parse_occurrence_id(occurrence_id)
    if parsed is None:
        return Plan(message_id, payload, event, problem=f"the 'schedule' field {occurrence!r} is not an occurrence id")
    function, handler, _scheduled_at = parsed
    if any(pending.name == function for pending in waiting):
        return Plan(message_id, payload, event, scheduled=True, waiting=(function,))
    targets = tuple(Target(active, schedule)
                    for active in snapshot if active.name == function
                    for schedule in active.function.template.schedules if schedule.handler == handler)
    return Plan(message_id, payload, event, targets[:1], scheduled=True, obsolete=not targets,
                occurrence=occurrence_id)


def _replayed(message_id: str, payload: str, event: dict[str, object], replay_for: bytes, replay_of: bytes | None,
              rules: Rules, waiting: Sequence[Function]) -> Plan:
    """A replayed entry runs only for the function (or the handler of it) its ``replay_for`` names.

    Never for the other functions its event matches: they ran when the
    source entry came. A named function that is not loaded any more can
    never run it (dead-lettered, saying so), nor a handler the function no
    longer has; one loaded but not built yet is waited for as any matching
    function is; one whose rules no longer match the event leaves nothing to
    run (acknowledged as matching nothing).
    """
    named = parse_replay_for(replay_for)
    if isinstance(named, str):
        return Plan(message_id, payload, event, problem=named)
    function, handler = named
    source = None
    if replay_of is not None:
        source = replay_of.decode("ascii", "replace")
        if not _ENTRY_ID.fullmatch(source):
            return Plan(message_id, payload, event,
                        problem=f"the '{REPLAY_OF}' field {quote(replay_of)} is not a stream entry id")
    replay = replay_for.decode()
    for pending in waiting:
        if pending.name == function:
            blocked = any(rule.pattern.matches(event) for rule in pending.template.rules
                          if handler is None or rule.handler == handler)
            return Plan(message_id, payload, event, waiting=(function,) if blocked else (),
                        replay_of=source, replay_for=replay)
    active = next((active for active in rules.functions if active.name == function), None)
    if active is None:
        return Plan(message_id, payload, event, problem=f"replayed for function '{function}', which is not loaded",
                    replay_of=source, replay_for=replay)
    if handler is not None and all(rule.handler != handler for rule in active.function.template.rules):
        return Plan(message_id, payload, event, replay_of=source, replay_for=replay,
                    problem=f"replayed for {function}/{handler}, but function '{function}' has no rule "
                            f"with handler {quote(handler)}")
    targets = tuple(target for target in rules.matching(event)
                    if target.active is active and (handler is None or target.rule.handler == handler))
    return Plan(message_id, payload, event, targets, replay_of=source, replay_for=replay)


def parse_replay_for(raw: bytes) -> tuple[str, str | None] | str:
    """(function, handler or None) that a ``replay_for`` field names, or why it names none (a problem)."""
    field = f"the '{REPLAY_FOR}' field"
    if len(raw) > MAX_REPLAY_FOR_CHARS:
        return f"{field} is {len(raw)} bytes, over the {MAX_REPLAY_FOR_CHARS} a function/handler can take"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"{field} {quote(raw)} is not UTF-8 text"
    if not text:
        return f"{field} is empty; it names a function, or function/handler"
    if not text.isprintable():
        return f"{field} {quote(text)} holds a character that is not printable"
    function, slash, handler = text.partition("/")
    problem = function_name_problem(function)
    if problem is not None:
        return f"{field}: {problem}"
    if slash and not handler:
        return f"{field} {quote(text)} names no handler after the '/'"
    return function, handler if slash else None


def _too_deep(payload: str, event: dict[str, object]) -> bool:
    """Whether *event* (decoded from *payload*) nests deeper than MAX_EVENT_DEPTH.

    Asked only of an event that is going somewhere (a handler, its log lines):
    one that matches nothing is acknowledged whatever its depth, and the
    unmatched path, the busiest, pays nothing for the check. Every level
    needs an opening bracket, so most events are settled by counting them;
    the walk uses a stack, not recursion, so no depth can overflow it.
    """
    if len(payload) <= 2 * MAX_EVENT_DEPTH or payload.count("[") + payload.count("{") <= MAX_EVENT_DEPTH:
        return False
    stack: list[tuple[dict[str, object] | list[object], int]] = [(event, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_EVENT_DEPTH:
            return True
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else (None if value is None else json.dumps(value))
