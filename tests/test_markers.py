"""Invocation state markers and the decision they lead to (no Redis needed)."""

import random

import pytest

from relay.durations import MILLISECOND, MINUTE, SECOND
from relay.functions.template import MAX_RETRY_BACKOFF, MAX_TIMEOUT
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


@pytest.mark.parametrize(("attempt", "wait"), [(1, 10 * SECOND), (2, 30 * SECOND), (3, 2 * MINUTE),
                                               (4, 2 * MINUTE), (50, 2 * MINUTE)])
def test_a_rules_retry_backoff_repeats_its_last_value(attempt, wait):
    assert markers.backoff(attempt, (10 * SECOND, 30 * SECOND, 2 * MINUTE)) == wait


def test_a_single_value_retry_backoff_is_every_delay():
    assert [markers.backoff(attempt, (SECOND,)) for attempt in (1, 2, 9)] == [SECOND] * 3


@pytest.mark.parametrize(("unit", "wait"), [
    (0.0, 48 * SECOND), (0.25, 54 * SECOND), (0.5, MINUTE), (0.75, 66 * SECOND), (0.999999, 72 * SECOND)])
def test_jitter_spreads_a_delay_over_plus_or_minus_twenty_percent(unit, wait):
    assert markers.jittered(MINUTE, unit) == wait


def test_jitter_over_a_backoff_sequence_stays_within_its_bounds():
    schedule = (10 * SECOND, 30 * SECOND, 2 * MINUTE)
    rng = random.Random(21)
    for attempt in range(1, 30):
        delay = markers.backoff(attempt, schedule)
        spread = markers.jittered(delay, rng.random())
        assert 0.8 * delay <= spread <= 1.2 * delay and spread % MILLISECOND == 0


def test_jitter_of_a_delay_under_a_millisecond_keeps_it():
    assert markers.jittered(300_000, 0.0) == 300_000


def test_the_horizon_covers_every_deadline_a_template_can_make():
    """A deadline past HORIZON is taken as tampered: the longest timeout and the longest jittered
    backoff must stay inside it, with room for clock skew between workers."""
    longest = max(MAX_TIMEOUT, round(MAX_RETRY_BACKOFF * (1 + markers.JITTER)))
    assert longest + 10 * MINUTE <= HORIZON
