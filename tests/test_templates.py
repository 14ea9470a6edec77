"""template.yaml validation: every accepted and rejected form, with precise messages."""

import textwrap

import pytest

from relay.durations import MINUTE, SECOND
from relay.errors import TemplateError
from relay.functions import parse_template
from relay.functions.template import RESERVED_VARIABLES, OnExpired, Warm

SOURCE = "/functions/demo/template.yaml"
RULE = "events:\n  - handler: events.created.handler\n    pattern: {event_name: [INSERT]}\n"


def parse(text):
    return parse_template(textwrap.dedent(text), SOURCE)


def problems(text):
    with pytest.raises(TemplateError) as caught:
        parse(text)
    return str(caught.value)


def with_rule(**fields):
    """A python3.14 template with one rule whose extra fields are given as YAML text."""
    extra = "".join(f"    {key}: {value}\n" for key, value in fields.items())
    return "runtime: python3.14\n" + RULE + extra


def with_schedule(**fields):
    body = "".join(f"    {key}: {value}\n" for key, value in fields.items())
    return "runtime: python3.14\nschedules:\n  - handler: jobs.cleanup.handler\n" + body


REFERENCE_TEMPLATE = """
runtime: python3.14
concurrency: 2

events:
  - handler: events.created.handler
    pattern:
      event_name: [INSERT]
      table_name: [users]

  - handler: events.updated.handler
    pattern:
      event_name: [MODIFY]
      table_name: [users]
    timeout: 20s

  - handler: events.deleted.handler
    pattern:
      event_name: [REMOVE]
      table_name: [users]

schedules:
  - handler: jobs.cleanup.handler
    cron: "0 3 * * *"

  - handler: jobs.report.handler
    cron: "0 8 * * 1-5"
    timezone: "Europe/Rome"
    timeout: 20s
env:
  API_URL: https://api.example.com
secrets:
  DATABASE_URL: database-url
"""


def test_the_reference_template():
    template = parse(REFERENCE_TEMPLATE)
    assert template.runtime == "python3.14" and template.concurrency == 2
    assert [(rule.handler, rule.module, rule.function, rule.timeout, rule.retries) for rule in template.rules] == [
        ("events.created.handler", "events.created", "handler", 6 * SECOND, 4),
        ("events.updated.handler", "events.updated", "handler", 20 * SECOND, 4),
        ("events.deleted.handler", "events.deleted", "handler", 6 * SECOND, 4),
    ]
    assert template.rules[1].pattern.matches({"event_name": "MODIFY", "table_name": "users"})
    assert [(s.handler, s.cron, s.timezone, s.timeout) for s in template.schedules] == [
        ("jobs.cleanup.handler", "0 3 * * *", "UTC", 6 * SECOND),
        ("jobs.report.handler", "0 8 * * 1-5", "Europe/Rome", 20 * SECOND),
    ]
    assert dict(template.env) == {"API_URL": "https://api.example.com"}
    assert dict(template.secrets) == {"DATABASE_URL": "database-url"}


def test_defaults():
    template = parse("runtime: node24\n" + RULE)
    assert template.concurrency == 2
    (rule,) = template.rules
    assert (rule.timeout, rule.retries) == (6 * SECOND, 4)
    assert template.schedules == () and dict(template.env) == {} and dict(template.secrets) == {}


@pytest.mark.parametrize("runtime", ["python3.14", "node24"])
def test_runtimes(runtime):
    assert parse(f"runtime: {runtime}\n" + RULE).runtime == runtime


@pytest.mark.parametrize(("line", "message"), [
    ("", "runtime: is required; use one of python3.14, node24"),
    ("runtime: python3.13\n", 'runtime: "python3.13" is not supported; use one of python3.14, node24'),
    ("runtime: node\n", 'runtime: "node" is not supported'),
    ("runtime: 3.14\n", "runtime: 3.14 is not supported"),
])
def test_bad_runtime(line, message):
    assert message in problems(line + RULE)


@pytest.mark.parametrize(("value", "expected"), [("1", 1), ("2", 2), ("16", 16)])
def test_concurrency(value, expected):
    assert parse(f"runtime: node24\nconcurrency: {value}\n" + RULE).concurrency == expected


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "true", '"2"', "null", "[2]"])
def test_bad_concurrency(value):
    assert "concurrency: " in problems(f"runtime: node24\nconcurrency: {value}\n" + RULE)
    assert "must be a whole number of 1 or more" in problems(f"runtime: node24\nconcurrency: {value}\n" + RULE)


@pytest.mark.parametrize(("handler", "module", "function"), [
    ("events.created.handler", "events.created", "handler"),
    ("handler.handler", "handler", "handler"),
    ("a.b", "a", "b"),
    ("pkg.sub.mod.fn_2", "pkg.sub.mod", "fn_2"),
    ("send-email.handler", "send-email", "handler"),
    ("index.$main", "index", "$main"),
])
def test_handlers_split_at_the_last_dot(handler, module, function):
    text = f"runtime: python3.14\nevents:\n  - handler: {handler}\n    pattern: {{a: [1]}}\n"
    (rule,) = parse(text).rules
    assert (rule.handler, rule.module, rule.function) == (handler, module, function)


@pytest.mark.parametrize("handler", ["handler", "events.", ".handler", "a..b", "a.b-c", "a b.c", "1", "[a.b]", '""'])
def test_bad_handlers(handler):
    text = f"runtime: python3.14\nevents:\n  - handler: {handler}\n    pattern: {{a: [1]}}\n"
    assert "events[0].handler: " in problems(text)
    assert "is not of the form module.function" in problems(text)


def test_handler_and_pattern_are_required():
    text = problems("runtime: python3.14\nevents:\n  - timeout: 5s\n")
    assert "events[0].handler: is required, as module.function" in text
    assert "events[0].pattern: is required" in text


@pytest.mark.parametrize(("value", "expected"), [
    ("20s", 20 * SECOND), ("1m30s", 90 * SECOND), ("5m", 5 * MINUTE), ("300ms", 300 * SECOND // 1000),
    ('"1s"', SECOND), ("4m59.9s", 5 * MINUTE - 100 * SECOND // 1000),
])
def test_timeouts(value, expected):
    assert parse(with_rule(timeout=value)).rules[0].timeout == expected
    assert parse(with_schedule(cron='"0 3 * * *"', timeout=value)).schedules[0].timeout == expected


@pytest.mark.parametrize(("value", "message"), [
    ("0s", '"0s" must be longer than zero'), ('"0"', '"0" must be longer than zero'),
    ("0", "must be a Go duration such as 20s or 1m30s, not the number 0"),
    ("-5s", '"-5s" must be longer than zero'), ("5m1s", '"5m1s" is longer than the maximum of 5m0s'),
    ("1h", '"1h" is longer than the maximum'), ("20", "not the number 20"), ("abc", '"abc" is not a duration'),
    ("1d", 'unknown unit "d"'), ("true", "not the boolean true"), ("null", "not an empty value (null)"),
])
def test_bad_timeouts(value, message):
    assert "events[0].timeout: " in problems(with_rule(timeout=value))
    assert message in problems(with_rule(timeout=value))
    assert message in problems(with_schedule(cron='"0 3 * * *"', timeout=value))


@pytest.mark.parametrize(("value", "expected"), [("0", 0), ("1", 1), ("10", 10)])
def test_retries(value, expected):
    assert parse(with_rule(retries=value)).rules[0].retries == expected


@pytest.mark.parametrize("value", ["-1", "abc", "1.5", "true", "false", '"4"', "null", "[1]"])
def test_bad_retries(value):
    text = problems(with_rule(retries=value))
    assert "events[0].retries: " in text and "must be a whole number of 0 or more" in text


@pytest.mark.parametrize(("cron", "timezone"), [
    ('"0 3 * * *"', None), ('"0 8 * * 1-5"', '"Europe/Rome"'), ('"*/15 * * * *"', "America/Sao_Paulo"),
    ('"30 0 3 * * *"', None), ('"*/10 * * * * *"', "UTC"), ('"0 0 1 1 *"', "Asia/Kolkata"),
])
def test_schedules(cron, timezone):
    fields = {"cron": cron}
    if timezone:
        fields["timezone"] = timezone
    (schedule,) = parse(with_schedule(**fields)).schedules
    assert schedule.cron == cron.strip('"') and schedule.timezone == (timezone or "UTC").strip('"')


@pytest.mark.parametrize(("fields", "message"), [
    ({}, "schedules[0].cron: is required"),
    ({"cron": '"0 3 * *"'}, "is not a cron expression of 5 fields"),
    ({"cron": '"0 0 3 * * * 2026"'}, "is not a cron expression of 5 fields"),
    ({"cron": '"@daily"'}, "is not a cron expression of 5 fields"),
    ({"cron": '"61 3 * * *"'}, '"61 3 * * *" is not a valid cron expression'),
    ({"cron": '"0 25 * * *"'}, "is not a valid cron expression"),
    ({"cron": "5"}, "5 is not a cron expression"),
    ({"cron": '"0 3 * * *"', "timezone": "Mars/Olympus"},
     'schedules[0].timezone: "Mars/Olympus" is not an IANA time zone'),
    ({"cron": '"0 3 * * *"', "timezone": '""'}, 'schedules[0].timezone: "" is not an IANA time zone'),
    ({"cron": '"0 3 * * *"', "timezone": "../etc/passwd"}, "is not an IANA time zone"),
    ({"cron": '"0 3 * * *"', "retries": "2"}, "schedules[0].retries: is not a key of a schedule"),
])
def test_bad_schedules(fields, message):
    assert message in problems(with_schedule(**fields))


def test_schedule_handler_required():
    assert "schedules[0].handler: is required" in problems('runtime: node24\nschedules:\n  - cron: "0 3 * * *"\n')


def test_a_template_with_only_schedules_is_fine():
    template = parse(with_schedule(cron='"0 3 * * *"'))
    assert template.rules == () and len(template.schedules) == 1


@pytest.mark.parametrize("body", ["", "events: []\n", "events:\nschedules: []\n"])
def test_a_template_needs_events_or_schedules(body):
    assert "a template needs at least one entry in events or schedules" in problems("runtime: node24\n" + body)


@pytest.mark.parametrize(("text", "message"), [
    ("runtime: node24\nevent:\n" + RULE, "event: is not a key of a template; use runtime, concurrency, events"),
    ("runtime: node24\n" + RULE + "    timout: 5s\n", "events[0].timout: is not a key of an events rule"),
    ("runtime: node24\nevents: {handler: a.b}\n", "events: must be a list"),
    ("runtime: node24\nevents:\n  - a.b\n", "events[0]: must be a mapping"),
    ("- runtime\n", "a template is a mapping"),
    ("", "a template is a mapping"),
    ("runtime: node24\nruntime: python3.14\n" + RULE, "runtime: is given twice"),
    ("runtime: node24\nevents:\n  - handler: a.b\n    pattern: {a: [1], a: [2]}\n",
     "events[0].pattern.a: is given twice"),
])
def test_structure_problems(text, message):
    assert message in problems(text)


def test_pattern_field_names_are_free():
    text = "runtime: node24\nevents:\n  - handler: a.b\n    pattern: {runtime: [x], handler: {timeout: [1]}}\n"
    (rule,) = parse(text).rules
    assert rule.pattern.matches({"runtime": "x", "handler": {"timeout": 1}})


def test_invalid_yaml():
    text = problems("runtime: node24\nevents: [\n")
    assert text.startswith(f"{SOURCE}: 1 problem\n  line 3: is not valid YAML: ")
    assert text.endswith("at column 1") and "unicode string" not in text
    assert "\n" not in text.split("\n", 1)[1]


def test_env_values_are_the_scalar_text_as_written():
    template = parse(textwrap.dedent("""
        runtime: node24
        env:
          API_URL: https://api.example.com
          DEBUG: true
          EMPTY: ""
          BARE:
          OCTAL: 010
          FLOAT: 1.50
          QUOTED: 'it''s'
          NULLISH: null
        """) + RULE)
    assert dict(template.env) == {"API_URL": "https://api.example.com", "DEBUG": "true", "EMPTY": "", "BARE": "",
                                  "OCTAL": "010", "FLOAT": "1.50", "QUOTED": "it's", "NULLISH": "null"}


@pytest.mark.parametrize(("env", "message"), [
    ("1BAD: x", 'env.1BAD: "1BAD" is not a valid environment variable name'),
    ("BAD-NAME: x", 'env.BAD-NAME: "BAD-NAME" is not a valid environment variable name'),
    ("RELAY_HANDLER: x", "env.RELAY_HANDLER: RELAY_HANDLER is reserved by Relay"),
    ("RELAY_IDEMPOTENCY_KEY: x", "env.RELAY_IDEMPOTENCY_KEY: RELAY_IDEMPOTENCY_KEY is reserved by Relay"),
    ("LIST: [a, b]", "env.LIST: must be a single value"),
    ("MAP: {a: b}", "env.MAP: must be a single value"),
])
def test_bad_env(env, message):
    assert message in problems(f"runtime: node24\nenv:\n  {env}\n" + RULE)


def test_every_handler_context_variable_is_reserved_in_env_and_secrets():
    from relay.runtime.context import NAMES

    assert set(NAMES) == RESERVED_VARIABLES
    text = problems("runtime: node24\nenv:\n" + "".join(f"  {name}: x\n" for name in NAMES)
                    + "secrets:\n" + "".join(f"  {name}: database\n" for name in NAMES) + RULE)
    for name in NAMES:
        assert f"env.{name}: {name} is reserved by Relay" in text
        assert f"secrets.{name}: {name} is reserved by Relay" in text
    assert parse_template("runtime: node24\nenv:\n  RELAY_URL: x\n" + RULE, "t.yaml").env == {"RELAY_URL": "x"}


def test_env_must_be_a_mapping():
    assert "env: must be a mapping" in problems("runtime: node24\nenv: [A]\n" + RULE)


@pytest.mark.parametrize(("secrets", "message"), [
    ("DB: .database", 'secrets.DB: ".database" is not a valid secret name'),
    ("DB: Database", 'secrets.DB: "Database" is not a valid secret name'),
    ("DB: 5", "secrets.DB: 5 is not a valid secret name"),
    ("1DB: database", 'secrets.1DB: "1DB" is not a valid environment variable name'),
    ("RELAY_HANDLER: database", "secrets.RELAY_HANDLER: RELAY_HANDLER is reserved by Relay"),
    ("RELAY_DEADLINE: database", "secrets.RELAY_DEADLINE: RELAY_DEADLINE is reserved by Relay"),
    ("API_URL: api-url", "secrets.API_URL: API_URL is also set in env"),
])
def test_bad_secrets(secrets, message):
    text = f"runtime: node24\nenv:\n  API_URL: x\nsecrets:\n  {secrets}\n" + RULE
    assert message in problems(text)


def test_all_problems_are_reported_at_once():
    text = problems("""
        runtime: python3.13
        concurrency: 0
        events:
          - handler: events.created.handler
            pattern:
              created_at: {gt: "2026-09-12T10:00:00Z"}
            timeout: 10m
          - handler: bad
            patern: {a: [1]}
        """)
    assert text.splitlines() == [
        f"{SOURCE}: 7 problems",
        '  line 2: runtime: "python3.13" is not supported; use one of python3.14, node24',
        "  line 3: concurrency: 0 must be a whole number of 1 or more",
        '  line 7: events[0].pattern.created_at.gt: "2026-09-12T10:00:00Z" is neither a number nor a now() '
        "expression such as now()-5m",
        '  line 8: events[0].timeout: "10m" is longer than the maximum of 5m0s',
        "  line 10: events[1].patern: is not a key of an events rule; use handler, pattern, timeout, retries, "
        "retry_backoff, retry_jitter, max_event_age, on_expired",
        '  line 9: events[1].handler: "bad" is not of the form module.function (e.g. events.created.handler)',
        "  line 9: events[1].pattern: is required",
    ]


# --- warm ---

def test_without_warm_every_invocation_gets_its_own_container():
    template = parse("runtime: python3.14\nconcurrency: 4\n" + RULE)
    assert template.warm is None and template.running_limit == 4


def test_warm_defaults():
    template = parse("runtime: python3.14\nconcurrency: 4\nwarm: {}\n" + RULE)
    assert template.warm == Warm(containers=4, max_invocations=1000, idle=10 * MINUTE, prestart=False)
    assert template.running_limit == 4


def test_warm_settings():
    template = parse("runtime: node24\nconcurrency: 4\nwarm:\n  containers: 2\n  max_invocations: 50\n"
                     "  idle: 90s\n  prestart: true\n" + RULE)
    assert template.warm == Warm(containers=2, max_invocations=50, idle=90 * SECOND, prestart=True)
    assert template.running_limit == 2


@pytest.mark.parametrize(("warm", "message"), [
    ("warm:\n  containers: 5\n", "warm.containers: 5 must be between 1 and concurrency (4)"),
    ("warm:\n  containers: 0\n", "warm.containers: 0 must be between 1 and concurrency (4)"),
    ("warm:\n  containers: two\n", 'warm.containers: "two" must be between 1 and concurrency (4)'),
    ("warm:\n  containers: true\n", "warm.containers: true must be between 1 and concurrency (4)"),
    ("warm:\n  max_invocations: 0\n", "warm.max_invocations: 0 must be a whole number of 1 or more"),
    ("warm:\n  max_invocations: 1.5\n",
     "warm.max_invocations: must be a whole number of 1 or more, not the number 1.5"),
    ("warm:\n  idle: 10\n", "warm.idle: must be a Go duration such as 20s or 1m30s, not the number 10"),
    ("warm:\n  idle: 0s\n", 'warm.idle: "0s" must be longer than zero'),
    ("warm:\n  idle: soon\n", 'warm.idle: "soon" is not a duration'),
    ("warm:\n  prestart: yes please\n", 'warm.prestart: must be true or false, not the string "yes please"'),
    ("warm:\n  containres: 2\n", "warm.containres: is not a key of warm; use containers, max_invocations, idle, "
                                 "prestart"),
    ("warm: true\n",
     "warm: must be a mapping with containers, max_invocations, idle or prestart, not the boolean true"),
    ("warm: [2]\n", "warm: must be a mapping"),
    ("warm:\n", "warm: must be a mapping"),
])
def test_bad_warm(warm, message):
    assert message in problems("runtime: python3.14\nconcurrency: 4\n" + warm + RULE)


def test_warm_problems_come_with_the_others():
    text = problems("runtime: python3.14\nconcurrency: 0\nwarm:\n  containers: 3\n  idle: x\n" + RULE)
    assert "concurrency: 0 must be a whole number of 1 or more" in text
    assert 'warm.idle: "x" is not a duration' in text


# --- retries: retry_backoff and retry_jitter ---

def test_retry_defaults():
    (rule,) = parse(with_rule()).rules
    assert (rule.retry_backoff, rule.retry_jitter) == (None, False)     # None: Relay's 1m, 2m, 5m, 10m


@pytest.mark.parametrize(("value", "expected"), [
    ("[10s, 30s, 2m]", (10 * SECOND, 30 * SECOND, 2 * MINUTE)), ("[1s]", (SECOND,)), ('["500ms"]', (SECOND // 2,)),
    ("[1h]", (60 * MINUTE,)),
])
def test_retry_backoff(value, expected):
    assert parse(with_rule(retry_backoff=value)).rules[0].retry_backoff == expected


@pytest.mark.parametrize(("value", "message"), [
    ("[]",
     "events[0].retry_backoff: must be a list of one or more durations such as [10s, 30s, 2m], not an empty list"),
    ("10s",
     'events[0].retry_backoff: must be a list of one or more durations such as [10s, 30s, 2m], not the string "10s"'),
    ("{a: 1s}", "events[0].retry_backoff: must be a list"),
    ("[10s, x]", 'events[0].retry_backoff[1]: "x" is not a duration'),
    ("[10s, 30s, 5]", "events[0].retry_backoff[2]: must be a Go duration such as 20s or 1m30s, not the number 5"),
    ("[1d]", 'events[0].retry_backoff[0]: "1d" is not a duration (unknown unit "d"'),
    ("[0s]", 'events[0].retry_backoff[0]: "0s" must be longer than zero'),
    ("[1s, -5s]", 'events[0].retry_backoff[1]: "-5s" must be longer than zero'),
    ("[1h1s]", 'events[0].retry_backoff[0]: "1h1s" is longer than the maximum of 1h0m0s'),
    ("[[1s]]", 'events[0].retry_backoff[0]: must be a Go duration such as 20s or 1m30s, not the list ["1s"]'),
])
def test_bad_retry_backoff(value, message):
    assert message in problems(with_rule(retry_backoff=value))


def test_every_bad_retry_backoff_value_is_reported_with_its_index():
    text = problems(with_rule(retry_backoff="[x, 10s, 0s, 2h]"))
    assert "4 problems" not in text and "3 problems" in text
    for index in (0, 2, 3):
        assert f"events[0].retry_backoff[{index}]: " in text


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("false", False)])
def test_retry_jitter(value, expected):
    assert parse(with_rule(retry_jitter=value)).rules[0].retry_jitter is expected


@pytest.mark.parametrize(("value", "message"), [
    ('"true"', 'events[0].retry_jitter: must be true or false, not the string "true"'),
    ("1", "events[0].retry_jitter: must be true or false, not the number 1"),
    ("20%", 'events[0].retry_jitter: must be true or false, not the string "20%"'),
])
def test_bad_retry_jitter(value, message):
    assert message in problems(with_rule(retry_jitter=value))


def test_schedules_take_no_retry_or_expiry_keys():
    for key, value in (("retry_backoff", "[1s]"), ("retry_jitter", "true"), ("max_event_age", "1h"),
                       ("on_expired", "drop")):
        assert f"schedules[0].{key}: is not a key of a schedule" in problems(
            with_schedule(cron='"0 3 * * *"', **{key: value}))


# --- stale work: max_event_age and on_expired ---

def test_expiry_defaults():
    (rule,) = parse(with_rule()).rules
    assert (rule.max_event_age, rule.on_expired) == (None, OnExpired.DEAD_LETTER)


def test_max_event_age_and_on_expired_on_a_rule():
    (rule,) = parse(with_rule(max_event_age="1h30m", on_expired="drop")).rules
    assert (rule.max_event_age, rule.on_expired) == (90 * MINUTE, OnExpired.DROP)
    (rule,) = parse(with_rule(max_event_age="10m")).rules
    assert (rule.max_event_age, rule.on_expired) == (10 * MINUTE, OnExpired.DEAD_LETTER)


FUNCTION_EXPIRY = """
runtime: python3.14
max_event_age: 1h
on_expired: drop
events:
  - handler: a.inherits
    pattern: {k: [1]}
  - handler: a.own_age
    pattern: {k: [1]}
    max_event_age: 5m
  - handler: a.own_action
    pattern: {k: [1]}
    on_expired: dead-letter
"""


def test_the_functions_expiry_applies_to_every_rule_and_a_rules_own_value_wins():
    rules = parse(FUNCTION_EXPIRY).rules
    assert [(rule.handler, rule.max_event_age, rule.on_expired) for rule in rules] == [
        ("a.inherits", 60 * MINUTE, OnExpired.DROP), ("a.own_age", 5 * MINUTE, OnExpired.DROP),
        ("a.own_action", 60 * MINUTE, OnExpired.DEAD_LETTER)]


def test_a_rules_max_event_age_is_enough_for_the_functions_on_expired():
    text = "runtime: python3.14\non_expired: drop\n" + RULE + "    max_event_age: 1h\n" + \
        "  - handler: a.other\n    pattern: {k: [1]}\n"
    rules = parse(text).rules
    assert [(rule.max_event_age, rule.on_expired) for rule in rules] == [(60 * MINUTE, OnExpired.DROP),
                                                                          (None, OnExpired.DROP)]


@pytest.mark.parametrize(("top", "fields", "message"), [
    ("", {"max_event_age": "0s"}, 'events[0].max_event_age: "0s" must be longer than zero'),
    ("", {"max_event_age": "-1h"}, 'events[0].max_event_age: "-1h" must be longer than zero'),
    ("", {"max_event_age": "1d"}, 'events[0].max_event_age: "1d" is not a duration (unknown unit "d"'),
    ("", {"max_event_age": "3600"},
     "events[0].max_event_age: must be a Go duration such as 20s or 1m30s, not the number 3600"),
    ("", {"max_event_age": "1h", "on_expired": "keep"},
     'events[0].on_expired: "keep" is not one of dead-letter, drop'),
    ("", {"max_event_age": "1h", "on_expired": "dead_letter"},
     'events[0].on_expired: "dead_letter" is not one of dead-letter, drop'),
    ("", {"on_expired": "drop"}, "events[0].on_expired: has no effect without a max_event_age, on the rule or at "
                                 "the top of the template"),
    ("max_event_age: soon\n", {}, 'max_event_age: "soon" is not a duration'),
    ("max_event_age: 0s\n", {}, 'max_event_age: "0s" must be longer than zero'),
    ("max_event_age: 1h\non_expired: [drop]\n", {}, 'on_expired: ["drop"] is not one of dead-letter, drop'),
    ("on_expired: drop\n", {}, "on_expired: has no effect without a max_event_age"),
])
def test_bad_expiry(top, fields, message):
    extra = "".join(f"    {key}: {value}\n" for key, value in fields.items())
    assert message in problems("runtime: python3.14\n" + top + RULE + extra)


def test_a_bad_function_max_event_age_is_reported_once():
    text = problems("runtime: python3.14\nmax_event_age: x\n" + RULE + "    on_expired: drop\n")
    assert "1 problem" in text and 'max_event_age: "x" is not a duration' in text


def test_expiry_problems_come_with_the_others():
    text = problems(with_rule(max_event_age="0s", retry_backoff="[]", retry_jitter="maybe", retries="-1"))
    for field in ("max_event_age", "retry_backoff", "retry_jitter", "retries"):
        assert f"events[0].{field}: " in text
