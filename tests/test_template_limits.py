"""Hostile templates: alias bombs, huge files, deep nesting and long values are refused
quickly with short errors, off the hub; ordinary anchors keep working."""

import time

import gevent
import pytest

from relay.errors import TemplateError
from relay.functions import load_function, parse_template
from relay.functions.document import MAX_DEPTH, MAX_NODES, MAX_TEMPLATE_BYTES
from relay.live.catalog import Catalog
from relay.live.reconciler import Reconciler
from relay.live.status import Outcome
from relay.quoting import QUOTE_LIMIT, quote
from tests.support.reconciler import Builder, write
from tests.support.templates import HEAD, alias_bomb


@pytest.mark.parametrize("under", ["bomb: *l7", "secrets: {TOKEN: *l7}", "env: {TOKEN: *l7}"])
def test_an_alias_bomb_is_refused_with_the_exact_message(under):
    text = alias_bomb(under)
    assert 450 < len(text.encode()) < 600
    with pytest.raises(TemplateError) as refused:
        parse_template(text)
    assert str(refused.value) == f"template.yaml: expands to more than {MAX_NODES} nodes"


def test_the_same_bomb_in_a_function_directory_fails_to_load_in_well_under_a_second(tmp_path):
    directory = write(tmp_path, "bomb", template=alias_bomb("secrets: {TOKEN: *l7}"))
    started = time.monotonic()
    with pytest.raises(TemplateError) as refused:
        load_function(directory)
    assert time.monotonic() - started < 1.0   # the bound ("well under a second"); generous
    assert str(refused.value) == f"{directory / 'template.yaml'}: expands to more than {MAX_NODES} nodes"


def test_a_pattern_shared_by_two_rules_through_an_anchor_still_works():
    template = parse_template("""
runtime: python3.14
events:
  - handler: app.created
    pattern: &orders {kind: [order], total: {gt: 10}}
  - handler: app.audited
    pattern: *orders
""")
    assert [rule.pattern.matches({"kind": "order", "total": 11}) for rule in template.rules] == [True, True]
    assert [rule.pattern.matches({"kind": "order", "total": 1}) for rule in template.rules] == [False, False]


def test_a_document_just_under_the_node_limit_loads():
    values = ", ".join(["x"] * 99)
    text = HEAD + "items: &items [" + values + "]\n" + "many: [" + ", ".join(["*items"] * 90) + "]\n"
    with pytest.raises(TemplateError) as refused:   # ~9,100 nodes: under the limit, so only the unknown keys
        parse_template(text)
    assert "items: is not a key of a template" in str(refused.value)


def test_a_template_over_64_kib_is_refused_without_being_parsed(tmp_path, monkeypatch):
    import relay.functions.document as document

    composed = []
    monkeypatch.setattr(document, "_Loader", composed.append)
    text = HEAD + "# " + "x" * MAX_TEMPLATE_BYTES + "\n"
    with pytest.raises(TemplateError) as refused:
        parse_template(text)
    assert str(refused.value) == "template.yaml: is larger than 64 KiB; a template is refused unread past that"
    directory = write(tmp_path, "huge", template=text)
    with pytest.raises(TemplateError) as refused:
        load_function(directory)
    assert str(refused.value).endswith("template.yaml: is larger than 64 KiB; a template is refused unread past that")
    assert composed == []


def nested(levels):
    """A template whose deepest collection is *levels* collections down (the root mapping is 1)."""
    pattern = "{a: [x]}"                         # 2 levels: the mapping and the list
    for _ in range(levels - 5):                  # root, events, the rule, pattern: 4 more, minus the list
        pattern = "{a: " + pattern + "}"
    return f"runtime: python3.14\nevents:\n  - handler: app.handler\n    pattern: {pattern}\n"


def test_nesting_deeper_than_32_levels_is_a_template_error():
    assert parse_template(nested(MAX_DEPTH)).rules[0].pattern is not None
    with pytest.raises(TemplateError) as refused:
        parse_template(nested(MAX_DEPTH + 1))
    assert str(refused.value) == "template.yaml: nests deeper than 32 levels"


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "[" * 5000 + "]" * 5000 + "\n", "- " * 2000 + "x\n"])
def test_self_reference_and_extreme_nesting_are_template_errors_never_recursion_errors(text):
    with pytest.raises(TemplateError) as refused:
        parse_template(text)
    assert len(str(refused.value)) < 200


def test_duplicate_keys_behind_a_shared_anchor_are_reported_once():
    text = HEAD + "shared: &s {k: 1, k: 2}\nagain: [*s, *s, *s]\n"
    with pytest.raises(TemplateError) as refused:
        parse_template(text)
    assert str(refused.value).count("is given twice") == 1


LONG = "z" * 50_000


@pytest.mark.parametrize("template", [
    f"runtime: {LONG}\nevents:\n  - handler: app.handler\n    pattern: {{kind: [a]}}\n",
    f"runtime: python3.14\nevents:\n  - handler: {LONG}\n    pattern: {{kind: [a]}}\n",
    f"runtime: python3.14\nevents:\n  - handler: app.handler\n    timeout: {LONG}\n    pattern: {{kind: [a]}}\n",
    f"runtime: python3.14\nevents:\n  - handler: app.handler\n    pattern: {{{LONG[:1000]}: a}}\n",
    f"runtime: python3.14\nevents:\n  - handler: app.handler\n    pattern: {{t: {{gt: 'now()-{LONG}'}}}}\n",
    f"runtime: python3.14\nevents:\n  - handler: app.handler\n    pattern: {{kind: [a]}}\nsecrets: {{T: {LONG}}}\n",
    f"runtime: python3.14\nevents:\n  - handler: app.handler\n    pattern: {{kind: [a]}}\nenv: {{{LONG[:1000]}-: x}}\n",
    f"runtime: python3.14\nschedules:\n  - handler: app.handler\n    cron: '* * * * *'\n    timezone: {LONG}\n",
    HEAD + "".join(f"k{index}{LONG[:1000]}: 1\n" for index in range(25)),
])
def test_error_messages_quote_at_most_about_100_characters_of_a_value(template):
    with pytest.raises(TemplateError) as refused:
        parse_template(template)
    message = str(refused.value)
    assert "zzzzz" in message
    assert "z" * (QUOTE_LIMIT + 1) not in message
    assert len(message) < 8_000, message[:500]
    assert all(len(line) < 500 for line in message.splitlines())


def test_quote_bounds_the_work_and_the_text():
    bomb = ["x" * 1000]
    for _ in range(8):
        bomb = [bomb] * 10
    assert len(quote(bomb)) <= QUOTE_LIMIT
    assert quote("short") == "'short'"
    assert quote(10 ** 5000) == "<int too large to show>"


def test_a_slow_load_runs_off_the_hub_so_other_greenlets_keep_ticking(tmp_path, monkeypatch):
    """The reconciler, wired with the hub's thread pool as under ``relay start``, loads a
    template that takes a second of blocking work; a ticker greenlet (the consumer, in
    Relay) keeps running all along."""
    import relay.functions.function as function_module

    real_sleep = gevent.monkey.get_original("time", "sleep")
    parse = function_module.check_template

    def slow_parse(text, source):
        real_sleep(1.0)   # a blocking second, as a huge or hostile template costs
        return parse(text, source)

    monkeypatch.setattr(function_module, "check_template", slow_parse)
    root = tmp_path / "functions"
    write(root, "slow")
    write(root, "bomb", template=alias_bomb("secrets: {TOKEN: *l7}"))
    hub = gevent.get_hub()
    reconciler = Reconciler(root, Builder(), Catalog(),
                            offload=lambda function, *args: hub.threadpool.apply(function, args))
    ticks = []

    def ticker():
        while True:
            ticks.append(1)
            gevent.sleep(0.01)

    ticking = gevent.spawn(ticker)
    gevent.sleep(0)
    try:
        assert reconciler.load_all() == 2
        during = len(ticks)
    finally:
        ticking.kill()
    assert during >= 20, f"the hub stalled while the templates loaded ({during} ticks in about 1 s)"
    statuses = reconciler.statuses
    assert [active.name for active in reconciler.catalog.snapshot()] == ["slow"]
    assert "bomb" not in statuses or statuses["bomb"].last_outcome is Outcome.FAILED
