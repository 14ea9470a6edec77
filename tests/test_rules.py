"""The rule index: the same targets, in the same order, as testing every rule."""

from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.functions import ActiveFunction, compile_pattern
from relay.functions.function import Function
from relay.functions.rules import Rules
from relay.functions.template import Rule, Template
from relay.live.catalog import Catalog

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


def test_a_field_every_pattern_of_an_or_requires_is_required():
    assert compile_pattern({"$or": [{"t": ["a"], "x": ["1"]}, {"t": ["b", "c"]}]}).required == {
        "t": frozenset({"a", "b", "c"})}
    assert compile_pattern({"$or": [{"t": ["a"]}, {"x": ["1"]}]}).required == {}
    assert compile_pattern({"$or": [{"t": ["a"]}, {"t": {"anything-but": ["a"]}}]}).required == {}
    assert compile_pattern({"t": ["a"], "$or": [{"t": ["b"]}]}).required == {"t": frozenset({"a"})}
    assert compile_pattern({"$or": [{"$or": [{"t": ["a"]}, {"t": ["b"]}]}, {"t": {"equals": "c"}}]}).required == {
        "t": frozenset({"a", "b", "c"})}
    assert compile_pattern({"n": {"$or": [{"t": ["a"]}]}}).required == {}


def test_the_new_operators_require_nothing():
    assert compile_pattern({"a": {"anything-but": ["x"]}, "b": {"equals-ignore-case": ["y"]},
                            "c": {"wildcard": ["z"]}, "d": {"anything-but": {"prefix": ["w"]}}}).required == {}


def test_an_or_of_tables_is_indexed_under_each_of_them():
    functions = [active("a", {"$or": [{"table": ["users"], "kind": ["x"]}, {"table": ["orders"]}]}),
                 active("b", {"table": ["users"], "kind": {"anything-but": ["x"]}}),
                 active("c", {"table": ["refunds"]})]
    rules = Rules(functions)
    assert rules.field == "table"
    for event in ({"table": "users", "kind": "x"}, {"table": "users", "kind": "y"}, {"table": "orders"},
                  {"table": "refunds"}, {"table": "carts"}, {}):
        assert matched(rules, event) == every_rule(functions, event)
    assert matched(rules, {"table": "users", "kind": "x"}) == [("a", "h0.handler")]


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
    st.builds(lambda values: {"anything-but": values}, st.lists(st.one_of(VALUES, st.integers(0, 2)), min_size=1,
                                                                max_size=2)),
    st.builds(lambda prefixes: {"anything-but": {"prefix": prefixes}}, st.lists(VALUES, min_size=1, max_size=2)),
    st.builds(lambda values: {"equals-ignore-case": values}, st.lists(st.sampled_from(["A", "b", "C"]), min_size=1,
                                                                      max_size=2)),
    st.builds(lambda patterns: {"wildcard": patterns}, st.lists(st.sampled_from(["a*", "*b", "*", "c", "a*d"]),
                                                                min_size=1, max_size=2)),
)
FIELD_MAPS = st.dictionaries(FIELDS, CONDITIONS, min_size=1, max_size=3)
PATTERNS = st.one_of(
    FIELD_MAPS,
    st.builds(lambda fields, alternatives: {**fields, "$or": alternatives},
              st.dictionaries(FIELDS, CONDITIONS, max_size=2), st.lists(FIELD_MAPS, min_size=1, max_size=3)),
    st.builds(lambda fields, alternatives: {**fields, "$or": [*alternatives, {"$or": alternatives}]},
              st.dictionaries(FIELDS, CONDITIONS, max_size=1), st.lists(FIELD_MAPS, min_size=1, max_size=2)),
)
FUNCTIONS = st.lists(st.lists(PATTERNS, min_size=1, max_size=3), min_size=0, max_size=6)
EVENTS = st.dictionaries(FIELDS, st.one_of(VALUES, st.sampled_from(["A", "B", "ad", "cb", "abd"]), st.integers(0, 3),
                                           st.none(), st.lists(VALUES, max_size=1)),
                         max_size=3)


@settings(max_examples=600, deadline=None)
@given(FUNCTIONS, st.lists(EVENTS, min_size=1, max_size=8))
def test_the_index_agrees_with_testing_every_rule(patterns, events):
    """Randomized rules with every operator and $or (at the top and inside it), and randomized events."""
    functions = [active(f"fn-{index}", *rules) for index, rules in enumerate(patterns)]
    rules = Rules(functions)
    for event in events:
        assert matched(rules, event) == every_rule(functions, event)


def _random_condition(generator):
    """A condition on one field with any operator, over a few values so that events hit them."""
    values = ["a", "b", "c"]
    pick = generator.sample
    return generator.choice([
        lambda: pick(values, generator.randint(1, 2)),
        lambda: {"equals": pick(values, 1)},
        lambda: {"anything-but": pick(values + [1], generator.randint(1, 2))},
        lambda: {"anything-but": {"prefix": pick(values, 1)}},
        lambda: {"equals-ignore-case": [generator.choice(values).upper()]},
        lambda: {"wildcard": [generator.choice(["a*", "*b", "*", "c*c"])]},
        lambda: {"exists": generator.random() < 0.5},
        lambda: {"gt": generator.randint(0, 2)},
    ])()


def _random_pattern(generator, depth=0):
    """Mostly keyed on table, at the top or in every pattern of a $or, with other fields and $or around it."""
    pattern = {}
    if generator.random() < 0.7:
        pattern["table"] = generator.sample(TABLES[:3], generator.randint(1, 2))
    for field in generator.sample(["kind", "source", "n"], generator.randint(0, 2)):
        pattern[field] = _random_condition(generator)
    if depth < 2 and generator.random() < 0.5:
        pattern["$or"] = [_random_pattern(generator, depth + 1) for _ in range(generator.randint(1, 3))]
    if depth == 0 and generator.random() < 0.2:
        pattern["image"] = {"$or": [{"kind": _random_condition(generator)}, {"n": _random_condition(generator)}]}
    return pattern or {"kind": _random_condition(generator)}


def _random_event(generator):
    values = ["a", "b", "c", "A", "ab", "cbc", "cc", 1, 2, None]
    event = {field: generator.choice(values) for field in ("kind", "source", "n") if generator.random() < 0.8}
    if generator.random() < 0.9:
        event["table"] = generator.choice(TABLES[:4])
    if generator.random() < 0.3:
        event["image"] = {"kind": generator.choice(values), "n": generator.choice(values)}
    return event


def test_the_index_agrees_with_testing_every_rule_on_random_rules_with_the_new_operators():
    """Seeded, so that a failure can be replayed: 300 catalogs of up to 8 functions, 40 events each."""
    import random

    generator = random.Random(21)
    keyed = 0
    for _ in range(300):
        functions = [active(f"fn-{index}", *[_random_pattern(generator) for _ in range(generator.randint(1, 3))])
                     for index in range(generator.randint(1, 8))]
        rules = Rules(functions)
        keyed += rules.field == "table"
        for _ in range(40):
            event = _random_event(generator)
            assert matched(rules, event) == every_rule(functions, event), (event, rules.field)
    assert keyed > 100
