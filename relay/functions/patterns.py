"""The pattern compiler: a template's pattern, checked once, turned into closures.

A pattern maps event fields to conditions:

* a list is implicit equality: ``status: [COMPLETED, FAILED]``;
* a mapping whose keys are all operators holds operators, several of them on
  one field being alternatives (OR): ``{exists: false, prefix: ["12"]}``;
* a mapping with no operator key holds nested fields;
* sibling fields must all hold (AND); the values listed for one operator are
  alternatives (OR);
* ``$or: [{...}, {...}]`` among the fields of any mapping holds patterns, one
  of which must hold: ``{table_name: [users], $or: [{a: [x]}, {b: [y]}]}``.

An operator tests a field that is present; only ``exists: false`` holds for a
missing one. So ``anything-but`` does not match a missing field (as in AWS
EventBridge): "anything but DELETED" says something about a value.

``compile_pattern`` validates the whole tree and reports every problem with
its field path; the Pattern it returns evaluates an event without looking at
the raw pattern again. Matching never raises, whatever JSON it is given.

A key where Relay reads operators (the keys of a field's condition) that is
no operator of Relay's but looks like one -- EventBridge's ``numeric`` and
``cidr``, a ``$``-keyword other than ``$or`` (at any level), a misspelt or
differently cased operator such as ``anything_but`` -- is a nested field
name to Relay, so such a pattern loads and then matches nothing. Each is a
warning naming the key and what Relay offers instead (``operator_hint``),
never an error: an event may really have a field named ``numeric``.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from typing import Any, Literal, overload

from relay.durations import parse_duration
from relay.errors import DurationError
from relay.functions.problems import Problems, given, join, reason, show

OPERATORS = ("equals", "prefix", "suffix", "exists", "gt", "gte", "lt", "lte", "anything-but", "equals-ignore-case",
             "wildcard")
OR = "$or"

Now = datetime | None   # the instant now() is measured from; None: the time of the call
JsonObject = dict[str, object]                    # an event, or an object nested in one
FieldTest = Callable[[JsonObject, Now], bool]    # a test on an object: its fields, the ones a pattern names
ValueTest = Callable[[object, Now], bool]        # a test on a field's value, which is present
Compiled = tuple[FieldTest, bool]                # a test, and the answer when the object holding it is missing
Scalar = str | int | float | bool | None         # what an operator takes
Bound = tuple[Literal["number"], float] | tuple[Literal["now"], int]   # a comparison's number, or now() + ns
PatternSource = Mapping[str, Any]   # a pattern as written, once compile_pattern has checked its shape

_STRING_OPERATORS = ("prefix", "suffix", "equals-ignore-case", "wildcard")
_COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "gt": lambda value, bound: value > bound,
    "gte": lambda value, bound: value >= bound,
    "lt": lambda value, bound: value < bound,
    "lte": lambda value, bound: value <= bound,
}
_MISSING = object()
_NOW = re.compile(r"now\(\)(?:([+-])([0-9.].*))?", re.ASCII | re.DOTALL)
_RFC3339 = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(?:(Z)|([+-])(\d\d):(\d\d))", re.ASCII)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_ORDINAL = _EPOCH.toordinal()
_SCALARS = (str, int, float, bool, type(None))


class Pattern:
    """A compiled pattern. ``matches(event, now=None)`` says whether *event* fits.

    *now* (an aware datetime; naive means UTC) fixes the instant that now()
    expressions are measured from; by default it is the time of the call.
    It is converted only where a now() comparison meets a timestamp, and the
    last one converted is remembered: matching many patterns at one explicit
    instant converts it once, not once a call.
    *required* maps each top-level field the pattern requires to be one of
    some strings (``table_name: [users, orders]``) to a set holding every
    string it may be: an event whose field is anything else cannot match,
    which is what the consumer's rule index (relay.functions.rules) relies on.
    """

    __slots__ = ("_test", "source", "required")

    def __init__(self, test: FieldTest, source: PatternSource) -> None:
        self._test = test
        self.source = source
        self.required: dict[str, frozenset[str]] = _required_strings(source)

    def matches(self, event: object, now: Now = None) -> bool:
        if type(event) is not dict:
            return False
        return self._test(event, now)

    def __repr__(self) -> str:
        return f"Pattern({self.source!r})"


@overload
def compile_pattern(pattern: object, path: str = "pattern", problems: None = None) -> Pattern: ...


@overload
def compile_pattern(pattern: object, path: str, problems: Problems) -> Pattern | None: ...


def compile_pattern(pattern: object, path: str = "pattern", problems: Problems | None = None) -> Pattern | None:
    """Compile *pattern*; raise TemplateError listing every problem found.

    When a Problems collector is given, problems are added to it instead and
    the returned Pattern is None if there were any.
    """
    collector = Problems() if problems is None else problems
    before = len(collector)
    compiled = None
    if not isinstance(pattern, dict) or not pattern:
        collector.add(path, f"must be a mapping of event fields to conditions, not {given(pattern)}")
    else:
        test = _fields(pattern, path, collector)[0]
        if len(collector) == before:
            compiled = Pattern(test, pattern)
    if problems is None:
        collector.raise_if_any("pattern")
    return compiled


def _required_strings(pattern: PatternSource) -> dict[str, frozenset[str]]:
    """Top-level fields whose only condition is equality with strings -> frozenset of them.

    A field every pattern of a ``$or`` requires is required too, to be one of
    the strings of all of them; a sibling field's own condition comes first.
    """
    required: dict[str, frozenset[str]] = {}
    for key, condition in pattern.items():
        if key == OR:
            continue
        values = condition
        if isinstance(condition, dict) and list(condition) == ["equals"]:
            equals = condition["equals"]
            values = equals if isinstance(equals, list) else [equals]
        if isinstance(values, list) and values and all(type(value) is str for value in values):
            required[key] = frozenset(values)
    if OR in pattern:
        for key, values in _required_by_every(pattern[OR]).items():
            required.setdefault(key, values)
    return required


def _required_by_every(patterns: list[PatternSource]) -> dict[str, frozenset[str]]:
    """The fields each of *patterns* requires -> the union of the strings they allow."""
    each = [_required_strings(pattern) for pattern in patterns]
    shared = set(each[0]).intersection(*each[1:])
    return {key: frozenset().union(*(required[key] for required in each)) for key in shared}


def _fields(mapping: Mapping[object, object], path: str, problems: Problems) -> Compiled:
    """Compile a mapping of fields (AND) into a test on a dict, and the result
    the mapping has when its parent is missing (or is not an object)."""
    tests: list[FieldTest] = []
    when_parent_missing = True
    for key, condition in mapping.items():
        field_path = join(path, key)
        if not isinstance(key, str):
            problems.add(field_path, f"field name {show(key)} is not a string; quote it in the YAML")
            continue
        if key.startswith("$") and key != OR:
            problems.warn(field_path, f"{show(key)} is not a keyword of Relay's patterns, so it is read as an "
                                      f"event field of that name; {operator_hint(key, condition)}")
        compiled = _or(condition, field_path, problems) if key == OR else _field(key, condition, field_path, problems)
        if compiled is not None:
            tests.append(compiled[0])
            when_parent_missing = when_parent_missing and compiled[1]
    return _all_of(tuple(tests)), when_parent_missing


def _all_of(tests: tuple[FieldTest, ...]) -> FieldTest:
    """AND of field tests; the common short cases avoid a loop."""
    if len(tests) == 1:
        return tests[0]
    if len(tests) == 2:
        first, second = tests
        return lambda event, now: first(event, now) and second(event, now)
    if len(tests) == 3:
        first, second, third = tests
        return lambda event, now: first(event, now) and second(event, now) and third(event, now)

    def test(event: JsonObject, now: Now) -> bool:
        for field in tests:
            if not field(event, now):
                return False
        return True

    return test


def _or(patterns: object, path: str, problems: Problems) -> Compiled | None:
    """Compile ``$or``: a test on the dict that holds it, true when one of *patterns* is."""
    if not isinstance(patterns, list) or not patterns:
        problems.add(path, f"must be a non-empty list of patterns (mappings of event fields to conditions), "
                           f"not {given(patterns)}")
        return None
    tests: list[FieldTest] = []
    when_parent_missing = False
    for index, pattern in enumerate(patterns):
        pattern_path = join(path, index)
        if not isinstance(pattern, dict) or not pattern:
            problems.add(pattern_path, f"must be a mapping of event fields to conditions, not {given(pattern)}")
            continue
        test, when_missing = _fields(pattern, pattern_path, problems)
        tests.append(test)
        when_parent_missing = when_parent_missing or when_missing
    return _any_of(tuple(tests)), when_parent_missing


def _any_of(tests: tuple[FieldTest, ...]) -> FieldTest:
    """OR of tests on one dict; the common short cases avoid a loop."""
    if len(tests) == 1:
        return tests[0]
    if len(tests) == 2:
        first, second = tests
        return lambda event, now: first(event, now) or second(event, now)

    def test(event: JsonObject, now: Now) -> bool:
        for pattern in tests:
            if pattern(event, now):
                return True
        return False

    return test


def _field(key: str, condition: object, path: str, problems: Problems) -> Compiled | None:
    """Compile one field's condition; return (test on the parent dict, result when missing)."""
    if isinstance(condition, list):
        operands = _operand_list(condition, path, problems, "implicit equality")
        return None if operands is None else _equality_field(key, operands, path, problems)
    if isinstance(condition, (str, int, float)):
        problems.add(path, f"{show(condition)} is a single value; equality takes a list, e.g. "
                           f"[{condition if isinstance(condition, str) else json.dumps(condition)}]")
        return None
    if not isinstance(condition, dict) or not condition:
        problems.add(path, f"must be a list of values, a mapping of operators or a mapping of nested fields, "
                           f"not {given(condition)}")
        return None
    operators = [name for name in condition if name in OPERATORS]
    _operator_lookalikes(condition, operators, path, problems)
    if not operators:
        fields, when_missing = _fields(condition, path, problems)

        def nested(container: JsonObject, now: Now) -> bool:
            value = container.get(key)
            return fields(value, now) if type(value) is dict else when_missing

        return nested, when_missing
    if len(operators) != len(condition):
        others = [name for name in condition if name not in OPERATORS]
        named = ", ".join([join("", name) for name in others[:4]] + ["..."] * (len(others) > 4))
        problems.add(path, f"mixes operators ({', '.join(operators)}) with nested fields ({named}); "
                           f"put nested fields in their own mapping")
        return None
    if list(condition) == ["equals"]:
        operands = _operand_list(condition["equals"], join(path, "equals"), problems, "equals")
        return None if operands is None else _equality_field(key, operands, join(path, "equals"), problems)

    value_tests: list[ValueTest] = []
    when_missing = False
    for name, operand in condition.items():
        operand_path = join(path, name)
        if name == "exists":
            if type(operand) is not bool:
                problems.add(operand_path, f"must be true or false, not {given(operand)}")
                continue
            value_tests.append(_always if operand else _never)
            when_missing = when_missing or not operand
        else:
            compiled = _operator(name, operand, operand_path, problems)
            if compiled is not None:
                value_tests.append(compiled)
    return _present_field(key, tuple(value_tests), when_missing), when_missing


# --- keys that look like operators Relay does not have -----------------------------

# Operators of other matchers (EventBridge, MongoDB-style queries, common spellings), what to write instead.
_FOREIGN = {
    "numeric": "compare numbers with gt, gte, lt or lte, e.g. {gt: 100}",
    "cidr": "Relay has no address ranges; match the text with prefix or wildcard, e.g. {prefix: [\"10.0.\"]}",
    "regex": "Relay has no regular expressions; use prefix, suffix or wildcard",
    "contains": "use wildcard, e.g. {wildcard: [\"*text*\"]}",
    "in": "list the values, e.g. field: [a, b]",
    "eq": "list the values, e.g. field: [a], or use equals",
    "not": "use anything-but, e.g. {anything-but: [a, b]}",
    "ne": "use anything-but, e.g. {anything-but: [a]}",
    "neq": "use anything-but, e.g. {anything-but: [a]}",
    "nin": "use anything-but, e.g. {anything-but: [a, b]}",
    "between": "compare with gt, gte, lt or lte; several on one field are alternatives (OR)",
    "range": "compare with gt, gte, lt or lte; several on one field are alternatives (OR)",
    "startswith": "use prefix", "starts-with": "use prefix", "endswith": "use suffix", "ends-with": "use suffix",
    "and": "sibling fields must all hold already: put the conditions side by side",
    "or": "use $or beside the fields: $or: [{...}, {...}]",
    "nor": "use anything-but, or $or with anything-but",
    "exist": "use exists: true or exists: false",
    "ignore-case": "use equals-ignore-case",
}
_COMPARISON_WORDS = {">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}


def _normal(name: str) -> str:
    return name.lower().lstrip("$").replace("_", "").replace("-", "")


_NORMAL_OPERATORS = {_normal(name): name for name in OPERATORS}
_NORMAL_FOREIGN = {_normal(name): name for name in _FOREIGN}


def operator_hint(name: str, operand: object = None) -> str:
    """What Relay offers in place of the operator-like key *name* (given *operand*), as a phrase."""
    normal = _normal(name)
    if normal in _NORMAL_OPERATORS:
        return f"write {_NORMAL_OPERATORS[normal]}, Relay's operator"
    if normal in ("gt", "gte", "lt", "lte", "exists", "prefix", "suffix", "wildcard"):
        return f"write {normal}"
    if normal == "numeric":
        return _numeric_hint(operand)
    if normal in _NORMAL_FOREIGN:
        return _FOREIGN[_NORMAL_FOREIGN[normal]]
    close = difflib.get_close_matches(name.lower().lstrip("$"), OPERATORS, n=1, cutoff=0.8)
    if close:
        return f"write {close[0]}, if you meant Relay's operator"
    return f"Relay's operators are {', '.join(OPERATORS)}, beside $or; see docs/templates.md"


def _numeric_hint(operand: object) -> str:
    """EventBridge's ``numeric: [">", 100]`` as Relay writes it: ``{gt: 100}``."""
    if isinstance(operand, list) and len(operand) == 2 and type(operand[1]) in (int, float):
        sign, number = operand
        if isinstance(sign, str) and sign in _COMPARISON_WORDS:
            return f"write {{{_COMPARISON_WORDS[sign]}: {show(number)}}}"
        if sign == "=":
            return f"write [{show(number)}]"
    return _FOREIGN["numeric"] + "; several on one field are alternatives (OR), not a range"


def looks_like_operator(name: object) -> bool:
    """Whether *name*, a key where Relay reads operators, looks like an operator Relay does not have."""
    if not isinstance(name, str) or name in OPERATORS or name == OR:
        return False
    normal = _normal(name)
    return (name.startswith("$") or normal in _NORMAL_OPERATORS or normal in _NORMAL_FOREIGN
            or bool(difflib.get_close_matches(name.lower(), OPERATORS, n=1, cutoff=0.8)))


def _operator_lookalikes(condition: Mapping[object, object], operators: list[str], path: str,
                         problems: Problems) -> None:
    """Warn of each key of *condition* (a field's mapping) that looks like an operator Relay does not have.

    ``$`` keys are left to ``_fields``, which sees them at every level; beside
    real operators such a key is already an error (a mapping that mixes both).
    """
    if operators:
        return
    for name, operand in condition.items():
        if isinstance(name, str) and not name.startswith("$") and looks_like_operator(name):
            problems.warn(join(path, name), f"{show(name)} is not an operator of Relay's patterns, so it is read as "
                                            f"a nested event field of that name, which events rarely have; "
                                            f"{operator_hint(name, operand)}")


def _operator(name: str, operand: object, path: str, problems: Problems) -> ValueTest | None:
    if name == "anything-but":
        return _anything_but(operand, path, problems)
    if name in _STRING_OPERATORS:
        strings = _string_list(operand, path, problems, name)
        if strings is None:
            return None
        if name == "prefix":
            return _prefix(tuple(strings))
        if name == "suffix":
            return _suffix(tuple(strings))
        if name == "equals-ignore-case":
            return _equals_ignore_case(strings)
        return _wildcard(strings)
    operands = _operand_list(operand, path, problems, name)
    if operands is None:
        return None
    if name == "equals":
        return _equality_test(operands)
    bounds = [_comparison_bound(value, path, problems) for value in operands]
    valid = [bound for bound in bounds if bound is not None]
    if len(valid) < len(bounds):
        return None
    return _comparison(_COMPARISONS[name], tuple(valid))


def _anything_but(operand: object, path: str, problems: Problems) -> ValueTest | None:
    """``anything-but: [values]`` or ``anything-but: {prefix: [strings]}``."""
    if not isinstance(operand, dict):
        operands = _operand_list(operand, path, problems, "anything-but")
        return None if operands is None else _anything_but_values(operands)
    if list(operand) != ["prefix"]:
        problems.add(path, f"takes a list of values, or {{prefix: [...]}} for strings starting with none of them; "
                           f"not {given(operand)}")
        return None
    prefixes = _string_list(operand["prefix"], join(path, "prefix"), problems, "anything-but prefix")
    return None if prefixes is None else _anything_but_prefix(tuple(prefixes))


def _string_list(operand: object, path: str, problems: Problems, what: str) -> list[str] | None:
    operands = _operand_list(operand, path, problems, what)
    if operands is None:
        return None
    strings = []
    for value in operands:
        if not isinstance(value, str):
            problems.add(path, f"{what} takes strings, not {given(value)}")
            return None
        strings.append(value)
    return strings


def _operand_list(operand: object, path: str, problems: Problems, what: str) -> list[Scalar] | None:
    operands: list[object] = operand if isinstance(operand, list) else [operand]
    if not operands:
        problems.add(path, f"{what} needs at least one value; an empty list can never match")
        return None
    scalars: list[Scalar] = []
    for index, value in enumerate(operands):
        if not isinstance(value, _SCALARS):
            where = join(path, index) if isinstance(operand, list) else path
            problems.add(where, f"{what} takes plain values (strings, numbers, booleans, null), not {given(value)}")
            return None
        scalars.append(value)
    return scalars


def _comparison_bound(value: Scalar, path: str, problems: Problems) -> Bound | None:
    """A numeric bound as ("number", n) or a now() offset as ("now", nanoseconds)."""
    if type(value) is int or type(value) is float:
        if isinstance(value, float) and math.isnan(value):
            problems.add(path, "NaN is not a number any value compares with")
            return None
        return ("number", value)
    if type(value) is str:
        found = _NOW.fullmatch(value)
        if found:
            sign, duration = found.groups()
            if sign is None:
                return ("now", 0)
            try:
                offset = parse_duration(duration)
            except DurationError as error:
                problems.add(path, f"{show(value)}: {reason(error, duration)}")
                return None
            return ("now", offset if sign == "+" else -offset)
        if value.startswith("now"):
            problems.add(path, f"{show(value)} is not a now() expression; write now(), now()-5m or now()+1h30m")
        else:
            problems.add(path, f"{show(value)} is neither a number nor a now() expression such as now()-5m")
        return None
    problems.add(path, f"takes a number or a now() expression, not {given(value)}")
    return None


# --- tests on a field of a dict -------------------------------------------------


def _equality_field(key: str, operands: list[Scalar], path: str, problems: Problems) -> Compiled:
    if all(type(value) is str for value in operands):
        strings = frozenset(operands)

        def test(container: JsonObject, now: Now) -> bool:
            value = container.get(key)
            return type(value) is str and value in strings
    else:
        equals = _equality_test(operands)

        def test(container: JsonObject, now: Now) -> bool:
            value = container.get(key, _MISSING)
            return value is not _MISSING and equals(value, now)

    return test, False


def _present_field(key: str, value_tests: tuple[ValueTest, ...], when_missing: bool) -> FieldTest:
    """A field whose alternatives (OR) are tests on its value when it is present."""
    if len(value_tests) == 1:
        (only,) = value_tests

        def test(container: JsonObject, now: Now) -> bool:
            value = container.get(key, _MISSING)
            if value is _MISSING:
                return when_missing
            return only(value, now)
    else:
        def test(container: JsonObject, now: Now) -> bool:
            value = container.get(key, _MISSING)
            if value is _MISSING:
                return when_missing
            for alternative in value_tests:
                if alternative(value, now):
                    return True
            return False

    return test


# --- tests on a value that is present ------------------------------------------


def _always(value: object, now: Now) -> bool:
    return True


def _never(value: object, now: Now) -> bool:
    return False


def _equality_test(operands: list[Scalar]) -> ValueTest:
    """Type-preserving equality: 1 == 1.0, but True != 1 and "1" != 1."""
    strings = frozenset(value for value in operands if type(value) is str)
    numbers = frozenset(value for value in operands if type(value) in (int, float))
    booleans = frozenset(value for value in operands if type(value) is bool)
    null = any(value is None for value in operands)

    def test(value: object, now: Now) -> bool:
        kind = type(value)
        if kind is str:
            return value in strings
        if kind is int or kind is float:
            return value in numbers
        if kind is bool:
            return value in booleans
        return null and value is None

    return test


def _prefix(prefixes: tuple[str, ...]) -> ValueTest:
    def test(value: object, now: Now) -> bool:
        return type(value) is str and value.startswith(prefixes)

    return test


def _suffix(suffixes: tuple[str, ...]) -> ValueTest:
    def test(value: object, now: Now) -> bool:
        return type(value) is str and value.endswith(suffixes)

    return test


def _anything_but_values(operands: list[Scalar]) -> ValueTest:
    """Present and equal to none of *operands*: the complement of equality."""
    if all(type(value) is str for value in operands):
        strings = frozenset(operands)

        def test(value: object, now: Now) -> bool:
            return type(value) is not str or value not in strings

        return test
    equals = _equality_test(operands)

    def test_any(value: object, now: Now) -> bool:
        return not equals(value, now)

    return test_any


def _anything_but_prefix(prefixes: tuple[str, ...]) -> ValueTest:
    def test(value: object, now: Now) -> bool:
        return type(value) is str and not value.startswith(prefixes)

    return test


def _equals_ignore_case(strings: list[str]) -> ValueTest:
    folded = frozenset(string.casefold() for string in strings)

    def test(value: object, now: Now) -> bool:
        return type(value) is str and value.casefold() in folded

    return test


def _wildcard(patterns: list[str]) -> ValueTest:
    """Whole strings that fit one of *patterns*, where ``*`` stands for any run of characters."""
    exact = frozenset(pattern for pattern in patterns if "*" not in pattern)
    globs = tuple(_glob(pattern) for pattern in patterns if "*" in pattern)

    def test(value: object, now: Now) -> bool:
        if type(value) is not str:
            return False
        if value in exact:
            return True
        for fits in globs:
            if fits(value):
                return True
        return False

    return test


def _glob(pattern: str) -> Callable[[str], bool]:
    """A linear-time test that a string fits *pattern* (``*`` and literal text).

    The text before the first ``*`` must start the string and the text after
    the last must end it; each piece between is then found at its leftmost
    place after the one before. Leftmost is always best (it leaves the most
    room for what follows), so nothing is ever retried: each piece is
    searched for once, and the search only moves forward. No regular
    expression, so no backtracking, whatever the pattern.
    """
    first, *middle, last = pattern.split("*")
    pieces = tuple(piece for piece in middle if piece)
    shortest = len(first) + len(last) + sum(len(piece) for piece in pieces)
    start = len(first)
    tail = len(last)

    def fits(value: str) -> bool:
        if len(value) < shortest or not value.startswith(first) or not value.endswith(last):
            return False
        position, end = start, len(value) - tail
        for piece in pieces:
            found = value.find(piece, position, end)
            if found < 0:
                return False
            position = found + len(piece)
        return True

    return fits


def _comparison(compare: Callable[[float, float], bool], bounds: tuple[Bound, ...]) -> ValueTest:
    numbers = tuple(bound for kind, bound in bounds if kind == "number")
    offsets = tuple(bound for kind, bound in bounds if kind == "now")

    def test(value: object, now: Now) -> bool:
        if type(value) is int or type(value) is float:
            for bound in numbers:
                if compare(value, bound):
                    return True
            return False
        if type(value) is str and offsets:
            instant = _instant(value)
            if instant is None:
                return False
            if now is None:
                reference = time.time_ns()
            else:
                last = _last_now[0]
                reference = last[1] if now is last[0] else _nanoseconds(now)
            for offset in offsets:
                if compare(instant, reference + offset):
                    return True
        return False

    return test


def _instant(text: str) -> int | None:
    """Nanoseconds since the epoch of an RFC 3339 timestamp with offset, or None.

    Day arithmetic with date.toordinal rather than aware datetimes: this runs
    for every event a now() comparison looks at, and is several times faster.
    """
    found = _RFC3339.fullmatch(text)
    if found is None:
        return None
    year, month, day, hour, minute, second, fraction, zulu, sign, off_hour, off_minute = found.groups()
    hour, minute, second = int(hour), int(minute), int(second)
    if hour > 23 or minute > 59 or second > 59:
        return None
    try:
        days = date(int(year), int(month), int(day)).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        return None
    offset = 0
    if not zulu:
        if int(off_hour) > 23 or int(off_minute) > 59:
            return None
        offset = (int(off_hour) * 60 + int(off_minute)) * 60 * (1 if sign == "+" else -1)
    fraction_ns = int(fraction.ljust(9, "0")) if fraction else 0
    seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset
    return seconds * 1_000_000_000 + fraction_ns


_last_now: list[tuple[Now, int]] = [(None, 0)]  # holds the last datetime _nanoseconds converted, with its answer


def _nanoseconds(now: datetime) -> int:
    aware = now.replace(tzinfo=UTC) if now.tzinfo is None else now
    delta = aware - _EPOCH
    nanoseconds = (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
    _last_now[0] = (now, nanoseconds)
    return nanoseconds
