"""Go's own table for time.ParseDuration (src/time/time_test.go), plus String()."""

import pytest

from relay.durations import (
    HOUR,
    MICROSECOND,
    MILLISECOND,
    MINUTE,
    NANOSECOND,
    SECOND,
    format_compact,
    format_duration,
    parse_duration,
)
from relay.errors import DurationError

ACCEPTED = [
    ("0", 0), ("5s", 5 * SECOND), ("30s", 30 * SECOND), ("1478s", 1478 * SECOND),
    ("-5s", -5 * SECOND), ("+5s", 5 * SECOND), ("-0", 0), ("+0", 0),
    ("5.0s", 5 * SECOND), ("5.6s", 5 * SECOND + 600 * MILLISECOND), ("5.s", 5 * SECOND),
    (".5s", 500 * MILLISECOND), ("1.0s", SECOND), ("1.00s", SECOND),
    ("1.004s", SECOND + 4 * MILLISECOND), ("1.0040s", SECOND + 4 * MILLISECOND),
    ("100.00100s", 100 * SECOND + MILLISECOND),
    ("10ns", 10 * NANOSECOND), ("11us", 11 * MICROSECOND), ("12\u00b5s", 12 * MICROSECOND),
    ("12\u03bcs", 12 * MICROSECOND), ("13ms", 13 * MILLISECOND), ("14s", 14 * SECOND),
    ("15m", 15 * MINUTE), ("16h", 16 * HOUR),
    ("3h30m", 3 * HOUR + 30 * MINUTE), ("10.5s4m", 4 * MINUTE + 10 * SECOND + 500 * MILLISECOND),
    ("-2m3.4s", -(2 * MINUTE + 3 * SECOND + 400 * MILLISECOND)),
    ("1h2m3s4ms5us6ns", HOUR + 2 * MINUTE + 3 * SECOND + 4 * MILLISECOND + 5 * MICROSECOND + 6),
    ("39h9m14.425s", 39 * HOUR + 9 * MINUTE + 14 * SECOND + 425 * MILLISECOND),
    ("52763797000ns", 52763797000), ("0.3333333333333333333h", 20 * MINUTE),
    ("9007199254740993ns", (1 << 53) + 1), ("9223372036854775807ns", (1 << 63) - 1),
    ("9223372036854775.807us", (1 << 63) - 1), ("9223372036s854ms775us807ns", (1 << 63) - 1),
    ("-9223372036854775808ns", -(1 << 63)), ("-9223372036854775.808us", -(1 << 63)),
    ("-9223372036s854ms775us808ns", -(1 << 63)), ("-2562047h47m16.854775808s", -(1 << 63)),
    ("0.100000000000000000000h", 6 * MINUTE),
    ("0.830103483285477580700h", 49 * MINUTE + 48 * SECOND + 372539827),
    ("1m30s", 90 * SECOND), ("300ms", 300 * MILLISECOND), ("1.5h", 90 * MINUTE), ("-5m", -5 * MINUTE),
]

REJECTED = [
    ("", "invalid duration"), ("3", "missing unit"), ("-", "invalid duration"), ("s", "invalid duration"),
    (".", "invalid duration"), ("-.", "invalid duration"), (".s", "invalid duration"),
    ("+.s", "invalid duration"), ("1d", "unknown unit"), ("\x85\x85", "invalid duration"),
    ("\xffff", "invalid duration"), ("hello \xffff world", "invalid duration"),
    ("9223372036854775808ns", "invalid duration"), ("9223372036854775.808us", "invalid duration"),
    ("9223372036854ms775us808ns", "invalid duration"), ("-9223372036854775809ns", "invalid duration"),
    ("1s ", "unknown unit"), (" 1s", "invalid duration"), ("1S", "unknown unit"), ("5 m", "unknown unit"),
    ("1h-5m", "unknown unit"), ("\uff11s", "invalid duration"),
]


@pytest.mark.parametrize(("text", "expected"), ACCEPTED)
def test_accepts_what_go_accepts(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize(("text", "reason"), REJECTED)
def test_rejects_what_go_rejects(text, reason):
    with pytest.raises(DurationError, match=reason):
        parse_duration(text)


@pytest.mark.parametrize(("nanoseconds", "text"), [
    (0, "0s"), (1, "1ns"), (1100, "1.1\u00b5s"), (2200 * MICROSECOND, "2.2ms"), (3300 * MILLISECOND, "3.3s"),
    (4 * MINUTE + 5 * SECOND, "4m5s"), (4 * MINUTE + 5001 * MILLISECOND, "4m5.001s"),
    (5 * HOUR + 6 * MINUTE + 7001 * MILLISECOND, "5h6m7.001s"), (8 * MINUTE + 1, "8m0.000000001s"),
    (6 * SECOND, "6s"), (20 * SECOND, "20s"), (MINUTE, "1m0s"), (2 * HOUR, "2h0m0s"),
    (-90 * SECOND, "-1m30s"), ((1 << 63) - 1, "2562047h47m16.854775807s"),
    (-(1 << 63), "-2562047h47m16.854775808s"),
])
def test_formats_like_go(nanoseconds, text):
    assert format_duration(nanoseconds) == text


@pytest.mark.parametrize("text", [text for text, _ in ACCEPTED])
def test_formatted_durations_parse_back(text):
    value = parse_duration(text)
    assert parse_duration(format_duration(value)) == value


@pytest.mark.parametrize(("nanoseconds", "text"), [
    (0, "0s"), (HOUR, "1h"), (3 * HOUR + 12 * MINUTE, "3h12m"), (HOUR + 30 * SECOND, "1h30s"),
    (10 * HOUR + 5 * SECOND, "10h5s"), (HOUR + 10 * MINUTE, "1h10m"), (2 * MINUTE, "2m"), (90 * SECOND, "1m30s"),
    (10 * SECOND, "10s"), (1500 * MILLISECOND, "1.5s"), (250 * MILLISECOND, "250ms"),
    (HOUR + 500 * MILLISECOND, "1h0.5s"),
    (-HOUR, "-1h"), (3 * HOUR + 12 * MINUTE + 7 * SECOND, "3h12m7s"),
])
def test_compact_form_drops_zero_units(nanoseconds, text):
    assert format_compact(nanoseconds) == text
    assert parse_duration(text) == nanoseconds
