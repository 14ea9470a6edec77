"""The pattern compiler: every operator, the algebra, and 'never raises'."""

import json
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
    ({"a": "x"}, "pattern.a: 'x' is a single value; equality takes a list, e.g. [x]"),
    ({"a": 1}, "pattern.a: 1 is a single value; equality takes a list, e.g. [1]"),
    ({"a": True}, "pattern.a: True is a single value; equality takes a list, e.g. [true]"),
    ({"a": ["x", {"b": 1}]}, "pattern.a[1]: implicit equality takes plain values"),
    ({"a": None}, "pattern.a: must be a list of values"),
    ({"a": {}}, "pattern.a: must be a list of values"),
    ({"a": []}, "pattern.a: implicit equality needs at least one value"),
    ({"a": [["x"]]}, "pattern.a[0]: implicit equality takes plain values"),
    ({"a": [{"b": 1}]}, "pattern.a[0]: implicit equality takes plain values"),
    ({"a": {"equals": [1], "b": [2]}}, "pattern.a: mixes operators (equals) with nested fields (b)"),
    ({"a": {"equals": []}}, "pattern.a.equals: equals needs at least one value"),
    ({"a": {"prefix": [1]}}, "pattern.a.prefix: prefix takes strings, not 1"),
    ({"a": {"suffix": True}}, "pattern.a.suffix: suffix takes strings, not True"),
    ({"a": {"prefix": [None]}}, "pattern.a.prefix: prefix takes strings, not None"),
    ({"a": {"exists": "true"}}, "pattern.a.exists: must be true or false, not 'true'"),
    ({"a": {"exists": 1}}, "pattern.a.exists: must be true or false, not 1"),
    ({"a": {"exists": None}}, "pattern.a.exists: must be true or false, not None"),
    ({"a": {"exists": [True]}}, "pattern.a.exists: must be true or false, not [True]"),
    ({"a": {"gt": "2026-09-12T10:00:00Z"}},
     "pattern.a.gt: '2026-09-12T10:00:00Z' is neither a number nor a now() expression"),
    ({"a": {"gt": "now"}}, "pattern.a.gt: 'now' is not a now() expression"),
    ({"a": {"gt": "now-5m"}}, "pattern.a.gt: 'now-5m' is not a now() expression"),
    ({"a": {"lt": "now()-5d"}}, "pattern.a.lt: 'now()-5d': unknown unit 'd'"),
    ({"a": {"lt": "now()-"}}, "pattern.a.lt: 'now()-' is not a now() expression"),
    ({"a": {"lt": "now()--5m"}}, "pattern.a.lt: 'now()--5m' is not a now() expression"),
    ({"a": {"lt": "now()5m"}}, "pattern.a.lt: 'now()5m' is not a now() expression"),
    ({"a": {"lt": " now()"}}, "pattern.a.lt: ' now()' is neither a number nor a now() expression"),
    ({"a": {"gte": True}}, "pattern.a.gte: takes a number or a now() expression, not True"),
    ({"a": {"gte": None}}, "pattern.a.gte: takes a number or a now() expression, not None"),
    ({"a": {"gte": float("nan")}}, "pattern.a.gte: NaN is not a number"),
    ({"a": {"gte": [1, "soon"]}}, "pattern.a.gte: 'soon' is neither a number nor a now() expression"),
    ({"created_at": {"gt": {"nested": 1}}}, "pattern.created_at.gt: gt takes plain values"),
    ({1: ["x"]}, "pattern[1]: field name 1 is not a string"),
    ({"a": {"b": {"exists": "no"}}}, "pattern.a.b.exists: must be true or false"),
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


def _pattern_leaves():
    operator_maps = st.fixed_dictionaries({}, optional={
        "equals": operands,
        "prefix": st.lists(st.text(max_size=2), min_size=1, max_size=2),
        "suffix": st.lists(st.text(max_size=2), min_size=1, max_size=2),
        "exists": st.booleans(),
        "gt": st.lists(st.one_of(st.integers(), st.sampled_from(["now()", "now()-5m", "now()+1h30m"])),
                       min_size=1, max_size=2),
        "lte": st.floats(allow_nan=False),
    }).filter(bool)
    return st.one_of(operands, operator_maps)


patterns = st.recursive(
    st.dictionaries(field_names, _pattern_leaves(), min_size=1, max_size=3),
    lambda inner: st.dictionaries(field_names, st.one_of(_pattern_leaves(), inner), min_size=1, max_size=3),
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
