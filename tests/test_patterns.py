"""The pattern compiler: every operator, the algebra, and 'never raises'."""

import json
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.errors import TemplateError
from relay.functions import compile_pattern

NOW = datetime(2026, 9, 13, 12, 0, 0, tzinfo=UTC)


def matches(pattern, event, now=NOW):
    return compile_pattern(pattern).matches(event, now=now)


# --- accepted patterns: (pattern, event, expected) ---------------------------------

CASES = [
    # implicit equality lists (OR within the list)
    ({"status": ["COMPLETED", "FAILED"]}, {"status": "FAILED"}, True),
    ({"status": ["COMPLETED", "FAILED"]}, {"status": "PENDING"}, False),
    ({"status": ["COMPLETED"]}, {}, False),
    ({"status": ["COMPLETED"]}, {"status": None}, False),
    ({"status": ["COMPLETED"]}, {"status": ["COMPLETED"]}, False),
    ({"n": [1]}, {"n": 1.0}, True),
    ({"n": [1.0]}, {"n": 1}, True),
    ({"n": [1]}, {"n": True}, False),
    ({"n": [True]}, {"n": 1}, False),
    ({"n": [True]}, {"n": True}, True),
    ({"n": [False]}, {"n": 0}, False),
    ({"n": [0]}, {"n": False}, False),
    ({"n": ["1"]}, {"n": 1}, False),
    ({"n": [1]}, {"n": "1"}, False),
    ({"n": [None]}, {"n": None}, True),
    ({"n": [None]}, {}, False),
    ({"n": [None, "x"]}, {"n": "x"}, True),
    ({"n": [2 ** 60]}, {"n": 2 ** 60}, True),
    # equals operator, scalar or list
    ({"n": {"equals": [1, "a"]}}, {"n": "a"}, True),
    ({"n": {"equals": 5}}, {"n": 5.0}, True),
    ({"n": {"equals": [True]}}, {"n": 1}, False),
    # siblings are AND
    ({"a": ["x"], "b": ["y"]}, {"a": "x", "b": "y"}, True),
    ({"a": ["x"], "b": ["y"]}, {"a": "x", "b": "z"}, False),
    ({"a": ["x"], "b": ["y"]}, {"a": "x"}, False),
    # extra fields are ignored
    ({"a": ["x"]}, {"a": "x", "b": {"deep": [1, 2]}}, True),
    # nested fields
    ({"new_image": {"id": {"prefix": ["user_"]}}}, {"new_image": {"id": "user_123"}}, True),
    ({"new_image": {"id": {"prefix": ["user_"]}}}, {"new_image": {"id": "123"}}, False),
    ({"new_image": {"id": {"prefix": ["user_"]}}}, {"new_image": "user_123"}, False),
    ({"new_image": {"id": {"prefix": ["user_"]}}}, {}, False),
    ({"a": {"b": {"c": ["d"]}}}, {"a": {"b": {"c": "d"}}}, True),
    ({"a": {"b": {"c": ["d"]}}}, {"a": {"b": None}}, False),
    # prefix / suffix: strings only
    ({"id": {"prefix": ["user_", "acct_"]}}, {"id": "acct_9"}, True),
    ({"id": {"prefix": ["1"]}}, {"id": 123}, False),
    ({"id": {"suffix": [".png", ".jpg"]}}, {"id": "a.jpg"}, True),
    ({"id": {"suffix": [".png"]}}, {"id": "a.jpg"}, False),
    ({"id": {"suffix": ["1"]}}, {"id": 1}, False),
    ({"id": {"prefix": [""]}}, {"id": ""}, True),
    # exists
    ({"name": {"exists": True}}, {"name": None}, True),
    ({"name": {"exists": True}}, {}, False),
    ({"name": {"exists": False}}, {}, True),
    ({"name": {"exists": False}}, {"name": None}, False),
    ({"new_image": {"exists": True}}, {"new_image": {}}, True),
    ({"new_image": {"name": {"exists": True}}}, {"new_image": {"name": 1}}, True),
    ({"new_image": {"name": {"exists": True}}}, {}, False),
    ({"new_image": {"name": {"exists": True}}}, {"new_image": "flat"}, False),
    ({"new_image": {"name": {"exists": False}}}, {}, True),
    ({"new_image": {"name": {"exists": False}}}, {"new_image": None}, True),
    ({"new_image": {"name": {"exists": False}}}, {"new_image": {"other": 1}}, True),
    ({"new_image": {"name": {"exists": False}}}, {"new_image": {"name": None}}, False),
    ({"a": {"b": {"c": {"exists": False}}}}, {}, True),
    ({"a": {"b": {"c": {"exists": False}}, "d": ["x"]}}, {}, False),
    # several operators on one field are OR
    ({"name": {"exists": False, "prefix": ["12"]}}, {}, True),
    ({"name": {"exists": False, "prefix": ["12"]}}, {"name": "123"}, True),
    ({"name": {"exists": False, "prefix": ["12"]}}, {"name": "23"}, False),
    ({"age": {"lt": 18, "gt": 65}}, {"age": 70}, True),
    ({"age": {"lt": 18, "gt": 65}}, {"age": 30}, False),
    # numeric comparisons
    ({"price": {"lte": 100.5}}, {"price": 100.5}, True),
    ({"price": {"lte": 100.5}}, {"price": 100.6}, False),
    ({"age": {"gt": 18}}, {"age": 19}, True),
    ({"age": {"gt": 18}}, {"age": 18}, False),
    ({"age": {"gte": 18}}, {"age": 18.0}, True),
    ({"age": {"lt": 18}}, {"age": 17.9}, True),
    ({"age": {"gt": 18}}, {"age": "19"}, False),
    ({"age": {"gt": 0}}, {"age": True}, False),
    ({"age": {"gt": 18}}, {"age": None}, False),
    ({"age": {"gt": 18}}, {}, False),
    ({"age": {"gt": [100, 18]}}, {"age": 50}, True),
    ({"age": {"gt": 18}}, {"age": "2026-09-13T12:00:00Z"}, False),
    # temporal comparisons (NOW = 2026-09-13T12:00:00Z)
    ({"t": {"gt": "now()-5m"}}, {"t": "2026-09-13T11:56:00Z"}, True),
    ({"t": {"gt": "now()-5m"}}, {"t": "2026-09-13T11:54:00Z"}, False),
    ({"t": {"gt": "now()-5m"}}, {"t": "2026-09-13T13:56:00+02:00"}, True),
    ({"t": {"gt": "now()-5m"}}, {"t": "2026-09-13T07:56:00-04:00"}, True),
    ({"t": {"gt": "now()-5m"}}, {"t": "2026-09-13T11:56:00+02:00"}, False),
    ({"t": {"gte": "now()"}}, {"t": "2026-09-13T12:00:00Z"}, True),
    ({"t": {"gt": "now()"}}, {"t": "2026-09-13T12:00:00Z"}, False),
    ({"t": {"gt": "now()"}}, {"t": "2026-09-13T12:00:00.000000001Z"}, True),
    ({"t": {"lt": "now()+10m"}}, {"t": "2026-09-13T12:09:59.999Z"}, True),
    ({"t": {"lt": "now()+10m"}}, {"t": "2026-09-13T12:10:00Z"}, False),
    ({"t": {"lte": "now()+0s"}}, {"t": "2026-09-13T12:00:00Z"}, True),
    ({"t": {"gt": "now()-1h30m"}}, {"t": "2026-09-13T10:31:00Z"}, True),
    ({"t": {"gt": "now()-24h"}}, {"t": "2026-09-12T12:00:01Z"}, True),
    ({"t": {"gte": "now()-1h", "lt": "now()"}}, {"t": "2026-09-13T15:00:00Z"}, True),
    ({"t": {"gt": "now()-5m"}}, {"t": "2026-09-13 11:56:00Z"}, False),
    ({"t": {"gt": "now()-5m"}}, {"t": "2026-09-13T11:56:00"}, False),
    ({"t": {"gt": "now()-5m"}}, {"t": "2026-02-30T11:56:00Z"}, False),
    ({"t": {"gt": "now()-5m"}}, {"t": "2026-09-13T24:00:00Z"}, False),
    ({"t": {"gt": "now()-5m"}}, {"t": "2026-09-13T11:56:00+25:00"}, False),
    ({"t": {"gt": "now()-5m"}}, {"t": "yesterday"}, False),
    ({"t": {"gt": "now()-5m"}}, {"t": 1789300000}, False),
    ({"t": {"gt": "now()-5m"}}, {"t": None}, False),
    ({"t": {"gt": "now()-5m"}}, {}, False),
    ({"t": {"gt": ["now()-5m", 10]}}, {"t": 11}, True),
    # anything-but: present and none of the values (type-preserving, as equals)
    ({"s": {"anything-but": ["DELETED", "ARCHIVED"]}}, {"s": "ACTIVE"}, True),
    ({"s": {"anything-but": ["DELETED", "ARCHIVED"]}}, {"s": "ARCHIVED"}, False),
    ({"s": {"anything-but": ["DELETED"]}}, {}, False),
    ({"s": {"anything-but": ["DELETED"]}}, {"s": None}, True),
    ({"s": {"anything-but": ["DELETED"]}}, {"s": ["DELETED"]}, True),
    ({"s": {"anything-but": ["DELETED"]}}, {"s": {"DELETED": 1}}, True),
    ({"s": {"anything-but": "DELETED"}}, {"s": "deleted"}, True),
    ({"n": {"anything-but": [1, 2]}}, {"n": 1.0}, False),
    ({"n": {"anything-but": [1, 2]}}, {"n": 3}, True),
    ({"n": {"anything-but": [1]}}, {"n": "1"}, True),
    ({"n": {"anything-but": [1]}}, {"n": True}, True),
    ({"n": {"anything-but": [True]}}, {"n": True}, False),
    ({"n": {"anything-but": [True]}}, {"n": 1}, True),
    ({"n": {"anything-but": ["1"]}}, {"n": 1}, True),
    ({"n": {"anything-but": [None]}}, {"n": None}, False),
    ({"n": {"anything-but": [None]}}, {"n": 0}, True),
    ({"n": {"anything-but": [None]}}, {}, False),
    ({"s": {"anything-but": ["x"], "exists": False}}, {}, True),
    ({"s": {"anything-but": ["x"], "exists": False}}, {"s": "x"}, False),
    ({"a": {"b": {"anything-but": ["x"]}}}, {"a": {"b": "y"}}, True),
    ({"a": {"b": {"anything-but": ["x"]}}}, {"a": "flat"}, False),
    ({"a": {"b": {"anything-but": ["x"]}}}, {}, False),
    # anything-but prefix: a string starting with none of them
    ({"id": {"anything-but": {"prefix": ["test_", "tmp_"]}}}, {"id": "user_1"}, True),
    ({"id": {"anything-but": {"prefix": ["test_", "tmp_"]}}}, {"id": "tmp_1"}, False),
    ({"id": {"anything-but": {"prefix": ["test_"]}}}, {"id": "TEST_1"}, True),
    ({"id": {"anything-but": {"prefix": ["test_"]}}}, {"id": 5}, False),
    ({"id": {"anything-but": {"prefix": ["test_"]}}}, {"id": None}, False),
    ({"id": {"anything-but": {"prefix": ["test_"]}}}, {}, False),
    ({"id": {"anything-but": {"prefix": "x"}}}, {"id": ""}, True),
    ({"id": {"anything-but": {"prefix": [""]}}}, {"id": "a"}, False),
    # equals-ignore-case: strings, compared casefolded
    ({"s": {"equals-ignore-case": ["Paid", "shipped"]}}, {"s": "PAID"}, True),
    ({"s": {"equals-ignore-case": ["Paid", "shipped"]}}, {"s": "Shipped"}, True),
    ({"s": {"equals-ignore-case": ["Paid"]}}, {"s": "paid "}, False),
    ({"s": {"equals-ignore-case": ["Paid"]}}, {}, False),
    ({"s": {"equals-ignore-case": ["Paid"]}}, {"s": None}, False),
    ({"s": {"equals-ignore-case": ["Paid"]}}, {"s": ["paid"]}, False),
    ({"s": {"equals-ignore-case": "straße"}}, {"s": "STRASSE"}, True),
    ({"s": {"equals-ignore-case": ["ǅ"]}}, {"s": "ǆ"}, True),
    ({"n": {"equals-ignore-case": ["1"]}}, {"n": 1}, False),
    ({"n": {"equals-ignore-case": ["true"]}}, {"n": True}, False),
    # wildcard: * for any run (even empty), the whole string, case-sensitive, nothing else special
    ({"e": {"wildcard": ["user_*@example.com"]}}, {"e": "user_bob@example.com"}, True),
    ({"e": {"wildcard": ["user_*@example.com"]}}, {"e": "user_@example.com"}, True),
    ({"e": {"wildcard": ["user_*@example.com"]}}, {"e": "USER_bob@example.com"}, False),
    ({"e": {"wildcard": ["user_*@example.com"]}}, {"e": "user_bob@example.com.evil"}, False),
    ({"e": {"wildcard": ["user_*@example.com"]}}, {"e": "xuser_bob@example.com"}, False),
    ({"e": {"wildcard": ["user_*@example.com"]}}, {}, False),
    ({"e": {"wildcard": ["*"]}}, {"e": ""}, True),
    ({"e": {"wildcard": ["*"]}}, {"e": 1}, False),
    ({"e": {"wildcard": ["*"]}}, {"e": None}, False),
    ({"e": {"wildcard": ["1*"]}}, {"e": 12}, False),
    ({"e": {"wildcard": ["a*a"]}}, {"e": "a"}, False),
    ({"e": {"wildcard": ["a*a"]}}, {"e": "aa"}, True),
    ({"e": {"wildcard": ["ab*ba"]}}, {"e": "aba"}, False),
    ({"e": {"wildcard": ["a**b"]}}, {"e": "ab"}, True),
    ({"e": {"wildcard": ["*ab*ab*"]}}, {"e": "xabyab"}, True),
    ({"e": {"wildcard": ["*ab*ab*"]}}, {"e": "abab"}, True),
    ({"e": {"wildcard": ["*ab*ab*"]}}, {"e": "aba"}, False),
    ({"e": {"wildcard": ["*.png", "img_*"]}}, {"e": "img_1.jpg"}, True),
    ({"e": {"wildcard": ["*.png", "img_*"]}}, {"e": "a.jpg"}, False),
    ({"e": {"wildcard": "exact"}}, {"e": "exact"}, True),
    ({"e": {"wildcard": ["exact"]}}, {"e": "exactly"}, False),
    ({"e": {"wildcard": ["a.c"]}}, {"e": "abc"}, False),
    ({"e": {"wildcard": ["a?c"]}}, {"e": "abc"}, False),
    ({"e": {"wildcard": ["a[b]c"]}}, {"e": "a[b]c"}, True),
    ({"e": {"wildcard": ["a*c"]}}, {"e": "a\nc"}, True),
    ({"e": {"wildcard": ["a\\*"]}}, {"e": "a\\x"}, True),
    # $or: one of its patterns, at any level, ANDed with its siblings
    ({"$or": [{"a": ["x"]}, {"b": ["y"]}]}, {"b": "y"}, True),
    ({"$or": [{"a": ["x"]}, {"b": ["y"]}]}, {"a": "x", "b": "n"}, True),
    ({"$or": [{"a": ["x"]}, {"b": ["y"]}]}, {"a": "y"}, False),
    ({"$or": [{"a": ["x"]}, {"b": ["y"]}]}, {}, False),
    ({"$or": [{"a": ["x"]}]}, {"a": "x"}, True),
    ({"$or": [{"a": ["x"]}, {"b": ["y"]}, {"c": {"gt": 1}}]}, {"c": 2}, True),
    ({"$or": [{"a": ["x"]}, {"b": ["y"]}, {"c": {"gt": 1}}]}, {"c": 1}, False),
    ({"c": ["z"], "$or": [{"a": ["x"]}, {"b": ["y"]}]}, {"a": "x"}, False),
    ({"c": ["z"], "$or": [{"a": ["x"]}, {"b": ["y"]}]}, {"a": "x", "c": "z"}, True),
    ({"c": ["z"], "$or": [{"a": ["x"]}, {"b": ["y"]}]}, {"b": "n", "c": "z"}, False),
    ({"$or": [{"a": ["x"], "b": ["y"]}, {"c": ["z"]}]}, {"a": "x"}, False),
    ({"$or": [{"a": ["x"], "b": ["y"]}, {"c": ["z"]}]}, {"a": "x", "b": "y"}, True),
    ({"$or": [{"a": ["x"]}, {"$or": [{"b": ["y"]}, {"c": ["z"]}]}]}, {"c": "z"}, True),
    ({"$or": [{"a": ["x"]}, {"$or": [{"b": ["y"]}, {"c": ["z"]}]}]}, {"c": "y"}, False),
    ({"n": {"$or": [{"a": ["x"]}, {"b": {"gt": 1}}]}}, {"n": {"b": 2}}, True),
    ({"n": {"$or": [{"a": ["x"]}, {"b": {"gt": 1}}]}}, {"n": {"b": 0}}, False),
    ({"n": {"$or": [{"a": ["x"]}, {"b": {"gt": 1}}]}}, {"n": "x"}, False),
    ({"n": {"$or": [{"a": ["x"]}, {"b": {"gt": 1}}]}}, {"b": 2}, False),
    ({"n": {"$or": [{"a": ["x"]}], "m": ["q"]}}, {"n": {"a": "x", "m": "q"}}, True),
    ({"n": {"$or": [{"a": ["x"]}], "m": ["q"]}}, {"n": {"a": "x"}}, False),
    ({"n": {"$or": [{"a": {"exists": False}}, {"b": ["y"]}]}}, {}, True),
    ({"n": {"$or": [{"a": {"exists": False}}, {"b": ["y"]}]}}, {"n": None}, True),
    ({"n": {"$or": [{"a": {"exists": False}}, {"b": ["y"]}]}}, {"n": {"a": 1}}, False),
    ({"n": {"$or": [{"a": ["x"]}, {"b": ["y"]}]}, "o": {"exists": False}}, {}, False),
    ({"$or": [{"s": {"anything-but": ["x"]}}, {"t": {"wildcard": ["a*"]}}]}, {"s": "x", "t": "ab"}, True),
    # at the top of a pattern or of a $or pattern, an operator's name is a field name, as prefix always was
    ({"wildcard": ["x"]}, {"wildcard": "x"}, True),
    ({"anything-but": ["x"]}, {"anything-but": "x"}, True),
    ({"$or": [{"equals-ignore-case": ["x"]}]}, {"equals-ignore-case": "x"}, True),
]


@pytest.mark.parametrize(("pattern", "event", "expected"), CASES)
def test_semantics(pattern, event, expected):
    assert matches(pattern, event) is expected


def test_now_defaults_to_the_time_of_the_call():
    pattern = compile_pattern({"t": {"gt": "now()-5m"}})
    recent = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    old = (datetime.now(UTC) - timedelta(minutes=6)).isoformat()
    assert pattern.matches({"t": recent}) and not pattern.matches({"t": old})


@settings(max_examples=500, deadline=None)
@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
       st.integers(-23 * 60 - 59, 23 * 60 + 59))
def test_timestamps_are_read_to_the_nanosecond_at_any_offset(moment, offset_minutes):
    """Checked against datetime's own arithmetic, for every date and offset RFC 3339 allows."""
    from relay.functions.patterns import _instant

    aware = moment.replace(tzinfo=timezone(timedelta(minutes=offset_minutes)))
    expected = (aware - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000
    assert _instant(aware.isoformat()) == expected
    assert _instant(aware.replace(tzinfo=None).isoformat(timespec="seconds") + "Z") == (
        expected - moment.microsecond * 1000 + offset_minutes * 60 * 1_000_000_000)


def test_naive_now_means_utc():
    assert matches({"t": {"gte": "now()"}}, {"t": "2026-09-13T12:00:00Z"}, now=NOW.replace(tzinfo=None))


def test_non_object_events_never_match():
    pattern = compile_pattern({"a": {"exists": False}})
    for event in (None, [], "a", 1, True):
        assert pattern.matches(event) is False


# --- rejected patterns: every problem with its field path ---------------------------

REJECTED = [
    ("x", "pattern: must be a mapping of event fields to conditions"),
    ({}, "pattern: must be a mapping of event fields to conditions"),
    ({"a": "x"}, 'pattern.a: "x" is a single value; equality takes a list, e.g. [x]'),
    ({"a": 1}, "pattern.a: 1 is a single value; equality takes a list, e.g. [1]"),
    ({"a": True}, "pattern.a: true is a single value; equality takes a list, e.g. [true]"),
    ({"a": ["x", {"b": 1}]}, "pattern.a[1]: implicit equality takes plain values"),
    ({"a": None}, "pattern.a: must be a list of values"),
    ({"a": {}}, "pattern.a: must be a list of values"),
    ({"a": []}, "pattern.a: implicit equality needs at least one value"),
    ({"a": [["x"]]}, "pattern.a[0]: implicit equality takes plain values"),
    ({"a": [{"b": 1}]}, "pattern.a[0]: implicit equality takes plain values"),
    ({"a": {"equals": [1], "b": [2]}}, "pattern.a: mixes operators (equals) with nested fields (b)"),
    ({"a": {"equals": []}}, "pattern.a.equals: equals needs at least one value"),
    ({"a": {"prefix": [1]}}, "pattern.a.prefix: prefix takes strings, not the number 1"),
    ({"a": {"suffix": True}}, "pattern.a.suffix: suffix takes strings, not the boolean true"),
    ({"a": {"prefix": [None]}}, "pattern.a.prefix: prefix takes strings, not an empty value (null)"),
    ({"a": {"exists": "true"}}, 'pattern.a.exists: must be true or false, not the string "true"'),
    ({"a": {"exists": 1}}, "pattern.a.exists: must be true or false, not the number 1"),
    ({"a": {"exists": None}}, "pattern.a.exists: must be true or false, not an empty value (null)"),
    ({"a": {"exists": [True]}}, "pattern.a.exists: must be true or false, not the list [true]"),
    ({"a": {"gt": "2026-09-12T10:00:00Z"}},
     'pattern.a.gt: "2026-09-12T10:00:00Z" is neither a number nor a now() expression'),
    ({"a": {"gt": "now"}}, 'pattern.a.gt: "now" is not a now() expression'),
    ({"a": {"gt": "now-5m"}}, 'pattern.a.gt: "now-5m" is not a now() expression'),
    ({"a": {"lt": "now()-5d"}}, 'pattern.a.lt: "now()-5d": unknown unit "d"'),
    ({"a": {"lt": "now()-"}}, 'pattern.a.lt: "now()-" is not a now() expression'),
    ({"a": {"lt": "now()--5m"}}, 'pattern.a.lt: "now()--5m" is not a now() expression'),
    ({"a": {"lt": "now()5m"}}, 'pattern.a.lt: "now()5m" is not a now() expression'),
    ({"a": {"lt": " now()"}}, 'pattern.a.lt: " now()" is neither a number nor a now() expression'),
    ({"a": {"gte": True}}, "pattern.a.gte: takes a number or a now() expression, not the boolean true"),
    ({"a": {"gte": None}}, "pattern.a.gte: takes a number or a now() expression, not an empty value (null)"),
    ({"a": {"gte": float("nan")}}, "pattern.a.gte: NaN is not a number"),
    ({"a": {"gte": [1, "soon"]}}, 'pattern.a.gte: "soon" is neither a number nor a now() expression'),
    ({"created_at": {"gt": {"nested": 1}}}, "pattern.created_at.gt: gt takes plain values"),
    ({1: ["x"]}, "pattern[1]: field name 1 is not a string"),
    ({"a": {"b": {"exists": "no"}}}, "pattern.a.b.exists: must be true or false"),
    ({"a": {"anything-but": []}}, "pattern.a.anything-but: anything-but needs at least one value"),
    ({"a": {"anything-but": [{"b": 1}]}}, "pattern.a.anything-but[0]: anything-but takes plain values"),
    ({"a": {"anything-but": {"suffix": ["x"]}}},
     "pattern.a.anything-but: takes a list of values, or {prefix: [...]} for strings starting with none of them; "
     'not the mapping {"suffix": ["x"]}'),
    ({"a": {"anything-but": {}}}, "pattern.a.anything-but: takes a list of values, or {prefix: [...]}"),
    ({"a": {"anything-but": {"prefix": ["x"], "equals": ["y"]}}},
     "pattern.a.anything-but: takes a list of values, or {prefix: [...]}"),
    ({"a": {"anything-but": {"prefix": [1]}}},
     "pattern.a.anything-but.prefix: anything-but prefix takes strings, not the number 1"),
    ({"a": {"anything-but": {"prefix": []}}}, "pattern.a.anything-but.prefix: anything-but prefix needs at least one"),
    ({"a": {"anything-but": {"prefix": {"b": "c"}}}},
     "pattern.a.anything-but.prefix: anything-but prefix takes plain values"),
    ({"a": {"equals-ignore-case": [1]}},
     "pattern.a.equals-ignore-case: equals-ignore-case takes strings, not the number 1"),
    ({"a": {"equals-ignore-case": []}}, "pattern.a.equals-ignore-case: equals-ignore-case needs at least one value"),
    ({"a": {"wildcard": [None]}}, "pattern.a.wildcard: wildcard takes strings, not an empty value (null)"),
    ({"a": {"wildcard": ["x", ["y"]]}}, "pattern.a.wildcard[1]: wildcard takes plain values"),
    ({"a": {"wildcard": ["x*"], "b": ["y"]}}, "pattern.a: mixes operators (wildcard) with nested fields (b)"),
    ({"$or": "x"}, "pattern.$or: must be a non-empty list of patterns (mappings of event fields to conditions), "
                   'not the string "x"'),
    ({"$or": []}, "pattern.$or: must be a non-empty list of patterns"),
    ({"$or": {"a": ["x"]}}, "pattern.$or: must be a non-empty list of patterns"),
    ({"$or": [{"a": ["x"]}, 1]}, "pattern.$or[1]: must be a mapping of event fields to conditions, not the number 1"),
    ({"$or": [{"a": ["x"]}, {}]},
     "pattern.$or[1]: must be a mapping of event fields to conditions, not an empty mapping"),
    ({"$or": [["a"]]}, 'pattern.$or[0]: must be a mapping of event fields to conditions, not the list ["a"]'),
    ({"n": {"$or": [{"a": "x"}]}}, 'pattern.n.$or[0].a: "x" is a single value'),
    ({"n": {"$or": None}}, "pattern.n.$or: must be a non-empty list of patterns"),
    ({"$or": [{"b": {"$or": [{"c": {"wildcard": [2]}}]}}]},
     "pattern.$or[0].b.$or[0].c.wildcard: wildcard takes strings, not the number 2"),
    ({"n": {"prefix": ["a"], "$or": [{"a": ["x"]}]}}, "pattern.n: mixes operators (prefix) with nested fields ($or)"),
]


@pytest.mark.parametrize(("pattern", "message"), REJECTED)
def test_rejected_with_the_field_path(pattern, message):
    with pytest.raises(TemplateError) as caught:
        compile_pattern(pattern)
    assert message in str(caught.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(TemplateError) as caught:
        compile_pattern({"a": [], "b": {"exists": 1}, "c": {"d": {"gt": "now"}}})
    text = str(caught.value)
    assert text.startswith("pattern: 3 problems")
    for path in ("pattern.a:", "pattern.b.exists:", "pattern.c.d.gt:"):
        assert path in text


def test_every_problem_in_every_or_pattern_is_reported_at_once():
    with pytest.raises(TemplateError) as caught:
        compile_pattern({"$or": [{"a": []}, 5, {"b": {"anything-but": {"suffix": "x"}}}], "c": {"wildcard": [1]}})
    text = str(caught.value)
    assert text.startswith("pattern: 4 problems")
    for path in ("pattern.$or[0].a:", "pattern.$or[1]:", "pattern.$or[2].b.anything-but:", "pattern.c.wildcard:"):
        assert path in text


def test_a_problem_in_a_rule_has_the_rule_path():
    from relay.functions import parse_template

    with pytest.raises(TemplateError) as caught:
        parse_template(json.dumps({"runtime": "python3.14", "events": [
            {"handler": "a.handler", "pattern": {"$or": [{"kind": ["x"]}, "y"]}}]}), "f/template.yaml")
    assert ('events[0].pattern.$or[1]: must be a mapping of event fields to conditions, not the string "y"'
            in str(caught.value))


# --- wildcard: linear whatever the pattern -------------------------------------------


def test_a_hostile_wildcard_against_100_kb_is_answered_without_backtracking():
    """The regular expression .*a.*a.*a.*a.*a.*b backtracks (3 s on 100 characters here); a wildcard does not."""
    text = "a" * 100_000
    assert not matches({"e": {"wildcard": ["*a*a*a*a*a*b"]}}, {"e": text})
    assert not matches({"e": {"wildcard": ["*a*a*a*a*a*b*a"]}}, {"e": text})
    assert not matches({"e": {"wildcard": ["a*a*a*a*a*ab*"]}}, {"e": text})
    assert matches({"e": {"wildcard": ["*a*a*a*a*a*a"]}}, {"e": text})
    assert matches({"e": {"wildcard": ["*a*a*a*a*a*b"]}}, {"e": text + "b"})
    assert matches({"e": {"wildcard": ["*a*a*a*a*a*b*a"]}}, {"e": text + "b" + text})


def _glob_reference(pattern, text):
    """The meaning of a wildcard, written the slow way: a regular expression (fine on short strings)."""
    return re.fullmatch(".*".join(re.escape(piece) for piece in pattern.split("*")), text, re.DOTALL) is not None


@settings(max_examples=1000)
@given(st.text(alphabet="ab*", max_size=8), st.text(alphabet="ab\n", max_size=12))
def test_wildcard_agrees_with_a_regular_expression(pattern, text):
    assert matches({"e": {"wildcard": [pattern]}}, {"e": text}) is _glob_reference(pattern, text)


# --- an explicit now ---------------------------------------------------------------------


def test_an_explicit_now_is_converted_once_for_many_patterns(monkeypatch):
    """One event against many patterns at one instant converts the instant once, not once a pattern."""
    from relay.functions import patterns as module

    conversions = []
    convert = module._nanoseconds
    monkeypatch.setattr(module, "_nanoseconds", lambda now: conversions.append(now) or convert(now))
    timed = [compile_pattern({"t": {"gt": f"now()-{minutes}m"}}) for minutes in range(1, 31)]
    plain = [compile_pattern({"s": ["x"]}) for _ in range(30)]
    instant = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    event = {"s": "x", "t": "2030-01-01T11:50:00Z"}
    assert [pattern.matches(event, now=instant) for pattern in plain] == [True] * 30
    assert conversions == []
    assert [pattern.matches(event, now=instant) for pattern in timed] == [False] * 10 + [True] * 20
    assert conversions == [instant]


def test_a_new_now_is_not_answered_with_the_last_one():
    pattern = compile_pattern({"t": {"gt": "now()-5m"}})
    event = {"t": "2026-09-13T11:56:00Z"}
    assert pattern.matches(event, now=NOW)
    assert not pattern.matches(event, now=NOW + timedelta(hours=1))
    assert pattern.matches(event, now=NOW.replace(tzinfo=None))
    assert not pattern.matches(event, now=(NOW + timedelta(hours=1)).replace(tzinfo=None))
    assert pattern.matches(event, now=NOW)


# --- the algebra, as properties -----------------------------------------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(-5, 5, allow_nan=False),
                    st.sampled_from(["a", "b", "ab", "ba", "", "1"]))
json_values = st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                     st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)),
    max_leaves=8)
events = st.dictionaries(st.sampled_from(["a", "b", "c", "t"]), json_values, max_size=4)
field_names = st.sampled_from(["a", "b", "c"])
operands = st.lists(scalars, min_size=1, max_size=3)


@given(field_names, operands, events)
def test_list_values_are_or(field, values, event):
    combined = matches({field: values}, event)
    assert combined == any(matches({field: [value]}, event) for value in values)


@given(field_names, st.lists(st.sampled_from(["a", "b", "", "ab"]), min_size=1, max_size=3), events)
def test_prefix_values_are_or(field, prefixes, event):
    combined = matches({field: {"prefix": prefixes}}, event)
    assert combined == any(matches({field: {"prefix": [prefix]}}, event) for prefix in prefixes)


@given(st.dictionaries(field_names, operands, min_size=1, max_size=3), events)
def test_siblings_are_and(pattern, event):
    combined = matches(pattern, event)
    assert combined == all(matches({field: values}, event) for field, values in pattern.items())


@given(field_names, operands, st.lists(st.integers(-5, 5), min_size=1, max_size=2), st.booleans(), events)
def test_operators_on_one_field_are_or(field, equal_to, bounds, exists, event):
    operators = {"equals": equal_to, "gt": bounds, "exists": exists}
    combined = matches({field: operators}, event)
    assert combined == any(matches({field: {name: value}}, event) for name, value in operators.items())


@given(field_names, operands, events)
def test_equals_operator_is_the_implicit_list(field, values, event):
    assert matches({field: {"equals": values}}, event) == matches({field: values}, event)


@given(field_names, events)
def test_exists_true_and_false_are_complements(field, event):
    assert matches({field: {"exists": True}}, event) != matches({field: {"exists": False}}, event)


@given(st.sampled_from(["1", "2"]), events)
def test_nested_exists_false_is_the_complement_of_true(field, event):
    nested = {"a": {field: {"exists": True}}}
    absent = {"a": {field: {"exists": False}}}
    assert matches(nested, event) != matches(absent, event)


@given(field_names, operands, events)
def test_anything_but_is_equality_negated_for_a_present_field(field, values, event):
    expected = field in event and not matches({field: values}, event)
    assert matches({field: {"anything-but": values}}, event) is expected


@given(field_names, st.lists(st.sampled_from(["a", "b", "", "ab"]), min_size=1, max_size=3), events)
def test_anything_but_prefix_is_prefix_negated_for_a_string(field, prefixes, event):
    expected = isinstance(event.get(field), str) and not matches({field: {"prefix": prefixes}}, event)
    assert matches({field: {"anything-but": {"prefix": prefixes}}}, event) is expected


@given(field_names, st.lists(st.sampled_from(["a", "A", "ab", "aB", "ß", "SS", ""]), min_size=1, max_size=3), events)
def test_equals_ignore_case_is_equality_of_casefolded_strings(field, strings, event):
    value = event.get(field)
    folded = {field: [string.casefold() for string in strings]}
    expected = isinstance(value, str) and matches(folded, {field: value.casefold()})
    assert matches({field: {"equals-ignore-case": strings}}, event) is expected
    if any(string == value for string in strings):
        assert expected


@given(field_names, st.lists(st.sampled_from(["a", "b", "ab", ""]), min_size=1, max_size=3), events)
def test_a_wildcard_without_a_star_is_string_equality(field, strings, event):
    assert matches({field: {"wildcard": strings}}, event) is matches({field: strings}, event)


@given(st.lists(st.dictionaries(field_names, operands, min_size=1, max_size=2), min_size=1, max_size=3),
       st.dictionaries(st.sampled_from(["t"]), operands, max_size=1), events)
def test_or_is_any_of_its_patterns_and_its_siblings(alternatives, siblings, event):
    combined = matches({**siblings, "$or": alternatives}, event)
    expected = any(matches(pattern, event) for pattern in alternatives) and all(
        matches({field: values}, event) for field, values in siblings.items())
    assert combined is expected
    assert matches({"n": {"$or": alternatives}}, {"n": event}) is any(
        matches(pattern, event) for pattern in alternatives)


def _pattern_leaves():
    operator_maps = st.fixed_dictionaries({}, optional={
        "equals": operands,
        "prefix": st.lists(st.text(max_size=2), min_size=1, max_size=2),
        "suffix": st.lists(st.text(max_size=2), min_size=1, max_size=2),
        "exists": st.booleans(),
        "gt": st.lists(st.one_of(st.integers(), st.sampled_from(["now()", "now()-5m", "now()+1h30m"])),
                       min_size=1, max_size=2),
        "lte": st.floats(allow_nan=False),
        "anything-but": st.one_of(operands, st.fixed_dictionaries(
            {"prefix": st.lists(st.text(max_size=2), min_size=1, max_size=2)})),
        "equals-ignore-case": st.lists(st.text(max_size=2), min_size=1, max_size=2),
        "wildcard": st.lists(st.text(alphabet="ab*", max_size=4), min_size=1, max_size=2),
    }).filter(bool)
    return st.one_of(operands, operator_maps)


def _with_or(fields, inner):
    """Field mappings, some of them with a $or of *inner* patterns."""
    return st.one_of(fields, st.builds(lambda mapping, alternatives: {**mapping, "$or": alternatives},
                                       fields, st.lists(inner, min_size=1, max_size=3)))


patterns = st.recursive(
    _with_or(st.dictionaries(field_names, _pattern_leaves(), min_size=1, max_size=3),
             st.dictionaries(field_names, _pattern_leaves(), min_size=1, max_size=2)),
    lambda inner: _with_or(st.dictionaries(field_names, st.one_of(_pattern_leaves(), inner), min_size=1, max_size=3),
                           inner),
    max_leaves=6)
any_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30),
              st.datetimes(timezones=st.timezones()).map(lambda moment: moment.isoformat())),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=3) | field_names, inner,
                                                                         max_size=4)),
    max_leaves=20)


@settings(max_examples=300)
@given(patterns, any_json)
def test_never_raises_on_any_json_event(pattern, event):
    compiled = compile_pattern(pattern)
    assert compiled.matches(event) in (True, False)
    assert compiled.matches(json.loads(json.dumps(event))) in (True, False)
