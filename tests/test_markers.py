"""Invocation state markers and the decision they lead to (no Redis needed)."""

import pytest

from relay.durations import MINUTE
from relay.stream import markers
from relay.stream.markers import HORIZON, Action, Marker, decide, parse

NOW = 1_800_000_000_000_000_000


@pytest.mark.parametrize(("raw", "expected"), [
    (None, Marker("absent")),
    ("ok", Marker("ok")),
    (b"ok", Marker("ok")),
    ("running:123#1", Marker("running", attempts=1, deadline=123)),
    ("next_attempt_at:456#3", Marker("next_attempt_at", attempts=3, deadline=456)),
    ("exhausted:5", Marker("exhausted", attempts=5)),
    ("running:123", Marker("absent")),          # no #attempts: does not parse
    ("running:abc#1", Marker("absent")),
    ("running:123#0", Marker("absent")),
    ("running:123#x", Marker("absent")),
    ("next_attempt_at:#2", Marker("absent")),
    ("exhausted:", Marker("absent")),
    ("exhausted:-1", Marker("absent")),
    ("OK", Marker("absent")),
    ("garbage", Marker("absent")),
    ("", Marker("absent")),
])
def test_parse(raw, expected):
    assert parse(raw) == expected


@pytest.mark.parametrize("raw", [
    "exhausted:\u00b2", "running:\u00b2#1", "running:1#\u00b2", "next_attempt_at:\u0663#1", "exhausted:\uff15",
    "exhausted:" + "9" * 5000, "running:" + "1" * 5000 + "#1", "running:1#" + "1" * 5000,
    b"\xff\xfe", b"exhausted:\xb2", "exhausted: 5", "running:+1#1", "running:1#-1",
])
def test_tampered_values_are_unreadable_and_parse_as_absent(raw):
    assert markers.read(raw) is None
    assert parse(raw) == Marker("absent")


def test_read_tells_absent_from_unreadable():
    assert markers.read(None) == Marker("absent")
    assert markers.read("exhausted:5") == Marker("exhausted", attempts=5)
    assert markers.read("garbage") is None


def test_render_round_trips():
    assert parse(markers.running(10, 2)) == Marker("running", attempts=2, deadline=10)
    assert parse(markers.waiting(20, 3)) == Marker("next_attempt_at", attempts=3, deadline=20)
    assert parse(markers.exhausted(5)) == Marker("exhausted", attempts=5)


@pytest.mark.parametrize(("marker", "retries", "action", "attempt"), [
    (Marker("absent"), 4, Action.RUN, 1),
    (Marker("ok"), 4, Action.SKIP_COMPLETE, 0),
    (Marker("exhausted", attempts=5), 4, Action.SKIP_TERMINAL, 5),
    (Marker("running", attempts=1, deadline=NOW + 1), 4, Action.SKIP_BUSY, 1),
    (Marker("running", attempts=1, deadline=NOW), 4, Action.RUN, 2),           # deadline reached: the worker died
    (Marker("running", attempts=5, deadline=NOW - 1), 4, Action.EXHAUST, 5),   # ... and it was the last attempt
    (Marker("next_attempt_at", attempts=2, deadline=NOW + 1), 4, Action.SKIP_BUSY, 2),
    (Marker("next_attempt_at", attempts=2, deadline=NOW - 1), 4, Action.RUN, 3),
    (Marker("next_attempt_at", attempts=1, deadline=NOW - 1), 0, Action.EXHAUST, 1),
    (Marker("absent"), 0, Action.RUN, 1),
    (Marker("running", attempts=1, deadline=NOW + HORIZON), 4, Action.SKIP_BUSY, 1),
    (Marker("running", attempts=1, deadline=NOW + HORIZON + 1), 4, Action.RUN, 2),   # tampered: years ahead
    (Marker("next_attempt_at", attempts=2, deadline=10**30), 4, Action.RUN, 3),
])
def test_decide(marker, retries, action, attempt):
    decision = decide(marker, NOW, retries)
    assert (decision.action, decision.attempt) == (action, attempt)


@pytest.mark.parametrize(("attempt", "wait"), [(1, 1 * MINUTE), (2, 2 * MINUTE), (3, 5 * MINUTE), (4, 10 * MINUTE),
                                               (9, 10 * MINUTE)])
def test_backoff_schedule(attempt, wait):
    assert markers.backoff(attempt) == wait


def test_state_key_percent_encodes_names():
    assert markers.state_key("events", "relay", "1-0") == "relay:invocation:events:relay:1-0"
    assert markers.state_key("my:stream", "g/1 x", "2-5") == "relay:invocation:my%3Astream:g%2F1%20x:2-5"
