"""template.yaml: loading and validating a function's template.

``parse_template(text, source)`` returns a Template or raises
TemplateError listing every problem, each with the path of the field
(``events[1].pattern.created_at.gt``), its line, the offending value and the
rule. ``check_template`` does the same work without raising for problems:
it also hands back the handler fields it could read, so that a check of the
handler files can run beside the template's own problems
(relay.functions.function). Unknown keys in the template's own structure
are errors, so a typo never silently does nothing; pattern field names are
free, and the ones that look like operators Relay does not have are warnings
(relay.functions.patterns). The YAML is read within limits of size,
expanded nodes and depth (relay.functions.document), and a value is shown
in a message at about 100 characters at most.
"""

import re
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

from relay.durations import HOUR, MINUTE, SECOND, format_duration, parse_duration
from relay.errors import DurationError, InvalidTemplate
from relay.functions.document import Locations, load_document
from relay.functions.patterns import Pattern, compile_pattern
from relay.functions.problems import Problem, Problems, given, join, reason, show
from relay.names import env_name_problem, secret_name_problem

RUNTIMES = ("python3.14", "node24")
DEFAULT_CONCURRENCY = 2
DEFAULT_TIMEOUT = 6 * SECOND
MAX_TIMEOUT = 5 * MINUTE
DEFAULT_RETRIES = 4
RESERVED_VARIABLES = frozenset({"RELAY_FUNCTION", "RELAY_HANDLER", "RELAY_MESSAGE_ID", "RELAY_EVENT_ID",
                                "RELAY_ATTEMPT", "RELAY_DEADLINE", "RELAY_IDEMPOTENCY_KEY"})  # relay.runtime.context
NETWORKS = ("none",)  # network: none runs the containers without any network; absent means the engine's default
DEFAULT_MAX_INVOCATIONS = 1000
DEFAULT_IDLE = 10 * MINUTE
MAX_RETRY_BACKOFF = 1 * HOUR   # each retry_backoff value; relay.stream.markers.HORIZON allows for it (+20 % jitter)
DEAD_LETTER, DROP = "dead-letter", "drop"
ON_EXPIRED = (DEAD_LETTER, DROP)
_NO_EXPIRY = (None, DEAD_LETTER)   # no max_event_age; on_expired's default
RATE_UNITS = {"s": SECOND, "m": MINUTE, "h": HOUR}
MAX_RATE = 1_000_000  # invocations per period; keeps the limiter's arithmetic exact (relay.stream.limits)

_TOP_KEYS = ("runtime", "concurrency", "events", "schedules", "env", "secrets", "network", "warm", "max_event_age",
             "on_expired", "rate_limit", "concurrency_key")
_WARM_KEYS = ("containers", "max_invocations", "idle", "prestart")
_RULE_KEYS = ("handler", "pattern", "timeout", "retries", "retry_backoff", "retry_jitter", "max_event_age",
              "on_expired")
_SCHEDULE_KEYS = ("handler", "cron", "timezone", "timeout")
_RATE = re.compile(r"([0-9]{1,9})/([smh])", re.ASCII)
_HANDLER = re.compile(r"((?:[A-Za-z0-9_][A-Za-z0-9_-]*\.)*[A-Za-z0-9_][A-Za-z0-9_-]*)\.([A-Za-z_$][A-Za-z0-9_$]*)",
                      re.ASCII)


@dataclass(frozen=True)
class Rule:
    """One entry of ``events``: run *handler* for events that match *pattern*."""

    handler: str
    module: str
    function: str
    pattern: Pattern
    timeout: int = DEFAULT_TIMEOUT  # nanoseconds
    retries: int = DEFAULT_RETRIES
    retry_backoff: tuple[int, ...] | None = None  # ns before retry n, the last repeating; None: 1m, 2m, 5m, 10m
    retry_jitter: bool = False                    # each delay spread by ±20 %
    max_event_age: int | None = None   # ns; not run for an older entry (the function's value unless the rule's own)
    on_expired: str = DEAD_LETTER      # what happens to such an entry: dead-letter or drop
    repeat: int = 0   # earlier rules of the template with the same handler: keeps their invocations apart


@dataclass(frozen=True)
class Schedule:
    """One entry of ``schedules``: run *handler* at every occurrence of *cron* in *timezone*."""

    handler: str
    module: str
    function: str
    cron: str
    timezone: str = "UTC"
    timeout: int = DEFAULT_TIMEOUT  # nanoseconds
    retries: int = DEFAULT_RETRIES  # not set in templates: scheduled runs retry like a rule's default
    repeat: int = 0   # as Rule's; an occurrence's entry runs only its own schedule, so always 0
    retry_backoff: None = None      # nor these: a schedule occurrence backs off like a rule's default, and
    retry_jitter: bool = False      # never expires
    max_event_age: None = None
    on_expired: str = DEAD_LETTER


@dataclass(frozen=True)
class Warm:
    """The template's ``warm:``: reuse up to *containers* resident containers per worker.

    A container serves at most *max_invocations* invocations and is stopped
    after *idle* nanoseconds without one; with *prestart* they are started
    when the function becomes ready instead of at its first invocation.
    """

    containers: int
    max_invocations: int = DEFAULT_MAX_INVOCATIONS
    idle: int = DEFAULT_IDLE  # nanoseconds
    prestart: bool = False


@dataclass(frozen=True)
class RateLimit:
    """The template's ``rate_limit: <count>/<unit>``: at most *count* invocations of the
    function start per second, minute or hour (*unit* s, m or h) across the consumer group."""

    count: int
    unit: str

    @property
    def period(self):
        """The period in nanoseconds."""
        return RATE_UNITS[self.unit]

    def __str__(self):
        return f"{self.count}/{self.unit}"


@dataclass(frozen=True)
class ConcurrencyKey:
    """The template's ``concurrency_key: new_image.id``: one invocation per value of that
    field of the event runs at a time across the consumer group."""

    path: str
    fields: tuple

    def value(self, event):
        """The field's value in *event* when it is a string, number or boolean; else None (run unkeyed)."""
        value = event
        for name in self.fields:
            if type(value) is not dict:
                return None
            value = value.get(name)
        return value if type(value) in (str, int, float, bool) else None


@dataclass(frozen=True, eq=False)
class Template:
    runtime: str
    concurrency: int
    rules: tuple
    schedules: tuple
    env: MappingProxyType
    secrets: MappingProxyType
    network: str | None = None  # None: the engine's default network
    warm: Warm | None = None    # None: one throw-away container per invocation
    rate_limit: RateLimit | None = None             # None: no fleet-wide rate limit
    concurrency_key: ConcurrencyKey | None = None   # None: events of one entity may run in parallel
    warnings: tuple[Problem, ...] = field(default=(), repr=False)  # said when it loads; change nothing

    @property
    def running_limit(self):
        """How many invocations of this function one worker runs at once."""
        return self.warm.containers if self.warm is not None else self.concurrency


@dataclass(frozen=True)
class HandlerField:
    """A ``handler`` of the right form, wherever it is: what a check of the handler files needs."""

    path: str        # events[0].handler, schedules[1].handler
    handler: str     # events.created.handler
    module: str      # events.created


@dataclass(frozen=True)
class CheckedTemplate:
    """What ``check_template`` found: the Template (None when there is an error) and every problem."""

    template: Template | None
    problems: tuple[Problem, ...]       # errors and warnings, each with its line where known
    runtime: str | None                 # the runtime, when it is one Relay has
    handlers: tuple[HandlerField, ...]  # every handler of the right form, in entries with problems too
    secrets: MappingProxyType           # variable -> secret name, every valid entry of secrets
    locations: Locations | None

    @property
    def errors(self):
        return [problem for problem in self.problems if problem.severity == "error"]

    def line(self, path):
        """The line *path* is written on (or its nearest ancestor), or None."""
        return self.locations.line(path) if self.locations is not None else None


def parse_template(text, source="template.yaml"):
    """Validate the YAML *text* of a template; *source* names it in errors."""
    checked = check_template(text, source)
    if checked.template is None:
        raise InvalidTemplate(source, checked.errors)
    return checked.template


def check_template(text, source="template.yaml"):
    """Every problem of the YAML *text* of a template, as a CheckedTemplate; *source* names it.

    Raises only for text past a limit or not YAML at all (TemplateTooLarge,
    InvalidTemplate): nothing more can be read from it.
    """
    problems = Problems()
    document, root = load_document(text, source, problems)
    locations = Locations(root)
    template, secrets = None, {}
    if not isinstance(document, dict):
        problems.add("", "is empty; a template is a mapping with runtime and events or schedules" if document is None
                     else f"a template is a mapping with runtime and events or schedules, not {given(document)}")
    else:
        template, secrets = _template(document, root, problems)
    problems.locate(locations)
    if problems.errors:
        template = None
    elif problems.warnings:
        template = replace(template, warnings=tuple(problems.warnings))
    runtime = document.get("runtime") if isinstance(document, dict) else None
    return CheckedTemplate(template=template, problems=tuple(problems.items),
                           runtime=runtime if runtime in RUNTIMES else None,
                           handlers=_handler_fields(document), secrets=MappingProxyType(secrets),
                           locations=locations)


def _handler_fields(document):
    if not isinstance(document, dict):
        return ()
    found = []
    for key in ("events", "schedules"):
        for index, item in enumerate(_listed(document, key)):
            value = item.get("handler") if isinstance(item, dict) else None
            parts = _HANDLER.fullmatch(value) if isinstance(value, str) else None
            if parts is not None:
                found.append(HandlerField(path=join(join(key, index), "handler"), handler=value,
                                          module=parts.group(1)))
    return tuple(found)


def _template(document, root, problems):
    """(the Template of a mapping *document*, or None after an error; its valid secrets)."""
    _unknown_keys(document, _TOP_KEYS, "", problems, "a template")

    runtime = document.get("runtime")
    if runtime is None:
        problems.add("runtime", f"is required; use one of {', '.join(RUNTIMES)}")
    elif runtime not in RUNTIMES:
        problems.add("runtime", f"{show(runtime)} is not supported; use one of {', '.join(RUNTIMES)}")
    concurrency = _whole_number(document, "concurrency", "", DEFAULT_CONCURRENCY, 1, problems)
    expiry = _expiry(document, "", _NO_EXPIRY, problems)
    rules = _numbered(_entries(document, "events", lambda item, path, found: _rule(item, path, found, expiry),
                               problems))
    if expiry is not None:
        _needs_max_event_age(document, "", expiry[0] is not None or any(
            isinstance(item, dict) and "max_event_age" in item for item in _listed(document, "events")), problems)
    schedules = _entries(document, "schedules", _schedule, problems)
    if not document.get("events") and not document.get("schedules"):
        problems.add("", "a template needs at least one entry in events or schedules")
    env = _env(document, root, problems)
    secrets = _secrets(document, env, problems)
    network = document.get("network")
    if network is not None and network not in NETWORKS:
        problems.add("network", f"{show(network)} is not supported; use {', '.join(NETWORKS)}, or leave network "
                                f"out for the engine's default network")
    warm = _warm(document, concurrency, problems)
    rate_limit = _rate_limit(document, problems)
    concurrency_key = _concurrency_key(document, problems)
    if problems.errors:
        return None, secrets
    return Template(runtime=runtime, concurrency=concurrency, rules=tuple(rules), schedules=tuple(schedules),
                    env=MappingProxyType(env), secrets=MappingProxyType(secrets), network=network, warm=warm,
                    rate_limit=rate_limit, concurrency_key=concurrency_key), secrets


def _numbered(rules):
    """*rules* with ``repeat`` set: two rules with one handler are two invocations, each with its own state."""
    seen: dict[str, int] = {}
    numbered = []
    for rule in rules:
        repeat = seen.get(rule.handler, 0)
        seen[rule.handler] = repeat + 1
        numbered.append(replace(rule, repeat=repeat) if repeat else rule)
    return numbered


def _unknown_keys(mapping, allowed, path, problems, what):
    for key in mapping:
        if key not in allowed:
            problems.add(join(path, key), f"is not a key of {what}; use {', '.join(allowed)}")


def _listed(document, key):
    items = document.get(key)
    return items if isinstance(items, list) else []


def _entries(document, key, parse_one, problems):
    items = document.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        problems.add(key, f"must be a list, not {given(items)}")
        return []
    parsed = []
    for index, item in enumerate(items):
        path = join(key, index)
        if not isinstance(item, dict):
            problems.add(path, f"must be a mapping, not {given(item)}")
            continue
        entry = parse_one(item, path, problems)
        if entry is not None:
            parsed.append(entry)
    return parsed


def _rule(item, path, problems, function_expiry=_NO_EXPIRY):
    """One ``events`` entry as a Rule, or None; *function_expiry* is the function's (max_event_age,
    on_expired), or None when those were invalid."""
    _unknown_keys(item, _RULE_KEYS, path, problems, "an events rule")
    handler = _handler(item, path, problems)
    pattern = None
    if "pattern" not in item:
        problems.add(join(path, "pattern"), "is required")
    else:
        pattern = compile_pattern(item["pattern"], join(path, "pattern"), problems)
    timeout = _timeout(item, path, problems)
    retries = _whole_number(item, "retries", path, DEFAULT_RETRIES, 0, problems)
    backoff = _retry_backoff(item, path, problems)
    jitter = _boolean(item, "retry_jitter", path, problems)
    expiry = _expiry(item, path, function_expiry or _NO_EXPIRY, problems)
    if expiry is not None and function_expiry is not None:  # with the function's own invalid, it cannot tell
        _needs_max_event_age(item, path, expiry[0] is not None, problems)
    if None in (handler, pattern, timeout, retries, jitter, expiry) or backoff is _INVALID:
        return None
    return Rule(handler=handler[0], module=handler[1], function=handler[2], pattern=pattern, timeout=timeout,
                retries=retries, retry_backoff=backoff, retry_jitter=jitter, max_event_age=expiry[0],
                on_expired=expiry[1])


_INVALID = object()    # a value that was wrong (the problems say why), where None means "not set"


def _retry_backoff(item, path, problems):
    """The rule's ``retry_backoff`` in nanoseconds, None when unset, _INVALID after a problem."""
    if "retry_backoff" not in item:
        return None
    values, where = item["retry_backoff"], join(path, "retry_backoff")
    if not isinstance(values, list) or not values:
        problems.add(where, f"must be a list of one or more durations such as [10s, 30s, 2m], not {given(values)}")
        return _INVALID
    delays = [_duration(dict(enumerate(values)), index, where, None, problems, maximum=MAX_RETRY_BACKOFF)
              for index in range(len(values))]
    return _INVALID if None in delays else tuple(delays)


def _expiry(mapping, path, inherited, problems):
    """(max_event_age, on_expired) of the function (*inherited* the defaults) or of a rule
    (*inherited* the function's); a value set here wins. None after a problem."""
    max_event_age = _duration(mapping, "max_event_age", path, inherited[0], problems, maximum=None)
    on_expired = mapping.get("on_expired", inherited[1])
    valid = max_event_age is not None or "max_event_age" not in mapping
    if on_expired not in ON_EXPIRED:
        problems.add(join(path, "on_expired"), f"{show(on_expired)} is not one of {', '.join(ON_EXPIRED)}")
        valid = False
    return (max_event_age, on_expired) if valid else None


def _needs_max_event_age(mapping, path, has_max_event_age, problems):
    """``on_expired`` does nothing where no max_event_age applies: say so rather than ignore it."""
    if "on_expired" in mapping and not has_max_event_age:
        problems.add(join(path, "on_expired"), "has no effect without a max_event_age, on the rule or at the top "
                                               "of the template")


def _boolean(mapping, key, path, problems):
    value = mapping.get(key, False)
    if type(value) is not bool:
        problems.add(join(path, key), f"must be true or false, not {given(value)}")
        return None
    return value


def _schedule(item, path, problems):
    _unknown_keys(item, _SCHEDULE_KEYS, path, problems, "a schedule")
    handler = _handler(item, path, problems)
    cron = _cron(item, path, problems)
    timezone = _timezone(item, path, problems)
    timeout = _timeout(item, path, problems)
    if None in (handler, cron, timezone, timeout):
        return None
    return Schedule(handler=handler[0], module=handler[1], function=handler[2], cron=cron, timezone=timezone,
                    timeout=timeout)


def _handler(item, path, problems):
    """(handler, module, function), split at the last dot, or None."""
    value = item.get("handler")
    where = join(path, "handler")
    if value is None:
        problems.add(where, "is required, as module.function (e.g. events.created.handler)")
        return None
    found = _HANDLER.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        problems.add(where, f"{show(value)} is not of the form module.function (e.g. events.created.handler)")
        return None
    return value, found.group(1), found.group(2)


def _timeout(item, path, problems):
    return _duration(item, "timeout", path, DEFAULT_TIMEOUT, problems, maximum=MAX_TIMEOUT)


def _duration(item, key, path, default, problems, *, maximum):
    """A positive Go duration of at most *maximum* (None: no maximum) in nanoseconds, or *default*."""
    if key not in item:
        return default
    value = item[key]
    where = join(path, key)
    if not isinstance(value, str):
        problems.add(where, f"must be a Go duration such as 20s or 1m30s, not {given(value)}")
        return None
    try:
        duration = parse_duration(value)
    except DurationError as error:
        problems.add(where, f"{show(value)} is not a duration ({reason(error, value)}); use e.g. 20s or 1m30s")
        return None
    if duration <= 0:
        problems.add(where, f"{show(value)} must be longer than zero")
        return None
    if maximum is not None and duration > maximum:
        problems.add(where, f"{show(value)} is longer than the maximum of {format_duration(maximum)}")
        return None
    return duration


def _warm(document, concurrency, problems):
    """The ``warm:`` mapping as a Warm, or None when it is absent (or invalid: the problems say why)."""
    if "warm" not in document:
        return None
    value = document["warm"]
    if not isinstance(value, dict):
        problems.add("warm", f"must be a mapping with containers, max_invocations, idle or prestart, not "
                             f"{given(value)}; leave warm out for a new container per invocation")
        return None
    _unknown_keys(value, _WARM_KEYS, "warm", problems, "warm")
    containers = value.get("containers", concurrency)
    if concurrency is not None and (type(containers) is not int or not 1 <= containers <= concurrency):
        problems.add("warm.containers", f"{show(containers)} must be between 1 and concurrency ({concurrency})")
        containers = None
    max_invocations = _whole_number(value, "max_invocations", "warm", DEFAULT_MAX_INVOCATIONS, 1, problems)
    idle = _duration(value, "idle", "warm", DEFAULT_IDLE, problems, maximum=None)
    prestart = value.get("prestart", False)
    if type(prestart) is not bool:
        problems.add("warm.prestart", f"must be true or false, not {given(prestart)}")
        prestart = None
    if None in (containers, max_invocations, idle, prestart):
        return None
    return Warm(containers=containers, max_invocations=max_invocations, idle=idle, prestart=prestart)


def _rate_limit(document, problems):
    """``rate_limit: 20/s`` (or /m, /h) as a RateLimit, or None when absent or invalid."""
    if "rate_limit" not in document:
        return None
    value = document["rate_limit"]
    found = _RATE.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        problems.add("rate_limit", f"{show(value)} is not a rate; use <n>/s, <n>/m or <n>/h")
        return None
    count = int(found.group(1))
    if not 1 <= count <= MAX_RATE:
        problems.add("rate_limit", f"{show(value)} must allow 1 to {MAX_RATE} invocations per period, e.g. 20/s")
        return None
    return RateLimit(count=count, unit=found.group(2))


def _concurrency_key(document, problems):
    """``concurrency_key: new_image.id`` as a ConcurrencyKey, or None when absent or invalid."""
    if "concurrency_key" not in document:
        return None
    value = document["concurrency_key"]
    fields = tuple(value.split(".")) if isinstance(value, str) else ("",)
    if not all(fields):
        problems.add("concurrency_key", f"{show(value)} is not a field path; name a field of the event, with dots "
                                        f"between levels, e.g. new_image.id")
        return None
    return ConcurrencyKey(path=value, fields=fields)


def _whole_number(mapping, key, path, default, minimum, problems):
    """An integer of at least *minimum* (booleans, floats and strings rejected), or *default*."""
    if key not in mapping:
        return default
    value = mapping[key]
    if type(value) is not int:
        problems.add(join(path, key), f"must be a whole number of {minimum} or more, not {given(value)}")
        return None
    if value < minimum:
        problems.add(join(path, key), f"{show(value)} must be a whole number of {minimum} or more")
        return None
    return value


def _cron(item, path, problems):
    value = item.get("cron")
    where = join(path, "cron")
    if value is None:
        problems.add(where, "is required, e.g. \"0 3 * * *\"")
        return None
    fields = value.split() if isinstance(value, str) else []
    if len(fields) not in (5, 6):
        problems.add(where, f"{show(value)} is not a cron expression of 5 fields (minute hour day-of-month month "
                            f"day-of-week) or 6 (with seconds first)")
        return None
    problem = _cron_problem(fields)
    if problem:
        problems.add(where, f"{show(value)} is not a valid cron expression: {problem}")
        return None
    return value


_CRON_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")


def _cron_problem(fields):
    """Why croniter refuses the cron expression split into *fields*, naming the field; None when it takes it.

    Each field is tried alone, the others ``*``, so the message names the
    first one croniter refuses and gives croniter's own reason.
    """
    from croniter import CroniterError, croniter

    seconds = len(fields) == 6
    names = ("second", *_CRON_FIELDS) if seconds else _CRON_FIELDS

    def refusal(words):
        try:
            croniter(" ".join(words), second_at_beginning=seconds)
        except (CroniterError, ValueError, KeyError, IndexError, TypeError) as error:
            text = re.sub(r"\A\[[^\]]*\]\s*", "", str(error)).strip()
            text = re.sub(r" in field [0-9]+", "", text)  # its own count from 0; the message names the field
            return re.sub(r"'([^']*)'", r'"\1"', text) or "is refused"  # croniter's words, its quotes as ours
        return None

    whole = refusal(fields)
    if whole is None:
        return None
    for index, name in enumerate(names):
        alone = refusal(["*"] * index + [fields[index]] + ["*"] * (len(fields) - index - 1))
        if alone is not None:
            return f"the {name} field {show(fields[index])} {alone}"
    return whole


def _timezone(item, path, problems):
    value = item.get("timezone", "UTC")
    where = join(path, "timezone")
    if not isinstance(value, str) or not value:
        problems.add(where, f"{show(value)} is not an IANA time zone such as Europe/Rome")
        return None
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a file name
        problems.add(where, f"{show(value)} is not an IANA time zone such as Europe/Rome or America/Sao_Paulo")
        return None
    return value


def _env(document, root, problems):
    """Literal variables; each value is the scalar text exactly as written."""
    if "env" not in document or document["env"] is None:
        return {}
    node = _child_node(root, "env")
    if not isinstance(node, yaml.MappingNode):
        problems.add("env", f"must be a mapping of variable names to values, not {given(document['env'])}")
        return {}
    env = {}
    for key_node, value_node in node.value:
        name = key_node.value
        where = join("env", name)
        problem = env_name_problem(name, render=show) if isinstance(key_node, yaml.ScalarNode) \
            else "is not a variable name"
        if problem:
            problems.add(where, problem)
        elif name in RESERVED_VARIABLES:
            problems.add(where, f"{name} is reserved by Relay")
        elif not isinstance(value_node, yaml.ScalarNode):
            problems.add(where, "must be a single value, not a list or mapping")
        else:
            env[name] = "" if value_node.tag == "tag:yaml.org,2002:null" and not value_node.value else value_node.value
    return env


def _secrets(document, env, problems):
    """Variables whose values come from the secret store, by reference name."""
    secrets = document.get("secrets")
    if secrets is None:
        return {}
    if not isinstance(secrets, dict):
        problems.add("secrets", f"must be a mapping of variable names to secret names, not {given(secrets)}")
        return {}
    valid = {}
    for name, reference in secrets.items():
        where = join("secrets", name)
        problem = env_name_problem(name, render=show) or secret_name_problem(reference, render=show)
        if problem:
            problems.add(where, problem)
        elif name in RESERVED_VARIABLES:
            problems.add(where, f"{name} is reserved by Relay")
        elif name in env:
            problems.add(where, f"{name} is also set in env; a variable comes from env or from secrets, not both")
        else:
            valid[name] = reference
    return valid


def _child_node(root, key):
    for key_node, value_node in root.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return value_node
    return None
