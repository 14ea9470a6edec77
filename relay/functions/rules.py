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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from relay.functions.function import ActiveFunction
from relay.functions.patterns import JsonObject, Pattern
from relay.functions.template import Rule, Schedule


@dataclass(frozen=True)
class Target:
    """One invocation to run for an entry: a matched rule of one function, or the schedule
    an occurrence's entry was published for (relay.stream.plans)."""

    active: ActiveFunction
    rule: Rule | Schedule


_Tested = tuple[tuple[Target, Callable[[JsonObject], bool]], ...]   # targets, each with its pattern's test


class Rules:
    """The rules of a snapshot of active functions, indexed on one field."""

    __slots__ = ("functions", "field", "_by_value", "_unkeyed")

    def __init__(self, functions: Iterable[ActiveFunction]) -> None:
        self.functions = tuple(functions)
        indexed = tuple((Target(active, rule), rule.pattern) for active in self.functions
                        for rule in active.function.template.rules)
        self.field = field = _best_field([pattern for _, pattern in indexed])
        self._unkeyed: _Tested = _tested(item for item in indexed if field not in item[1].required)
        self._by_value: dict[str, _Tested] = {}
        if field is not None:
            values = {value for _, pattern in indexed for value in pattern.required.get(field, ())}
            self._by_value = {value: _tested(item for item in indexed if _allows(item[1], field, value))
                              for value in values}

    def matching(self, event: JsonObject) -> tuple[Target, ...]:
        """The targets whose pattern matches *event*, a dict."""
        candidates = self._unkeyed
        if self.field is not None:
            value = event.get(self.field)
            if type(value) is str:
                candidates = self._by_value.get(value, self._unkeyed)
        return tuple(target for target, matches in candidates if matches(event))

    def candidates(self) -> tuple[int, int]:
        """How many rules an event is tested against: (fewest, most)."""
        sizes = [len(self._unkeyed), *(len(listed) for listed in self._by_value.values())]
        return min(sizes), max(sizes)


def _tested(indexed: Iterable[tuple[Target, Pattern]]) -> _Tested:
    """(target, its pattern's matches) pairs: the consumer's loop calls it without looking it up."""
    return tuple((target, pattern.matches) for target, pattern in indexed)


def _allows(pattern: Pattern, field: str, value: str) -> bool:
    """Whether *pattern* can match an event whose *field* is the string *value*."""
    required = pattern.required.get(field)
    return required is None or value in required


def _best_field(patterns: Sequence[Pattern]) -> str | None:
    """The field that leaves the fewest rules to test for an average value of it, or None."""
    best, best_cost = None, float(len(patterns))
    fields = sorted({field for pattern in patterns for field in pattern.required})
    for field in fields:
        keyed = [pattern.required[field] for pattern in patterns if field in pattern.required]
        distinct = len(set().union(*keyed))
        cost = (len(patterns) - len(keyed)) + sum(len(values) for values in keyed) / distinct
        if cost < best_cost:
            best, best_cost = field, cost
    return best
