"""Turning a stream entry into a plan: malformed, matching nothing, or these targets."""

import json
from dataclasses import dataclass

EVENT_FIELD = b"event"


@dataclass(frozen=True)
class Target:
    """One matched rule of one function: an invocation to run for the entry."""

    active: object   # relay.catalog.ActiveFunction
    rule: object     # relay.functions.Rule

    @property
    def field(self):
        return f"{self.active.name}/{self.rule.handler}"


@dataclass(slots=True)
class Plan:
    message_id: str
    payload: str | None          # the event field as text, when it was text
    event: dict | None = None
    targets: tuple = ()
    problem: str | None = None   # why the entry can never succeed (malformed)

    @property
    def event_id(self):
        return _text(self.event.get("event_id")) if self.event else None

    @property
    def event_name(self):
        return _text(self.event.get("event_name")) if self.event else None


def plan(message_id, fields, snapshot):
    """Decode *fields* and match the event against every rule of *snapshot*.

    Functions are taken in name order (the snapshot's order) and rules in
    file order; two matching rules with the same handler are both targets.
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
    targets = tuple(Target(active, rule)
                    for active in snapshot
                    for rule in active.function.template.rules
                    if rule.pattern.matches(event))
    return Plan(message_id, payload, event, targets)


def _text(value):
    return value if isinstance(value, str) else (None if value is None else json.dumps(value))
