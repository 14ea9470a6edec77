"""Why an event does not match a pattern: the first field that fails, and how.

For ``relay match --explain``. Each top-level field of the pattern is
compiled on its own and tested in the pattern's order; the first that fails
is reported with the event's value and the condition it misses, descending
into nested fields when both sides are objects. A ``$or`` that fails is
reported with why each of its patterns does. Slow next to a compiled
pattern, and meant for one event at a time.
"""

from __future__ import annotations

import json

from relay.functions.patterns import OPERATORS, OR, Now, PatternSource, compile_pattern

_MISSING = object()


def first_mismatch(source: PatternSource, event: object, now: Now = None, path: str = "") -> str | None:
    """``"field: why"`` for the first field of pattern *source* that *event* fails, or None when it matches.

    *source* is a compiled pattern's source (relay.functions.patterns.Pattern).
    """
    if not isinstance(event, dict):
        return f"{path or 'the event'}: {_shown(event)} is not an object"
    for key, condition in source.items():
        if compile_pattern({key: condition}).matches(event, now):
            continue
        field = f"{path}.{key}" if path else key
        if key == OR:
            reasons = [f"[{index}] {first_mismatch(pattern, event, now, path)}"
                       for index, pattern in enumerate(condition)]
            count = "its one pattern does not" if len(condition) == 1 else f"none of its {len(condition)} patterns"
            return f"{field}: {count} match: {'; '.join(reasons)}"
        value = event.get(key, _MISSING)
        nested = isinstance(condition, dict) and condition and not set(condition) & set(OPERATORS)
        if nested and isinstance(value, dict):
            inner = first_mismatch(condition, value, now, field)
            if inner is not None:
                return inner
        return f"{field}: {_why(value, condition)}"
    return None


def _why(value: object, condition: object) -> str:
    if isinstance(condition, dict) and len(condition) == 1:
        [(name, operand)] = condition.items()
        if name in OPERATORS:
            return _why_operator(value, name, operand)
    if value is _MISSING:
        return f"is missing; the pattern wants {_shown(condition)}"
    if isinstance(condition, list):
        return f"{_shown(value)} is not one of {_shown(condition)}"
    return f"{_shown(value)} does not satisfy {_shown(condition)}"


def _why_operator(value: object, name: str, operand: object) -> str:
    """The reasons worth more than "does not satisfy", for the operators that test strings in their own way."""
    wanted = _shown({name: operand})
    if value is _MISSING:
        if name == "anything-but":
            return f"is missing; {wanted} matches only a field that is present"
        return f"is missing; the pattern wants {wanted}"
    if name == "anything-but" and isinstance(operand, dict):
        if not isinstance(value, str):
            return f"{_shown(value)} is not a string; {wanted} matches only strings"
        prefixes = operand["prefix"] if isinstance(operand["prefix"], list) else [operand["prefix"]]
        found = next(prefix for prefix in prefixes if value.startswith(prefix))
        return f"{_shown(value)} starts with {_shown(found)}, which {wanted} excludes"
    if name == "anything-but":
        return f"{_shown(value)} is one of the values {wanted} excludes"
    if name in ("equals-ignore-case", "wildcard") and not isinstance(value, str):
        return f"{_shown(value)} is not a string; {wanted} matches only strings"
    if name == "equals-ignore-case":
        return f"{_shown(value)} is not one of {_shown(operand)}, ignoring case"
    if name == "wildcard":
        return f"{_shown(value)} does not fit {wanted}"
    return f"{_shown(value)} does not satisfy {wanted}"


def _shown(value: object, limit: int = 100) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit - 3] + "..."
