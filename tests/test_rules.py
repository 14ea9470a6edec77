"""The rule index: the same targets, in the same order, as testing every rule."""

from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.functions import compile_pattern
from relay.functions.function import Function
from relay.functions.rules import Rules
from relay.functions.template import Rule, Template
from relay.live.catalog import ActiveFunction, Catalog

TABLES = ["users", "orders", "payments", "invoices", "refunds"]


def active(name, *patterns):
    rules = tuple(Rule(handler=f"h{index}.handler", module=f"h{index}", function="handler",
                       pattern=compile_pattern(pattern)) for index, pattern in enumerate(patterns))
    template = Template(runtime="python3.14", concurrency=2, rules=rules, schedules=(),
                        env=MappingProxyType({}), secrets=MappingProxyType({}))
    return ActiveFunction(Function(name=name, directory=None, template=template, fingerprint="0" * 64),
                          image=f"relay-fn-{name}:0000000000000000")


def every_rule(functions, event):
    """What the index must reproduce: each rule of each function, tested in order."""
    return [(target.name, rule.handler) for target in functions for rule in target.function.template.rules
            if rule.pattern.matches(event)]


def matched(rules, event):
    return [(target.active.name, target.rule.handler) for target in rules.matching(event)]


def test_the_field_that_splits_the_rules_best_is_the_key():
    functions = [active(table, {"event_name": ["INSERT"], "table_name": [table]},
                        {"event_name": ["MODIFY", "REMOVE"], "table_name": [table], "new_image": {"n": {"gt": 1}}})
                 for table in TABLES]
    rules = Rules(functions)
    assert rules.field == "table_name"
    assert rules.candidates() == (0, 2)
    assert matched(rules, {"event_name": "INSERT", "table_name": "orders"}) == [("orders", "h0.handler")]
    assert matched(rules, {"event_name": "REMOVE", "table_name": "users", "new_image": {"n": 2}}) == [
        ("users", "h1.handler")]
    assert matched(rules, {"event_name": "INSERT", "table_name": "carts"}) == []


def test_rules_that_do_not_constrain_the_key_are_tested_for_every_event_in_order():
    functions = [active("a-first", {"kind": ["order"]}),
                 active("b-any", {"amount": {"gte": 10}}, {"kind": ["refund", "order"]}),
                 active("c-last", {"kind": {"equals": "order"}}, {"kind": {"prefix": ["ord"]}})]
    rules = Rules(functions)
    assert rules.field == "kind"
    event = {"kind": "order", "amount": 12}
    assert matched(rules, event) == every_rule(functions, event) == [
        ("a-first", "h0.handler"), ("b-any", "h0.handler"), ("b-any", "h1.handler"), ("c-last", "h0.handler"),
        ("c-last", "h1.handler")]
    for other in ({"kind": 7, "amount": 12}, {"amount": 12}, {"kind": ["order"], "amount": 12},
                  {"kind": "ordinary", "amount": 3}):
        assert matched(rules, other) == every_rule(functions, other)


def test_only_plain_string_equality_is_required():
    assert compile_pattern({"a": ["x", "y"], "b": {"equals": "z"}, "c": {"equals": ["w"]}}).required == {
        "a": frozenset({"x", "y"}), "b": frozenset({"z"}), "c": frozenset({"w"})}
    assert compile_pattern({"a": ["x", 1], "b": {"equals": ["z"], "exists": False}, "c": {"prefix": ["w"]},
                            "d": {"e": ["nested"]}, "f": [None]}).required == {}


def test_no_key_without_equalities_and_an_empty_catalog():
    functions = [active("only", {"amount": {"lt": 5}})]
    rules = Rules(functions)
    assert rules.field is None
    assert matched(rules, {"amount": 1}) == [("only", "h0.handler")]
    assert Rules(()).matching({"kind": "x"}) == ()
    assert Catalog().rules().matching({}) == ()


def test_the_catalog_rebuilds_its_index_with_every_change():
    catalog = Catalog([active("orders", {"kind": ["order"]})])
    before = catalog.rules()
    catalog.put(active("refunds", {"kind": ["refund"]}))
    assert catalog.rules() is not before and catalog.rules().functions == catalog.snapshot()
    assert matched(catalog.rules(), {"kind": "refund"}) == [("refunds", "h0.handler")]
    catalog.remove("refunds")
    assert matched(catalog.rules(), {"kind": "refund"}) == []


VALUES = st.sampled_from(["a", "b", "c", "d"])
FIELDS = st.sampled_from(["kind", "table", "source"])
CONDITIONS = st.one_of(
    st.lists(VALUES, min_size=1, max_size=3),
    st.lists(st.one_of(VALUES, st.integers(0, 2)), min_size=1, max_size=3),
    st.builds(lambda values: {"equals": values}, st.one_of(VALUES, st.lists(VALUES, min_size=1, max_size=2))),
    st.builds(lambda values, exists: {"equals": values, "exists": exists}, st.lists(VALUES, min_size=1, max_size=2),
              st.booleans()),
    st.builds(lambda prefixes: {"prefix": prefixes}, st.lists(VALUES, min_size=1, max_size=2)),
    st.builds(lambda exists: {"exists": exists}, st.booleans()),
    st.builds(lambda bound: {"gt": bound}, st.integers(0, 2)),
)
PATTERNS = st.dictionaries(FIELDS, CONDITIONS, min_size=1, max_size=3)
FUNCTIONS = st.lists(st.lists(PATTERNS, min_size=1, max_size=3), min_size=0, max_size=6)
EVENTS = st.dictionaries(FIELDS, st.one_of(VALUES, st.integers(0, 3), st.none(), st.lists(VALUES, max_size=1)),
                         max_size=3)


@settings(max_examples=300, deadline=None)
@given(FUNCTIONS, st.lists(EVENTS, min_size=1, max_size=8))
def test_the_index_agrees_with_testing_every_rule(patterns, events):
    functions = [active(f"fn-{index}", *rules) for index, rules in enumerate(patterns)]
    rules = Rules(functions)
    for event in events:
        assert matched(rules, event) == every_rule(functions, event)
