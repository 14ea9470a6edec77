"""Which rules an event matches, without testing every rule of every function.

Most rules require a top-level field to be one of a few strings
(``table_name: [users]``, ``event_name: [INSERT]``). The index picks the one
field that splits the rules best and lists, under each of its values, the
rules that value can satisfy together with the rules that do not constrain
the field at all. An event is tested only against the list under its own
value, so with ten functions keyed by table it tests three rules, not thirty.

The result is exactly that of testing every rule, in the same order:
functions by name, then rules in file order. A Rules is built once per
catalog snapshot and never changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.functions.function import ActiveFunction
    from relay.functions.template import Rule, Schedule


@dataclass(frozen=True)
class Target:
    """One matched rule of one function: an invocation to run for the entry."""

    active: ActiveFunction
    rule: Rule | Schedule   # a Schedule for a schedule occurrence's entry


class Rules:
    """The rules of a snapshot of active functions, indexed on one field."""

    __slots__ = ("functions", "field", "_by_value", "_unkeyed")

    def __init__(self, functions):
        self.functions = tuple(functions)
        targets = tuple(Target(active, rule) for active in self.functions for rule in active.function.template.rules)
        self.field = field = _best_field(targets)
        self._unkeyed = _tested(target for target in targets if field not in target.rule.pattern.required)
        values = {value for target in targets for value in target.rule.pattern.required.get(field, ())}
        self._by_value = {value: _tested(target for target in targets if _allows(target, field, value))
                          for value in values}

    def matching(self, event):
        """The targets whose pattern matches *event*, a dict."""
        candidates = self._unkeyed
        if self.field is not None:
            value = event.get(self.field)
            if type(value) is str:
                candidates = self._by_value.get(value, self._unkeyed)
        return tuple(target for target, matches in candidates if matches(event))

    def candidates(self):
        """How many rules an event is tested against: (fewest, most)."""
        sizes = [len(self._unkeyed), *(len(listed) for listed in self._by_value.values())]
        return min(sizes), max(sizes)


def _tested(targets):
    """(target, its pattern's matches) pairs: the consumer's loop calls it without looking it up."""
    return tuple((target, target.rule.pattern.matches) for target in targets)


def _allows(target, field, value):
    """Whether *target*'s pattern can match an event whose *field* is the string *value*."""
    required = target.rule.pattern.required.get(field)
    return required is None or value in required


def _best_field(targets):
    """The field that leaves the fewest rules to test for an average value of it, or None."""
    best, best_cost = None, len(targets)
    fields = sorted({field for target in targets for field in target.rule.pattern.required})
    for field in fields:
        keyed = [target.rule.pattern.required[field] for target in targets if field in target.rule.pattern.required]
        distinct = len(set().union(*keyed))
        cost = (len(targets) - len(keyed)) + sum(len(values) for values in keyed) / distinct
        if cost < best_cost:
            best, best_cost = field, cost
    return best
