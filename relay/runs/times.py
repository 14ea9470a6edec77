"""The times ``relay runs`` and ``relay replay`` take: RFC 3339, or a duration ago.

``2026-12-06T10:00:00Z`` and ``2026-12-06T11:00:00+01:00`` are instants;
a Go duration (relay.durations: ``90m``, ``1h30m``, ``168h``) means that long
before now; ``now`` is now. A stream entry id is a time too (its first
part is unix milliseconds), which is how a range of the stream is read.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from relay.durations import MILLISECOND, parse_duration
from relay.errors import DurationError, RunsError
from relay.quoting import quote


def parse_time(text: str, option: str, now_ms: int | None = None) -> int:
    """The unix milliseconds *text* means (RunsError naming *option* when it means none)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    text = text.strip()
    if text == "now":
        return now_ms
    if text[:1].isdigit() and ("-" in text[1:5] or "T" in text):
        try:
            instant = datetime.fromisoformat(text)
        except ValueError:
            raise RunsError(f"{option}={quote(text)} is not an RFC 3339 time such as 2026-12-06T10:00:00Z, "
                            "nor a duration ago such as 90m") from None
        if instant.tzinfo is None:
            raise RunsError(f"{option}={quote(text)} has no time zone; end it with Z (UTC) or an offset "
                            "such as +01:00")
        return int(instant.timestamp() * 1000)
    try:
        ago = parse_duration(text)
    except DurationError:
        raise RunsError(f"{option}={quote(text)} is not an RFC 3339 time such as 2026-12-06T10:00:00Z, "
                        "nor a duration ago such as 90m or 1h30m") from None
    if ago < 0:
        raise RunsError(f"{option}={quote(text)} is a negative duration; a time ago is positive, such as 90m")
    return now_ms - ago // MILLISECOND


def format_time(unix_ms: int) -> str:
    """*unix_ms* as RFC 3339 in UTC, to the second: ``2026-12-06T10:00:00Z``."""
    return datetime.fromtimestamp(unix_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
