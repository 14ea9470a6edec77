"""A replayed entry's plan (relay.stream.plans): only the function or handler its replay_for names, pure."""

import json

import pytest

from relay.functions.rules import Rules
from relay.stream.plans import MAX_REPLAY_FOR_CHARS, parse_replay_for, plan_entry
from relay.stream.verdict import Cause, Verdict, decide_settlement
from tests.support.engine import AUDIT, ORDERS

RULES = Rules([AUDIT, ORDERS])
ORDER = json.dumps({"kind": "order"}).encode()


def replayed(replay_for, replay_of=b"1700000000000-3", event=ORDER, rules=RULES, waiting=()):
    fields = {b"event": event, b"replay_for": replay_for}
    if replay_of is not None:
        fields[b"replay_of"] = replay_of
    return plan_entry("1800000000000-0", fields, rules, waiting)


def handlers(plan):
    return [(target.active.name, target.rule.handler) for target in plan.targets]


def test_an_ordinary_entry_runs_every_matching_function_and_is_no_replay():
    plan = plan_entry("1-0", {b"event": ORDER}, RULES)
    assert handlers(plan) == [("audit", "audit.handler"), ("orders", "first.handler"), ("orders", "second.handler")]
    assert plan.replay_of is None and plan.replay_for is None


def test_a_replay_for_a_function_runs_only_that_function():
    plan = replayed(b"orders")
    assert handlers(plan) == [("orders", "first.handler"), ("orders", "second.handler")]
    assert plan.replay_of == "1700000000000-3" and plan.replay_for == "orders" and plan.problem is None
    assert decide_settlement(plan) is None      # dispatched


def test_a_replay_for_a_handler_runs_only_that_handler():
    plan = replayed(b"orders/second.handler")
    assert handlers(plan) == [("orders", "second.handler")]
    assert plan.replay_for == "orders/second.handler"


def test_replay_of_is_optional():
    plan = replayed(b"audit", replay_of=None)
    assert handlers(plan) == [("audit", "audit.handler")] and plan.replay_of is None


def test_a_replay_for_a_function_that_is_not_loaded_is_dead_lettered_saying_so():
    plan = replayed(b"billing")
    settlement = decide_settlement(plan)
    assert settlement.verdict is Verdict.DEAD_LETTER
    assert settlement.reason == "replayed for function 'billing', which is not loaded"
    assert plan.replay_of == "1700000000000-3"


def test_a_replay_for_a_handler_the_function_no_longer_has_is_dead_lettered():
    settlement = decide_settlement(replayed(b"orders/gone.handler"))
    assert settlement.verdict is Verdict.DEAD_LETTER
    assert settlement.reason == ("replayed for orders/gone.handler, but function 'orders' has no rule "
                                 "with handler 'gone.handler'")


def test_a_replay_whose_event_no_longer_matches_the_function_matches_nothing():
    plan = replayed(b"orders", event=json.dumps({"kind": "refund"}).encode())   # audit matches refunds; orders not
    assert plan.targets == () and plan.problem is None
    assert decide_settlement(plan).cause is Cause.UNMATCHED


def test_a_replay_for_a_function_waiting_for_its_image_waits():
    plan = replayed(b"orders", rules=Rules([AUDIT]), waiting=[ORDERS.function])
    assert plan.waiting == ("orders",) and plan.targets == ()
    assert decide_settlement(plan).verdict is Verdict.LEAVE_PENDING


def test_a_waiting_function_does_not_hold_a_replay_for_another_function():
    plan = replayed(b"audit", rules=Rules([AUDIT]), waiting=[ORDERS.function])
    assert plan.waiting == () and handlers(plan) == [("audit", "audit.handler")]


def test_a_waiting_function_whose_rules_do_not_match_leaves_nothing_to_wait_for():
    plan = replayed(b"orders", event=b'{"kind": "refund"}', rules=Rules([AUDIT]), waiting=[ORDERS.function])
    assert plan.waiting == () and decide_settlement(plan).cause is Cause.UNMATCHED


@pytest.mark.parametrize(("value", "reason"), [
    (b"", "the 'replay_for' field is empty; it names a function, or function/handler"),
    (b"orders\x1b[2J", "the 'replay_for' field 'orders\\x1b[2J' holds a character that is not printable"),
    (b"\xff\xfe", "the 'replay_for' field b'\\xff\\xfe' is not UTF-8 text"),
    (b"x" * (MAX_REPLAY_FOR_CHARS + 1),
     f"the 'replay_for' field is {MAX_REPLAY_FOR_CHARS + 1} bytes, over the {MAX_REPLAY_FOR_CHARS} "
     "a function/handler can take"),
    (b"Orders", "the 'replay_for' field: 'Orders' is not a valid function name"),
    (b"orders/", "the 'replay_for' field 'orders/' names no handler after the '/'"),
])
def test_a_malformed_replay_for_is_dead_lettered_naming_the_field(value, reason):
    settlement = decide_settlement(replayed(value))
    assert settlement.verdict is Verdict.DEAD_LETTER and settlement.cause is Cause.MALFORMED
    assert settlement.reason.startswith(reason)


def test_a_replay_of_that_is_no_entry_id_is_dead_lettered_naming_the_field():
    settlement = decide_settlement(replayed(b"orders", replay_of=b"yesterday\n"))
    assert settlement.verdict is Verdict.DEAD_LETTER
    assert settlement.reason == "the 'replay_of' field b'yesterday\\n' is not a stream entry id"


def test_parse_replay_for():
    assert parse_replay_for(b"orders") == ("orders", None)
    assert parse_replay_for(b"orders/events.created.handler") == ("orders", "events.created.handler")


def test_replay_of_without_replay_for_is_an_ordinary_entry():
    plan = plan_entry("1-0", {b"event": ORDER, b"replay_of": b"1-0"}, RULES)
    assert len(plan.targets) == 3 and plan.replay_of is None
