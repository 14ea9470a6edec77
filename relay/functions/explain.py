"""Why an event does not match a pattern: the first field that fails, and how.

For ``relay match --explain``. Each top-level field of the pattern is
compiled on its own and tested in the pattern's order; the first that fails
is reported with the event's value and the condition it misses, descending
into nested fields when both sides are objects. Slow next to a compiled
pattern, and meant for one event at a time.
"""

import json

from relay.functions.patterns import OPERATORS, compile_pattern

_MISSING = object()


def first_mismatch(source, event, now=None, path=""):
    """``"field: why"`` for the first field of pattern *source* that *event* fails, or None when it matches."""
    if not isinstance(event, dict):
        return f"{path or 'the event'}: {_shown(event)} is not an object"
    for key, condition in source.items():
        if compile_pattern({key: condition}).matches(event, now):
            continue
        field = f"{path}.{key}" if path else key
        value = event.get(key, _MISSING)
        nested = isinstance(condition, dict) and condition and not set(condition) & set(OPERATORS)
        if nested and isinstance(value, dict):
            inner = first_mismatch(condition, value, now, field)
            if inner is not None:
                return inner
        return f"{field}: {_why(value, condition)}"
    return None


def _why(value, condition):
    if value is _MISSING:
        return f"is missing; the pattern wants {_shown(condition)}"
    if isinstance(condition, list):
        return f"{_shown(value)} is not one of {_shown(condition)}"
    return f"{_shown(value)} does not satisfy {_shown(condition)}"


def _shown(value, limit=100):
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit - 3] + "..."
