"""``relay match``: which handlers an event would run, read and matched as the consumer does (no Redis, no Docker)."""

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings

from relay.functions import compile_pattern
from relay.functions.explain import first_mismatch
from tests.support.relay_process import base_env, run_relay
from tests.support.workers import write_function
from tests.test_patterns import NOW, events, patterns

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "functions"
INSERT = {"event_id": "evt_1", "event_name": "INSERT", "table_name": "users", "new_image": {"id": "u1"}}


def match(*args, event=None):
    return run_relay("match", *args, env=base_env(), input=None if event is None else json.dumps(event))


def test_the_matching_handlers_in_order(tmp_path):
    result = match(str(EXAMPLES), event=INSERT)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout == "user-events-python  events.created.handler\nwelcome-email-node  handler.handler\n"


def test_explain_names_the_first_field_that_failed(tmp_path):
    event_file = tmp_path / "event.json"
    event_file.write_text(json.dumps({**INSERT, "table_name": "orders"}))
    result = match(str(EXAMPLES), f"--event={event_file}", "--explain")
    assert result.returncode == 3 and "no handler" in result.stderr
    lines = result.stdout.splitlines()
    assert ('no match: user-events-python  events.created.handler (events[0]): '
            'table_name: "orders" is not one of ["users"]') in lines
    assert 'no match: user-events-python  events.updated.handler (events[1]): ' \
           'event_name: "INSERT" is not one of ["MODIFY"]' in lines
    assert len(lines) == 4


def test_an_event_relay_would_dead_letter_and_an_unloadable_function(tmp_path):
    root = tmp_path / "functions"
    shutil.copytree(EXAMPLES, root)
    write_function(root, "broken", "runtime: python3.14\nevents: []\n", {})
    result = match(str(root), event=INSERT)
    assert result.returncode == 0
    assert result.stderr.startswith(f"relay match: skipped broken: {root / 'broken' / 'template.yaml'}: a template "
                                    f"needs at least one entry in events or schedules (see 'relay validate ")
    bad = run_relay("match", str(root), env=base_env(), input="[1, 2]")
    assert bad.returncode == 1
    assert bad.stderr.endswith("the event is a JSON list, not an object; Relay would dead-letter this entry\n")


@pytest.mark.parametrize(("pattern", "event", "why"), [
    ({"table_name": ["users"]}, {"table_name": "orders"}, 'table_name: "orders" is not one of ["users"]'),
    ({"table_name": ["users"]}, {}, 'table_name: is missing; the pattern wants ["users"]'),
    ({"new_image": {"status": ["paid"], "total": {"gt": [10]}}}, {"new_image": {"status": "paid", "total": 3}},
     'new_image.total: 3 does not satisfy {"gt": [10]}'),
    ({"new_image": {"status": ["paid"]}}, {"new_image": "x"}, 'new_image: "x" does not satisfy {"status": ["paid"]}'),
    ({"a": ["x"], "b": ["y"]}, {"a": "x", "b": "z"}, 'b: "z" is not one of ["y"]'),
    ({"a": ["x"]}, {"a": "x"}, None),
    ({"status": {"anything-but": ["DELETED", "ARCHIVED"]}}, {"status": "DELETED"},
     'status: "DELETED" is one of the values {"anything-but": ["DELETED", "ARCHIVED"]} excludes'),
    ({"status": {"anything-but": ["DELETED"]}}, {},
     'status: is missing; {"anything-but": ["DELETED"]} matches only a field that is present'),
    ({"id": {"anything-but": {"prefix": ["test_", "tmp_"]}}}, {"id": "tmp_1"},
     'id: "tmp_1" starts with "tmp_", which {"anything-but": {"prefix": ["test_", "tmp_"]}} excludes'),
    ({"id": {"anything-but": {"prefix": "test_"}}}, {"id": "test_1"},
     'id: "test_1" starts with "test_", which {"anything-but": {"prefix": "test_"}} excludes'),
    ({"id": {"anything-but": {"prefix": ["test_"]}}}, {"id": 7},
     'id: 7 is not a string; {"anything-but": {"prefix": ["test_"]}} matches only strings'),
    ({"s": {"equals-ignore-case": ["paid"]}}, {"s": "PENDING"}, 's: "PENDING" is not one of ["paid"], ignoring case'),
    ({"s": {"equals-ignore-case": ["paid"]}}, {"s": None},
     's: null is not a string; {"equals-ignore-case": ["paid"]} matches only strings'),
    ({"s": {"equals-ignore-case": ["paid"]}}, {}, 's: is missing; the pattern wants {"equals-ignore-case": ["paid"]}'),
    ({"e": {"wildcard": ["user_*@example.com"]}}, {"e": "bob@example.com"},
     'e: "bob@example.com" does not fit {"wildcard": ["user_*@example.com"]}'),
    ({"e": {"wildcard": ["1*"]}}, {"e": 12}, 'e: 12 is not a string; {"wildcard": ["1*"]} matches only strings'),
    ({"e": {"wildcard": ["1*"], "exists": False}}, {"e": 2},
     'e: 2 does not satisfy {"wildcard": ["1*"], "exists": false}'),
    ({"t": ["u"], "$or": [{"a": ["x"]}, {"n": {"b": {"gt": 3}}}]}, {"t": "u", "a": "y", "n": {"b": 2}},
     '$or: none of its 2 patterns match: [0] a: "y" is not one of ["x"]; [1] n.b: 2 does not satisfy {"gt": 3}'),
    ({"t": ["u"], "$or": [{"a": ["x"]}]}, {"t": "v", "a": "y"}, 't: "v" is not one of ["u"]'),
    ({"n": {"$or": [{"a": ["x"]}, {"$or": [{"b": ["z"]}]}]}}, {"n": {"a": "y"}},
     'n.$or: none of its 2 patterns match: [0] n.a: "y" is not one of ["x"]; [1] n.$or: its one pattern does not '
     'match: [0] n.b: is missing; the pattern wants ["z"]'),
    ({"n": {"$or": [{"a": ["x"]}]}}, {"n": 5}, 'n: 5 does not satisfy {"$or": [{"a": ["x"]}]}'),
    ({"$or": [{"a": {"wildcard": ["x*"]}}, {"b": {"anything-but": ["y"]}}]}, {"a": "y", "b": "y"},
     '$or: none of its 2 patterns match: [0] a: "y" does not fit {"wildcard": ["x*"]}; [1] b: "y" is one of the '
     'values {"anything-but": ["y"]} excludes'),
    ({"$or": [{"a": {"wildcard": ["x*"]}}, {"b": {"anything-but": ["y"]}}]}, {"a": "xa"}, None),
])
def test_first_mismatch(pattern, event, why):
    assert first_mismatch(pattern, event) == why


@settings(max_examples=300, deadline=None)
@given(patterns, events)
def test_first_mismatch_has_a_reason_exactly_when_the_pattern_fails(pattern, event):
    compiled = compile_pattern(pattern)
    why = first_mismatch(pattern, event, NOW)
    assert (why is None) is compiled.matches(event, NOW)
    if why is not None:
        assert ": " in why


def test_a_function_whose_template_is_a_fifo_is_skipped_at_once(tmp_path):
    """``relay match`` loads functions as ``relay start`` does: a FIFO named template.yaml is
    named and skipped, never opened (it used to wait there for a writer)."""
    root = tmp_path / "functions"
    shutil.copytree(EXAMPLES, root)
    (root / "piped").mkdir()
    os.mkfifo(root / "piped" / "template.yaml")
    result = run_relay("match", str(root), env=base_env(), input=json.dumps(INSERT), timeout=30)
    assert result.returncode == 0
    assert (f"relay match: skipped piped: {root / 'piped' / 'template.yaml'}: is a FIFO (named pipe), not a "
            f"regular file; Relay reads only regular files") in result.stderr
