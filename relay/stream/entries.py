"""Turning a stream entry into a plan: malformed, matching nothing, or these targets."""

import json
from dataclasses import dataclass

from relay.stream.rules import Target

EVENT_FIELD = b"event"
SCHEDULE_FIELD = b"schedule"


@dataclass(slots=True)
class Plan:
    message_id: str
    payload: str | None          # the event field as text, when it was text
    event: dict | None = None
    targets: tuple = ()
    problem: str | None = None   # why the entry can never succeed (malformed)
    scheduled: bool = False      # a schedule occurrence, not an event
    obsolete: bool = False       # a schedule occurrence whose function or handler is gone
    waiting: tuple = ()          # names of matching functions whose image is not built yet

    @property
    def event_id(self):
        return _text(self.event.get("event_id")) if self.event else None

    @property
    def event_name(self):
        return _text(self.event.get("event_name")) if self.event else None


def plan(message_id, fields, rules, waiting=()):
    """Decode *fields* and match the event against *rules* (a relay.stream.rules.Rules).

    Targets come in function name order, then rule file order; two matching
    rules with the same handler are both targets. *waiting* are functions
    loaded but never built: an event one of them matches must wait for it,
    not be acknowledged without it.
    """
    raw = None if fields is None else fields.get(EVENT_FIELD)
    if raw is None:
        return Plan(message_id, None, problem="the entry has no 'event' field")
    try:
        payload = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Plan(message_id, None, problem="the 'event' field is not UTF-8 text")
    try:
        event = json.loads(payload)
    except ValueError as error:
        return Plan(message_id, payload, problem=f"the 'event' field is not valid JSON: {error}")
    if type(event) is not dict:
        return Plan(message_id, payload, problem=f"the event is a JSON {type(event).__name__}, not an object")
    occurrence = fields.get(SCHEDULE_FIELD)
    if occurrence is not None:
        return _scheduled(message_id, payload, event, occurrence, rules.functions, waiting)
    targets = rules.matching(event)
    if not waiting:
        return Plan(message_id, payload, event, targets)
    blocked = tuple(function.name for function in waiting
                    if any(rule.pattern.matches(event) for rule in function.template.rules))
    return Plan(message_id, payload, event, targets, waiting=blocked)


def _scheduled(message_id, payload, event, occurrence, snapshot, waiting):
    """A schedule occurrence runs exactly its function's handler; no pattern matching."""
    from relay.schedules import parse_occurrence_id

    parsed = parse_occurrence_id(occurrence.decode("utf-8", "replace"))
    if parsed is None:
        return Plan(message_id, payload, event, problem=f"the 'schedule' field {occurrence!r} is not an occurrence id")
    function, handler, _scheduled_at = parsed
    if any(pending.name == function for pending in waiting):
        return Plan(message_id, payload, event, scheduled=True, waiting=(function,))
    targets = tuple(Target(active, schedule)
                    for active in snapshot if active.name == function
                    for schedule in active.function.template.schedules if schedule.handler == handler)
    return Plan(message_id, payload, event, targets[:1], scheduled=True, obsolete=not targets)


def _text(value):
    return value if isinstance(value, str) else (None if value is None else json.dumps(value))
