"""Compiled patterns against a plain dict-walking interpreter of the same patterns.

    .venv/bin/python bench/matcher.py [--seconds 2]

A realistic set: 10 functions x 3 rules (equality lists, nested fields,
prefix/suffix, exists, numeric and now() comparisons) and ~1 KB events over
the same tables. Three figures, events/s on one core:

* compiled: each event against all 30 compiled patterns;
* index: each event through the consumer's rule index (relay.functions.rules),
  which tests only the rules the event's key field allows, as Relay does;
* interpreter: each event against all 30 raw patterns, walked as dicts.

All three must agree on every event. Targets (issue #3): compiled >= 3x the
interpreter, and >= 100,000 event evaluations per second on one core, read
as whole events matched the way the consumer matches them (the index).
``--json PATH`` writes the figures for bench/run_all.py (bench/report.py).
"""

import argparse
import json
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import report

from relay.durations import parse_duration
from relay.functions import Function, compile_pattern, parse_template
from relay.functions.rules import Rules
from relay.live.catalog import ActiveFunction

TABLES = ["users", "orders", "payments", "invoices", "shipments", "carts", "reviews", "coupons", "refunds", "tickets"]
OPERATORS = {"equals", "prefix", "suffix", "exists", "gt", "gte", "lt", "lte"}
# Read by bench/run_all.py without importing this file.
QUICK_ARGS = ["--seconds", "0.3"]


def rules():
    """30 patterns: three per function, one function per table."""
    patterns = []
    for index, table in enumerate(TABLES):
        patterns.append({"event_name": ["INSERT"], "table_name": [table]})
        patterns.append({"event_name": ["MODIFY"], "table_name": [table],
                         "new_image": {"status": ["PAID", "SHIPPED", "CANCELLED"], "amount": {"gte": 10 * index}}})
        patterns.append({"event_name": {"equals": ["REMOVE"]}, "table_name": [table],
                         "old_image": {"id": {"prefix": [f"{table[:3]}_"]}, "deleted_at": {"exists": False},
                                       "updated_at": {"gt": "now()-1h"}}})
    return patterns


def functions(patterns):
    """The patterns as Relay loads them: one function per table, three rules each, in file order."""
    loaded = []
    for index, table in enumerate(TABLES):
        rules = [{"handler": f"rule{number}.handler", "pattern": pattern}
                 for number, pattern in enumerate(patterns[3 * index:3 * index + 3])]
        template = parse_template(json.dumps({"runtime": "python3.14", "events": rules}), f"{table}/template.yaml")
        loaded.append(ActiveFunction(Function(name=table, directory=None, template=template, fingerprint="0" * 64),
                                     image=f"relay-fn-{table}:0000000000000000"))
    return loaded


def events(count, seed=7):
    generator = random.Random(seed)
    now = datetime.now(UTC)
    produced = []
    for number in range(count):
        table = generator.choice(TABLES)
        image = {
            "id": f"{table[:3]}_{number}", "status": generator.choice(["NEW", "PAID", "SHIPPED", "CANCELLED"]),
            "amount": generator.randint(0, 200), "currency": "EUR",
            "updated_at": (now - timedelta(minutes=generator.randint(0, 120))).isoformat(),
            "customer": {"name": "Jane Doe", "email": f"jane{number}@example.com", "tier": "gold",
                         "address": {"street": "1 Main St", "city": "Springfield", "zip": "12345"}},
            "notes": "x" * 120,
        }
        event = {"event_id": f"evt_{number}", "event_name": generator.choice(["INSERT", "MODIFY", "REMOVE"]),
                 "table_name": table, "new_image": image, "old_image": dict(image), "source": "db-stream"}
        produced.append(json.loads(json.dumps(event)))
    return produced


# --- the baseline: walk the raw pattern dict for every event ------------------------


def interpret(pattern, event):
    return _fields(pattern, event)


def _fields(pattern, container):
    for key, condition in pattern.items():
        present = isinstance(container, dict) and key in container
        value = container[key] if present else None
        if not _condition(condition, present, value):
            return False
    return True


def _condition(condition, present, value):
    if isinstance(condition, list):
        return present and any(_equal(value, operand) for operand in condition)
    if not any(key in OPERATORS for key in condition):
        if not present:
            return _fields(condition, None)
        return _fields(condition, value)
    for name, operand in condition.items():
        if name == "exists":
            if operand == present:
                return True
            continue
        if not present:
            continue
        operands = operand if isinstance(operand, list) else [operand]
        for item in operands:
            if _operator(name, item, value):
                return True
    return False


def _equal(value, operand):
    if isinstance(value, bool) or isinstance(operand, bool):
        return type(value) is type(operand) and value == operand
    if isinstance(value, (int, float)) and isinstance(operand, (int, float)):
        return value == operand
    return type(value) is type(operand) and value == operand


def _operator(name, operand, value):
    if name == "equals":
        return _equal(value, operand)
    if name == "prefix":
        return isinstance(value, str) and value.startswith(operand)
    if name == "suffix":
        return isinstance(value, str) and value.endswith(operand)
    if isinstance(operand, str):  # now() expression, evaluated on every call
        if not isinstance(value, str):
            return False
        try:
            instant = datetime.fromisoformat(value)
        except ValueError:
            return False
        if instant.tzinfo is None:
            return False
        offset = operand[5:]
        delta = timedelta(microseconds=parse_duration(offset) / 1000) if offset else timedelta(0)
        return _compare(name, instant, datetime.now(UTC) + delta)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return _compare(name, value, operand)


def _compare(name, left, right):
    return {"gt": left > right, "gte": left >= right, "lt": left < right, "lte": left <= right}[name]


# --- the run ------------------------------------------------------------------------


def measure(evaluate, stream, seconds):
    """Events per second for *evaluate* over *stream*, repeated for at least *seconds*."""
    done = 0
    began = time.perf_counter()
    while True:
        for event in stream:
            evaluate(event)
        done += len(stream)
        elapsed = time.perf_counter() - began
        if elapsed >= seconds:
            return done / elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    report.add_option(parser)
    options = parser.parse_args()

    raw = rules()
    compiled = [compile_pattern(pattern) for pattern in raw]
    index = Rules(functions(raw))
    stream = events(2000)
    size = sum(len(json.dumps(event)) for event in stream) / len(stream)

    def compiled_matches(event):
        return [pattern.matches(event) for pattern in compiled]

    def indexed_matches(event):
        return index.matching(event)

    def interpreted_matches(event):
        return [interpret(pattern, event) for pattern in raw]

    def as_positions(targets):
        return [TABLES.index(target.active.name) * 3 + int(target.rule.module[4:]) for target in targets]

    disagreements = sum(
        compiled_matches(event) != interpreted_matches(event)
        or as_positions(indexed_matches(event)) != [n for n, hit in enumerate(compiled_matches(event)) if hit]
        for event in stream)
    matched = sum(any(compiled_matches(event)) for event in stream)
    measure(compiled_matches, stream[:200], 0.2)  # warm up
    measure(indexed_matches, stream[:200], 0.2)
    fast = measure(compiled_matches, stream, options.seconds)
    indexed = measure(indexed_matches, stream, options.seconds)
    slow = measure(interpreted_matches, stream, options.seconds)
    fewest, most = index.candidates()
    print(f"{len(TABLES)} functions x 3 rules, {len(stream)} events of {size:.0f} bytes on average, "
          f"{matched} of them matching a rule; implementations disagree on {disagreements} events")
    print(f"index key: {index.field}; an event is tested against {fewest} to {most} of the {len(raw)} rules")
    print(f"{'':<14}{'events/s':>12}")
    for name, rate in (("compiled", fast), ("index", indexed), ("interpreter", slow)):
        print(f"{name:<14}{rate:>12,.0f}")
    print(f"ratio compiled/interpreter: {fast / slow:.2f}x; index/interpreter: {indexed / slow:.2f}x")
    if disagreements:
        sys.exit("the compiled matcher, the index and the interpreter disagree")
    report.write(options.json, results_of(fast, indexed, slow))


def results_of(fast, indexed, slow):
    """One result per target of issue #3."""
    return [
        report.Result("matcher.py", "events/s, each against all 30 compiled rules", fast, "events/s", slow,
                      "interpreter", fast / slow, "ratio >= 3 (#3)", fast / slow >= 3),
        report.Result("matcher.py", "events/s through the rule index (the consumer's path)", indexed, "events/s",
                      slow, "interpreter", indexed / slow, ">= 100,000 event evaluations/s (#3)",
                      indexed >= 100_000),
    ]


if __name__ == "__main__":
    main()
