"""A function's template as Relay holds it: frozen values, checked once.

A Template and its parts (Rule, Schedule, Warm, RateLimit, ConcurrencyKey)
are what the rest of Relay reads; they are built only by the template's
parser (relay.functions.parser), which reads template.yaml, checks every
field and says what is wrong where. Here are the values and their defaults
and limits, with no knowledge of YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import cast

from relay.durations import HOUR, MINUTE, SECOND
from relay.functions.patterns import Pattern
from relay.functions.problems import Problem
from relay.functions.runtimes import RUNTIMES as REGISTRY

RUNTIMES = tuple(REGISTRY)   # the runtime names a template may give
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
RATE_UNITS = {"s": SECOND, "m": MINUTE, "h": HOUR}
MAX_RATE = 1_000_000  # invocations per period; keeps the limiter's arithmetic exact (relay.stream.limits)

KeyValue = str | int | float | bool   # a concurrency_key's value in an event
_KEY_TYPES = (str, int, float, bool)


class OnExpired(Enum):
    """A rule's ``on_expired``: what happens to an entry older than its max_event_age (relay.stream.verdict).

    The values are the template's own words, and ``str()`` gives them back
    (a log line says ``on_expired=drop``).
    """

    DEAD_LETTER = "dead-letter"   # the entry goes to the dead-letter stream with the reason
    DROP = "drop"                 # the entry is acknowledged and counted, never run

    def __str__(self) -> str:
        return self.value


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
    on_expired: OnExpired = OnExpired.DEAD_LETTER   # what happens to such an entry
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
    on_expired: OnExpired = OnExpired.DEAD_LETTER


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
    def period(self) -> int:
        """The period in nanoseconds."""
        return RATE_UNITS[self.unit]

    def __str__(self) -> str:
        return f"{self.count}/{self.unit}"


@dataclass(frozen=True)
class ConcurrencyKey:
    """The template's ``concurrency_key: new_image.id``: one invocation per value of that
    field of the event runs at a time across the consumer group."""

    path: str
    fields: tuple[str, ...]

    def value(self, event: object) -> KeyValue | None:
        """The field's value in *event* when it is a string, number or boolean; else None (run unkeyed)."""
        value = event
        for name in self.fields:
            if type(value) is not dict:
                return None
            value = value.get(name)
        return cast(KeyValue, value) if type(value) in _KEY_TYPES else None  # exactly those: JSON's own scalars


@dataclass(frozen=True, eq=False)
class Template:
    """A function's checked template.yaml: how its handlers run, and for which events and schedules."""

    runtime: str
    concurrency: int
    rules: tuple[Rule, ...]
    schedules: tuple[Schedule, ...]
    env: MappingProxyType[str, str]      # literal variables, each value the scalar text as written
    secrets: MappingProxyType[str, str]  # variable -> the name of the secret that gives its value
    network: str | None = None  # None: the engine's default network
    warm: Warm | None = None    # None: one throw-away container per invocation
    rate_limit: RateLimit | None = None             # None: no fleet-wide rate limit
    concurrency_key: ConcurrencyKey | None = None   # None: events of one entity may run in parallel
    warnings: tuple[Problem, ...] = field(default=(), repr=False)  # said when it loads; change nothing

    @property
    def running_limit(self) -> int:
        """How many invocations of this function one worker runs at once."""
        return self.warm.containers if self.warm is not None else self.concurrency
