"""template.yaml's rate_limit and concurrency_key: accepted forms, precise problems, key values."""

import textwrap

import pytest

from relay.durations import HOUR, MINUTE, SECOND
from relay.errors import TemplateError
from relay.functions import parse_template
from relay.functions.template import ConcurrencyKey, RateLimit

RULE = "events:\n  - handler: events.created.handler\n    pattern: {event_name: [INSERT]}\n"


def parse(top):
    return parse_template("runtime: python3.14\n" + textwrap.dedent(top) + RULE, "template.yaml")


def problems(top):
    with pytest.raises(TemplateError) as caught:
        parse(top)
    return str(caught.value)


def test_without_them_a_function_has_no_fleet_limits():
    template = parse("")
    assert template.rate_limit is None and template.concurrency_key is None


@pytest.mark.parametrize(("text", "count", "period"), [
    ("20/s", 20, SECOND), ("1/s", 1, SECOND), ("600/m", 600, MINUTE), ("5/h", 5, HOUR),
    ("1000000/s", 1_000_000, SECOND), ("020/s", 20, SECOND),
])
def test_rates(text, count, period):
    rate = parse(f"rate_limit: {text}\n").rate_limit
    assert (rate.count, rate.period) == (count, period)
    assert str(rate) == f"{count}/{text[-1]}"


@pytest.mark.parametrize(("value", "message"), [
    ('"20 per second"', 'rate_limit: "20 per second" is not a rate; use <n>/s, <n>/m or <n>/h'),
    ("20", "rate_limit: 20 is not a rate; use <n>/s, <n>/m or <n>/h"),
    ("20/d", 'rate_limit: "20/d" is not a rate'),
    ("20/S", 'rate_limit: "20/S" is not a rate'),
    ("1.5/s", 'rate_limit: "1.5/s" is not a rate'),
    ("-1/s", 'rate_limit: "-1/s" is not a rate'),
    ("20 /s", 'rate_limit: "20 /s" is not a rate'),
    ("/s", 'rate_limit: "/s" is not a rate'),
    ("[20/s]", 'rate_limit: ["20/s"] is not a rate'),
    ("", "rate_limit: null is not a rate"),
    ("0/s", 'rate_limit: "0/s" must allow 1 to 1000000 invocations per period, e.g. 20/s'),
    ("1000001/m", 'rate_limit: "1000001/m" must allow 1 to 1000000 invocations per period'),
    ("9999999999999/s", 'rate_limit: "9999999999999/s" is not a rate'),
])
def test_bad_rates(value, message):
    assert message in problems(f"rate_limit: {value}\n")


def test_concurrency_key():
    key = parse("concurrency_key: new_image.id\n").concurrency_key
    assert key == ConcurrencyKey(path="new_image.id", fields=("new_image", "id"))


@pytest.mark.parametrize("value", ['""', "new_image.", ".id", "a..b", "12", "[a, b]", "{a: b}", "", "true"])
def test_bad_concurrency_keys(value):
    shown = {'""': '""', "": "null", "[a, b]": '["a", "b"]', "{a: b}": '{"a": "b"}', "true": "true"}
    expected = shown.get(value, value if value == "12" else f'"{value}"')
    assert (f"concurrency_key: {expected} is not a field path; name a field of the event, with dots between "
            f"levels, e.g. new_image.id") in problems(f"concurrency_key: {value}\n")


def test_their_problems_come_with_the_others():
    text = problems("concurrency: 0\nrate_limit: fast\nconcurrency_key: ''\n")
    assert "3 problems" in text
    assert "concurrency: 0 must be a whole number of 1 or more" in text
    assert 'rate_limit: "fast" is not a rate' in text
    assert 'concurrency_key: "" is not a field path' in text


def test_unknown_top_level_keys_name_them():
    assert ("use runtime, concurrency, events, schedules, env, secrets, network, warm, max_event_age, on_expired, "
            "rate_limit, concurrency_key") \
        in problems("rate: 20/s\n")


@pytest.mark.parametrize(("event", "value"), [
    ({"new_image": {"id": "user_1"}}, "user_1"),
    ({"new_image": {"id": 7}}, 7),
    ({"new_image": {"id": 7.5}}, 7.5),
    ({"new_image": {"id": False}}, False),
    ({"new_image": {"id": ""}}, ""),
    ({"new_image": {"id": None}}, None),
    ({"new_image": {"id": ["user_1"]}}, None),
    ({"new_image": {"id": {"a": 1}}}, None),
    ({"new_image": {}}, None),
    ({"new_image": "user_1"}, None),
    ({"new_image": ["id"]}, None),
    ({}, None),
])
def test_the_key_value_of_an_event(event, value):
    key = ConcurrencyKey(path="new_image.id", fields=("new_image", "id"))
    found = key.value(event)
    assert found == value and type(found) is type(value)


def test_a_rate_limit_reads_like_the_template():
    assert str(RateLimit(count=3, unit="h")) == "3/h" and RateLimit(count=3, unit="h").period == HOUR
