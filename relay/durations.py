"""Go duration strings: exactly the grammar of Go's ``time.ParseDuration``.

Templates and REDIS_STREAM_RETENTION were specified for a Go program, so
"1h30m", ".5s", "1.s", "-0" and "300µs" mean here what they mean there, and
"1d", "5" and "" are rejected the same way, with Go's words (``unknown unit
"d" in duration "1d"``). Durations are integers of
nanoseconds, like Go's ``time.Duration``.
"""

from __future__ import annotations

from relay.errors import DurationError
from relay.quoting import show

NANOSECOND = 1
MICROSECOND = 1000 * NANOSECOND
MILLISECOND = 1000 * MICROSECOND
SECOND = 1000 * MILLISECOND
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

_UNITS = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "\u00b5s": MICROSECOND,  # micro sign
    "\u03bcs": MICROSECOND,  # Greek small letter mu
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}
_LIMIT = 1 << 63  # magnitude of the most negative int64


def parse_duration(text: str) -> int:
    """Return the duration *text* means, in nanoseconds, or raise DurationError."""
    rest = text
    negative = False
    if rest[:1] in ("-", "+"):
        negative = rest[0] == "-"
        rest = rest[1:]
    if rest == "0":
        return 0
    if not rest:
        raise DurationError(f"invalid duration {show(text)}")
    total = 0
    while rest:
        value, rest = _term(rest, text)
        total += value
        if total > _LIMIT:
            raise DurationError(f"invalid duration {show(text)}")
    if negative:
        return -total
    if total > _LIMIT - 1:
        raise DurationError(f"invalid duration {show(text)}")
    return total


def _term(rest: str, text: str) -> tuple[int, str]:
    """The first number-and-unit of *rest* ("1.5h"), in nanoseconds, and what follows it."""
    if not (rest[0] == "." or _is_digit(rest[0])):
        raise DurationError(f"invalid duration {show(text)}")
    whole, rest, digits_before = _leading_int(rest, text)
    fraction, scale, digits_after = 0, 1.0, False
    if rest[:1] == ".":
        fraction, scale, rest, digits_after = _leading_fraction(rest[1:])
    if not (digits_before or digits_after):
        raise DurationError(f"invalid duration {show(text)}")
    end = 0
    while end < len(rest) and not (rest[end] == "." or _is_digit(rest[end])):
        end += 1
    if end == 0:
        raise DurationError(f"missing unit in duration {show(text)}")
    unit_name, rest = rest[:end], rest[end:]
    unit = _UNITS.get(unit_name)
    if unit is None:
        raise DurationError(f"unknown unit {show(unit_name)} in duration {show(text)}")
    if whole > _LIMIT // unit:
        raise DurationError(f"invalid duration {show(text)}")
    value = whole * unit
    if fraction:
        # Go uses float64 here too; matching it keeps rounding identical.
        value += int(float(fraction) * (float(unit) / scale))
        if value > _LIMIT:
            raise DurationError(f"invalid duration {show(text)}")
    return value, rest


def format_duration(nanoseconds: int) -> str:
    """Render a duration the way Go's ``Duration.String`` does ("1m30s", "250ms")."""
    if nanoseconds == 0:
        return "0s"
    sign = "-" if nanoseconds < 0 else ""
    value = abs(nanoseconds)
    if value < SECOND:
        for unit, name in ((MILLISECOND, "ms"), (MICROSECOND, "\u00b5s"), (NANOSECOND, "ns")):
            if value >= unit:
                return sign + _decimal(value, unit) + name
    hours, value = divmod(value, HOUR)
    minutes, value = divmod(value, MINUTE)
    text = _decimal(value, SECOND) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def format_compact(nanoseconds: int) -> str:
    """Like ``format_duration`` without its zero units: "1h" for 1h0m0s, "3h12m", "1h30s"."""
    text = format_duration(nanoseconds)
    if "h" in text:
        text = text.replace("h0m", "h", 1)
    if text.endswith(("h0s", "m0s")):
        text = text[:-2]
    return text


def _decimal(value: int, unit: int) -> str:
    whole, fraction = divmod(value, unit)
    if not fraction:
        return str(whole)
    width = len(str(unit)) - 1
    return f"{whole}.{fraction:0{width}d}".rstrip("0")


def _is_digit(char: str) -> bool:
    return "0" <= char <= "9"


def _leading_int(text: str, original: str) -> tuple[int, str, bool]:
    end = 0
    value = 0
    while end < len(text) and _is_digit(text[end]):
        value = value * 10 + ord(text[end]) - 48
        if value > _LIMIT:
            raise DurationError(f"invalid duration {show(original)}")
        end += 1
    return value, text[end:], end > 0


def _leading_fraction(text: str) -> tuple[int, float, str, bool]:
    """Digits after the dot; past int64 precision they are read but ignored, as in Go."""
    end = 0
    value = 0
    scale = 1.0
    overflow = False
    while end < len(text) and _is_digit(text[end]):
        if not overflow:
            candidate = value * 10 + ord(text[end]) - 48
            if value > (_LIMIT - 1) // 10 or candidate > _LIMIT:
                overflow = True
            else:
                value = candidate
                scale *= 10
        end += 1
    return value, scale, text[end:], end > 0
