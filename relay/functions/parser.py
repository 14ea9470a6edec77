"""template.yaml: reading and checking a function's template into a Template.

``parse_template(text, source)`` returns a Template (relay.functions.template)
or raises TemplateError listing every problem, each with the path of the field
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

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from types import MappingProxyType
from typing import Literal, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

from relay.durations import format_duration, parse_duration
from relay.errors import DurationError, InvalidTemplate
from relay.functions.document import Locations, Node, load_document
from relay.functions.patterns import compile_pattern
from relay.functions.problems import ERROR, Problem, Problems, given, join, reason, show
from relay.functions.template import (
    DEFAULT_CONCURRENCY,
    DEFAULT_IDLE,
    DEFAULT_MAX_INVOCATIONS,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    MAX_RATE,
    MAX_RETRY_BACKOFF,
    MAX_TIMEOUT,
    NETWORKS,
    RESERVED_VARIABLES,
    RUNTIMES,
    ConcurrencyKey,
    OnExpired,
    RateLimit,
    Rule,
    Schedule,
    Template,
    Warm,
)
from relay.names import env_name_problem, secret_name_problem

YamlMapping = Mapping[object, object]   # a mapping as YAML gave it: keys of any YAML type, values unchecked
Expiry = tuple[int | None, OnExpired]  # (max_event_age in ns or None, on_expired)
_Entry = TypeVar("_Entry", Rule, Schedule)

_NO_EXPIRY: Expiry = (None, OnExpired.DEAD_LETTER)   # no max_event_age; on_expired's default
_ON_EXPIRED = {choice.value: choice for choice in OnExpired}   # the template's words
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
    secrets: MappingProxyType[str, str]  # variable -> secret name, every valid entry of secrets
    locations: Locations | None

    @property
    def errors(self) -> list[Problem]:
        return [problem for problem in self.problems if problem.severity == ERROR]

    def line(self, path: str) -> int | None:
        """The line *path* is written on (or its nearest ancestor), or None."""
        return self.locations.line(path) if self.locations is not None else None


def parse_template(text: str, source: str = "template.yaml") -> Template:
    """Validate the YAML *text* of a template; *source* names it in errors."""
    checked = check_template(text, source)
    if checked.template is None:
        raise InvalidTemplate(source, checked.errors)
    return checked.template


def check_template(text: str, source: str = "template.yaml") -> CheckedTemplate:
    """Every problem of the YAML *text* of a template, as a CheckedTemplate; *source* names it.

    Raises only for text past a limit or not YAML at all (TemplateTooLarge,
    InvalidTemplate): nothing more can be read from it.
    """
    problems = Problems()
    document, root = load_document(text, source, problems)
    locations = Locations(root)
    template: Template | None = None
    secrets: dict[str, str] = {}
    if not isinstance(document, dict):
        problems.add("", "is empty; a template is a mapping with runtime and events or schedules" if document is None
                     else f"a template is a mapping with runtime and events or schedules, not {given(document)}")
    else:
        template, secrets = _template(document, root, problems)
    problems.locate(locations)
    if problems.errors:
        template = None
    elif problems.warnings and template is not None:
        template = replace(template, warnings=tuple(problems.warnings))
    runtime = document.get("runtime") if isinstance(document, dict) else None
    return CheckedTemplate(template=template, problems=tuple(problems.items),
                           runtime=runtime if isinstance(runtime, str) and runtime in RUNTIMES else None,
                           handlers=_handler_fields(document), secrets=MappingProxyType(secrets),
                           locations=locations)


def _handler_fields(document: object) -> tuple[HandlerField, ...]:
    if not isinstance(document, dict):
        return ()
    found = []
    for key in ("events", "schedules"):
        for index, item in enumerate(_listed(document, key)):
            value = item.get("handler") if isinstance(item, dict) else None
            parts = _HANDLER.fullmatch(value) if isinstance(value, str) else None
            if parts is not None:
                found.append(HandlerField(path=join(join(key, index), "handler"), handler=parts.group(0),
                                          module=parts.group(1)))
    return tuple(found)


def _template(document: YamlMapping, root: Node, problems: Problems) -> tuple[Template | None, dict[str, str]]:
    """(the Template of a mapping *document*, or None after an error; its valid secrets).

    *root* is the document's node graph (a yaml.MappingNode), where env's values are read as written.
    """
    _unknown_keys(document, _TOP_KEYS, "", problems, "a template")

    runtime = _runtime(document, problems)
    concurrency = _whole_number(document, "concurrency", "", DEFAULT_CONCURRENCY, 1, problems)
    expiry = _expiry(document, "", _NO_EXPIRY, problems)

    def rule(item: YamlMapping, path: str, found: Problems) -> Rule | None:
        return _rule(item, path, found, expiry)

    rules = _numbered(_entries(document, "events", rule, problems))
    if expiry is not None:
        _needs_max_event_age(document, "", expiry[0] is not None or any(
            isinstance(item, dict) and "max_event_age" in item for item in _listed(document, "events")), problems)
    schedules = _entries(document, "schedules", _schedule, problems)
    if not document.get("events") and not document.get("schedules"):
        problems.add("", "a template needs at least one entry in events or schedules")
    env = _env(document, root, problems)
    secrets = _secrets(document, env, problems)
    network = _network(document, problems)
    warm = _warm(document, concurrency, problems)
    rate_limit = _rate_limit(document, problems)
    concurrency_key = _concurrency_key(document, problems)
    if problems.errors or runtime is None or concurrency is None:  # (no runtime or concurrency is an error too)
        return None, secrets
    return Template(runtime=runtime, concurrency=concurrency, rules=tuple(rules), schedules=tuple(schedules),
                    env=MappingProxyType(env), secrets=MappingProxyType(secrets), network=network, warm=warm,
                    rate_limit=rate_limit, concurrency_key=concurrency_key), secrets


def _runtime(document: YamlMapping, problems: Problems) -> str | None:
    """The template's runtime, or None when it is missing or not one Relay has (the problems say which)."""
    runtime = document.get("runtime")
    if runtime is None:
        problems.add("runtime", f"is required; use one of {', '.join(RUNTIMES)}")
        return None
    if not isinstance(runtime, str) or runtime not in RUNTIMES:
        problems.add("runtime", f"{show(runtime)} is not supported; use one of {', '.join(RUNTIMES)}")
        return None
    return runtime


def _network(document: YamlMapping, problems: Problems) -> str | None:
    """The template's network; None for the engine's default, or when it is not one Relay has (an error)."""
    network = document.get("network")
    if network is not None and (not isinstance(network, str) or network not in NETWORKS):
        problems.add("network", f"{show(network)} is not supported; use {', '.join(NETWORKS)}, or leave network "
                                f"out for the engine's default network")
        return None
    return network


def _numbered(rules: list[Rule]) -> list[Rule]:
    """*rules* with ``repeat`` set: two rules with one handler are two invocations, each with its own state."""
    seen: dict[str, int] = {}
    numbered = []
    for rule in rules:
        repeat = seen.get(rule.handler, 0)
        seen[rule.handler] = repeat + 1
        numbered.append(replace(rule, repeat=repeat) if repeat else rule)
    return numbered


def _unknown_keys(mapping: YamlMapping, allowed: tuple[str, ...], path: str, problems: Problems, what: str) -> None:
    for key in mapping:
        if key not in allowed:
            problems.add(join(path, key), f"is not a key of {what}; use {', '.join(allowed)}")


def _listed(document: YamlMapping, key: str) -> list[object]:
    items = document.get(key)
    return items if isinstance(items, list) else []


def _entries(document: YamlMapping, key: str, parse_one: Callable[[YamlMapping, str, Problems], _Entry | None],
             problems: Problems) -> list[_Entry]:
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


def _rule(item: YamlMapping, path: str, problems: Problems, function_expiry: Expiry | None = _NO_EXPIRY
          ) -> Rule | None:
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
    if (handler is None or pattern is None or timeout is None or retries is None or jitter is None
            or expiry is None or backoff is _Invalid.VALUE):
        return None
    return Rule(handler=handler[0], module=handler[1], function=handler[2], pattern=pattern, timeout=timeout,
                retries=retries, retry_backoff=backoff, retry_jitter=jitter, max_event_age=expiry[0],
                on_expired=expiry[1])


class _Invalid(Enum):
    """A value that was wrong (the problems say why), where None means "not set"."""

    VALUE = "invalid"


def _retry_backoff(item: YamlMapping, path: str, problems: Problems
                   ) -> tuple[int, ...] | None | Literal[_Invalid.VALUE]:
    """The rule's ``retry_backoff`` in nanoseconds, None when unset, _Invalid.VALUE after a problem."""
    if "retry_backoff" not in item:
        return None
    values, where = item["retry_backoff"], join(path, "retry_backoff")
    if not isinstance(values, list) or not values:
        problems.add(where, f"must be a list of one or more durations such as [10s, 30s, 2m], not {given(values)}")
        return _Invalid.VALUE
    delays = [_duration(dict(enumerate(values)), index, where, None, problems, maximum=MAX_RETRY_BACKOFF)
              for index in range(len(values))]
    valid = [delay for delay in delays if delay is not None]
    return _Invalid.VALUE if len(valid) < len(delays) else tuple(valid)


def _expiry(mapping: YamlMapping, path: str, inherited: Expiry, problems: Problems) -> Expiry | None:
    """(max_event_age, on_expired) of the function (*inherited* the defaults) or of a rule
    (*inherited* the function's); a value set here wins. None after a problem."""
    max_event_age = _duration(mapping, "max_event_age", path, inherited[0], problems, maximum=None)
    valid = max_event_age is not None or "max_event_age" not in mapping
    on_expired: OnExpired | None = inherited[1]
    if "on_expired" in mapping:
        word = mapping["on_expired"]
        on_expired = _ON_EXPIRED.get(word) if isinstance(word, str) else None
        if on_expired is None:
            problems.add(join(path, "on_expired"), f"{show(word)} is not one of {', '.join(_ON_EXPIRED)}")
    return (max_event_age, on_expired) if valid and on_expired is not None else None


def _needs_max_event_age(mapping: YamlMapping, path: str, has_max_event_age: bool, problems: Problems) -> None:
    """``on_expired`` does nothing where no max_event_age applies: say so rather than ignore it."""
    if "on_expired" in mapping and not has_max_event_age:
        problems.add(join(path, "on_expired"), "has no effect without a max_event_age, on the rule or at the top "
                                               "of the template")


def _boolean(mapping: YamlMapping, key: str, path: str, problems: Problems) -> bool | None:
    value = mapping.get(key, False)
    if not isinstance(value, bool):
        problems.add(join(path, key), f"must be true or false, not {given(value)}")
        return None
    return value


def _schedule(item: YamlMapping, path: str, problems: Problems) -> Schedule | None:
    _unknown_keys(item, _SCHEDULE_KEYS, path, problems, "a schedule")
    handler = _handler(item, path, problems)
    cron = _cron(item, path, problems)
    timezone = _timezone(item, path, problems)
    timeout = _timeout(item, path, problems)
    if handler is None or cron is None or timezone is None or timeout is None:
        return None
    return Schedule(handler=handler[0], module=handler[1], function=handler[2], cron=cron, timezone=timezone,
                    timeout=timeout)


def _handler(item: YamlMapping, path: str, problems: Problems) -> tuple[str, str, str] | None:
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
    return found.group(0), found.group(1), found.group(2)


def _timeout(item: YamlMapping, path: str, problems: Problems) -> int | None:
    return _duration(item, "timeout", path, DEFAULT_TIMEOUT, problems, maximum=MAX_TIMEOUT)


def _duration(item: YamlMapping, key: str | int, path: str, default: int | None, problems: Problems, *,
              maximum: int | None) -> int | None:
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


def _warm(document: YamlMapping, concurrency: int | None, problems: Problems) -> Warm | None:
    """The ``warm:`` mapping as a Warm, or None when it is absent (or invalid: the problems say why)."""
    if "warm" not in document:
        return None
    value = document["warm"]
    if not isinstance(value, dict):
        problems.add("warm", f"must be a mapping with containers, max_invocations, idle or prestart, not "
                             f"{given(value)}; leave warm out for a new container per invocation")
        return None
    _unknown_keys(value, _WARM_KEYS, "warm", problems, "warm")
    given_containers = value.get("containers", concurrency)
    containers = given_containers if type(given_containers) is int else None
    if concurrency is not None and (containers is None or not 1 <= containers <= concurrency):
        problems.add("warm.containers", f"{show(given_containers)} must be between 1 and concurrency ({concurrency})")
        containers = None
    max_invocations = _whole_number(value, "max_invocations", "warm", DEFAULT_MAX_INVOCATIONS, 1, problems)
    idle = _duration(value, "idle", "warm", DEFAULT_IDLE, problems, maximum=None)
    prestart = value.get("prestart", False)
    if not isinstance(prestart, bool):
        problems.add("warm.prestart", f"must be true or false, not {given(prestart)}")
        return None
    if containers is None or max_invocations is None or idle is None:
        return None
    return Warm(containers=containers, max_invocations=max_invocations, idle=idle, prestart=prestart)


def _rate_limit(document: YamlMapping, problems: Problems) -> RateLimit | None:
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


def _concurrency_key(document: YamlMapping, problems: Problems) -> ConcurrencyKey | None:
    """``concurrency_key: new_image.id`` as a ConcurrencyKey, or None when absent or invalid."""
    if "concurrency_key" not in document:
        return None
    value = document["concurrency_key"]
    if not isinstance(value, str) or not all(fields := tuple(value.split("."))):
        problems.add("concurrency_key", f"{show(value)} is not a field path; name a field of the event, with dots "
                                        f"between levels, e.g. new_image.id")
        return None
    return ConcurrencyKey(path=value, fields=fields)


def _whole_number(mapping: YamlMapping, key: str, path: str, default: int | None, minimum: int,
                  problems: Problems) -> int | None:
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


def _cron(item: YamlMapping, path: str, problems: Problems) -> str | None:
    value = item.get("cron")
    where = join(path, "cron")
    if value is None:
        problems.add(where, "is required, e.g. \"0 3 * * *\"")
        return None
    fields = value.split() if isinstance(value, str) else []
    if not isinstance(value, str) or len(fields) not in (5, 6):
        problems.add(where, f"{show(value)} is not a cron expression of 5 fields (minute hour day-of-month month "
                            f"day-of-week) or 6 (with seconds first)")
        return None
    problem = _cron_problem(fields)
    if problem:
        problems.add(where, f"{show(value)} is not a valid cron expression: {problem}")
        return None
    return value


_CRON_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")


def _cron_problem(fields: list[str]) -> str | None:
    """Why croniter refuses the cron expression split into *fields*, naming the field; None when it takes it.

    Each field is tried alone, the others ``*``, so the message names the
    first one croniter refuses and gives croniter's own reason.
    """
    from croniter import CroniterError, croniter

    seconds = len(fields) == 6
    names = ("second", *_CRON_FIELDS) if seconds else _CRON_FIELDS

    def refusal(words: list[str]) -> str | None:
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


def _timezone(item: YamlMapping, path: str, problems: Problems) -> str | None:
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


def _env(document: YamlMapping, root: Node, problems: Problems) -> dict[str, str]:
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


def _secrets(document: YamlMapping, env: Mapping[str, str], problems: Problems) -> dict[str, str]:
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


def _child_node(root: Node, key: str) -> Node | None:
    """The value node of *key* in the mapping node *root*, or None."""
    for key_node, value_node in root.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return value_node
    return None
