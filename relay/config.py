"""Relay's configuration: read from the environment once, validated, frozen.

``load_config(environ)`` is called once by ``relay start``; nothing reads
``os.environ`` after it. Every invalid value raises ConfigError with one line
that names the variable, the offending value (never a password) and what is
accepted. For an optional variable an empty value means unset.
"""

import re
import socket
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from urllib.parse import quote as quote_url
from urllib.parse import unquote, urlsplit

from relay.durations import parse_duration
from relay.errors import ConfigError, DurationError
from relay.quoting import quote, shorten

FUNCTIONS_DIR = "/functions"
STATE_DIR = "/var/lib/relay"

LOG_LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")
DOCKER_VARIABLES = ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")
DEFAULT_MAX_CONCURRENCY = 8
DEFAULT_MAX_BUFFERED_EVENTS = 16
DEFAULT_MAX_EVENT_BYTES = 1024 * 1024
DEFAULT_REDIS_PORT = 6379
DEFAULT_RUNS_MAX_AGE = 7 * 24 * 3600 * 10**9   # nanoseconds: 168h
DEFAULT_RUNS_MAX_ENTRIES = 100_000

_REDIS_URI_FORMS = ("host:port, redis://[user:password@]host[:port][/db], "
                    "redis+sentinel://[user:password@]host:port[,host:port…]/master[/db], "
                    "or rediss:// and rediss+sentinel:// for TLS")
_SENTINEL_FORMS = "redis+sentinel://[user:password@]host[:port][,host[:port]…]/master[/db]"
DEFAULT_SENTINEL_PORT = 26379
_MASTER_NAME = re.compile(r"^[!-~]+$")   # printable ASCII without spaces: what a Sentinel master name can be
_LISTEN_FORMS = "[host]:port, e.g. :9090 or 127.0.0.1:9090, with a port from 1 to 65535"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/{0,2}")
_PERCENT_ENCODED = {"/": "%2F", "?": "%3F", "#": "%23"}   # the delimiters that end a URI's authority
_HOST = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)$")


@dataclass(frozen=True, kw_only=True)
class SentinelSettings:
    """The Sentinels that know where the primary of *master* is, and their own password."""

    addresses: tuple[tuple[str, int], ...]
    master: str
    password: str | None = field(default=None, repr=False)

    @property
    def hosts(self):
        return ",".join(host_port(host, port) for host, port in self.addresses)


@dataclass(frozen=True, kw_only=True)
class RedisSettings:
    """Where Redis is and how to log in; ``redacted`` is safe to print.

    *host* and *port* name the server of a direct connection. With
    *sentinel*, they are empty: the Sentinels name the current primary, and
    the login, database and TLS apply to it.
    """

    host: str = ""
    port: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    db: int = 0
    tls: bool = False
    sentinel: SentinelSettings | None = None

    @property
    def redacted(self):
        """The address with the password masked; a user name without a password may be a
        misplaced password, so it is masked too; a shown user name is percent-encoded."""
        user = quote_url(self.username or "", safe="")
        login = f"{user}:***@" if self.password else ("***@" if user else "")
        if self.sentinel is not None:
            scheme = "rediss+sentinel" if self.tls else "redis+sentinel"
            return f"{scheme}://{login}{self.sentinel.hosts}/{self.sentinel.master}/{self.db}"
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://{login}{host_port(self.host, self.port)}/{self.db}"


@dataclass(frozen=True, kw_only=True)
class ListenAddress:
    host: str  # "" means every interface
    port: int

    def __str__(self):
        return host_port(self.host, self.port)


@dataclass(frozen=True, kw_only=True)
class Config:
    """Everything ``relay start`` needs from its environment."""

    redis: RedisSettings
    stream: str
    group: str
    consumer: str
    retention: int | None = None  # nanoseconds; None disables trimming
    metrics_addr: ListenAddress | None = None
    webhook_addr: ListenAddress | None = None
    console_addr: ListenAddress | None = None   # the console (relay.console); None: off
    log_level: str = "INFO"
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    max_buffered_events: int = DEFAULT_MAX_BUFFERED_EVENTS
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES  # a larger event field is dead-lettered unread
    runs_max_age: int = DEFAULT_RUNS_MAX_AGE          # nanoseconds: the run ledger forgets older records
    runs_max_entries: int = DEFAULT_RUNS_MAX_ENTRIES  # ... and keeps about this many
    docker_env: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))


def load_config(environ, hostname=None):
    """Build the Config of ``relay start`` from a mapping of environment variables.

    Every variable is checked before any error is raised: with several bad
    ones, the ConfigError lists them all, one per line, as template
    validation does.
    """
    problems = []

    def checked(parse, *args):
        try:
            return parse(*args)
        except ConfigError as error:
            problems.append(str(error))
            return None

    values = dict(
        redis=checked(load_redis_settings, environ),
        stream=checked(_required, environ, "REDIS_STREAM"),
        group=checked(_required, environ, "REDIS_GROUP"),
        retention=checked(_retention, environ),
        metrics_addr=checked(_listen_address, environ, "METRICS_ADDR"),
        webhook_addr=checked(_listen_address, environ, "GIT_WEBHOOK_ADDR"),
        console_addr=checked(_listen_address, environ, "CONSOLE_ADDR"),
        log_level=checked(load_log_level, environ),
        max_concurrency=checked(_positive_int, environ, "MAX_CONCURRENCY", DEFAULT_MAX_CONCURRENCY),
        max_buffered_events=checked(_positive_int, environ, "MAX_BUFFERED_EVENTS", DEFAULT_MAX_BUFFERED_EVENTS),
        max_event_bytes=checked(_positive_int, environ, "MAX_EVENT_BYTES", DEFAULT_MAX_EVENT_BYTES),
        runs_max_age=checked(_runs_max_age, environ),
        runs_max_entries=checked(_positive_int, environ, "RUNS_MAX_ENTRIES", DEFAULT_RUNS_MAX_ENTRIES),
        docker_env=load_docker_env(environ),
    )
    if len(problems) == 1:
        raise ConfigError(problems[0])
    if problems:
        raise ConfigError(f"{len(problems)} problems with the environment:\n" +
                          "\n".join(f"  {problem}" for problem in problems))
    return Config(consumer=hostname or socket.gethostname(), **values)


def load_redis_settings(environ):
    """REDIS_URI, and REDIS_SENTINEL_PASSWORD for a redis+sentinel:// one."""
    settings = parse_redis_uri(_required(environ, "REDIS_URI"))
    sentinel_password = environ.get("REDIS_SENTINEL_PASSWORD", "")
    if sentinel_password:
        if settings.sentinel is None:
            raise ConfigError("REDIS_SENTINEL_PASSWORD is set, but REDIS_URI names no Sentinels; "
                              f"unset it or use {_SENTINEL_FORMS}")
        settings = replace(settings, sentinel=replace(settings.sentinel, password=sentinel_password))
    return settings


def load_stream(environ):
    """REDIS_STREAM, for the commands that need the stream but not the rest of ``start``'s settings."""
    return _required(environ, "REDIS_STREAM")


def load_docker_env(environ):
    """The Docker client variables, handed untouched to docker-py."""
    return MappingProxyType({name: environ[name] for name in DOCKER_VARIABLES if environ.get(name)})


def load_log_level(environ):
    raw = environ.get("LOG_LEVEL", "")
    level = raw.strip().upper()
    if not level:
        return "INFO"
    if level not in LOG_LEVELS:
        raise ConfigError(f"LOG_LEVEL={quote(raw)} is not a log level; use one of {', '.join(LOG_LEVELS)}")
    return level


def parse_redis_uri(value):
    """Parse REDIS_URI: a plain host:port, a redis:// / rediss:// DSN, or a list of Sentinels.

    Whatever its shape, the value is shown in errors only through
    ``_redacted``, which masks everything that could be a password.
    """
    shown = _redacted(value)
    if not value.isprintable():
        raise ConfigError(f"REDIS_URI={quote(shown)} has a control character; use {_REDIS_URI_FORMS}")
    if "://" not in value:
        return _parse_host_port(value, shown)
    delimiter = _delimiter_before_login(value.partition("://")[2])
    if delimiter:
        raise ConfigError(f"REDIS_URI={quote(shown)} has \"@\" after a \"{delimiter}\"; percent-encode "
                          f"a \"{delimiter}\" in the password as {_PERCENT_ENCODED[delimiter]}")
    if value.partition("://")[0] in ("redis+sentinel", "rediss+sentinel"):
        return _parse_sentinel_uri(value, shown)
    return _parse_dsn(value, shown)


def _parse_host_port(value, shown):
    if "@" in value:
        raise ConfigError(f"REDIS_URI={quote(shown)} has a login but no redis:// scheme; "
                          f"use redis://user:password@host:port")
    host, port = _split_host_port(value)
    if not host or port is None:
        raise ConfigError(f"REDIS_URI={quote(shown)} is not a Redis address; use {_REDIS_URI_FORMS}")
    return RedisSettings(host=host, port=_port("REDIS_URI", shown, port))


def _parse_dsn(value, shown):
    try:
        parts = urlsplit(value)
    except ValueError:  # an unclosed or invalid [IPv6] host
        raise ConfigError(f"REDIS_URI={quote(shown)} is not a Redis address; use {_REDIS_URI_FORMS}") from None
    if parts.scheme not in ("redis", "rediss"):
        raise ConfigError(
            f"REDIS_URI={quote(shown)} has an unknown scheme {quote(parts.scheme)}; use {_REDIS_URI_FORMS}")
    if parts.query or parts.fragment:
        raise ConfigError(f"REDIS_URI={quote(shown)} has options Relay does not read; use {_REDIS_URI_FORMS}")
    host, port = _split_host_port(parts.netloc.rpartition("@")[2])
    if host is None:
        raise ConfigError(f"REDIS_URI={quote(shown)} is not a Redis address; use {_REDIS_URI_FORMS}")
    if not host:
        raise ConfigError(f"REDIS_URI={quote(shown)} names no host; use {_REDIS_URI_FORMS}")
    db_text = parts.path.lstrip("/")
    if db_text and _whole_number(db_text) is None:
        raise ConfigError(f"REDIS_URI={quote(shown)} has database {quote(db_text)}; a database is a number such as /0")
    return RedisSettings(
        host=host,
        port=DEFAULT_REDIS_PORT if port is None else _port("REDIS_URI", shown, port),
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        db=int(db_text or 0),
        tls=parts.scheme == "rediss",
    )


def _parse_sentinel_uri(value, shown):
    """redis+sentinel://[user:password@]host[:port][,host[:port]…]/master[/db], by hand:
    urlsplit takes one host, and a list of bracketed IPv6 hosts confuses it."""
    scheme, _, rest = value.partition("://")
    address, question, _ = rest.partition("?")
    if question or "#" in address:
        raise ConfigError(f"REDIS_URI={quote(shown)} has options Relay does not read; use {_SENTINEL_FORMS}")
    authority, slash, path = address.partition("/")
    login, at, hosts = authority.rpartition("@")
    if not hosts:
        raise ConfigError(f"REDIS_URI={quote(shown)} names no Sentinel; use {_SENTINEL_FORMS}")
    addresses = []
    for entry in hosts.split(","):
        host, port = _split_host_port(entry)
        if not host:
            raise ConfigError(f"REDIS_URI={quote(shown)} has Sentinel address {quote(entry)}, "
                              f"which is not host[:port]; use {_SENTINEL_FORMS}")
        number = DEFAULT_SENTINEL_PORT if port is None else _port("REDIS_URI", shown, port, forms=_SENTINEL_FORMS)
        if (host, number) in addresses:
            raise ConfigError(f"REDIS_URI={quote(shown)} names Sentinel {quote(entry)} twice; "
                              "list each Sentinel once")
        addresses.append((host, number))
    master, _, db_text = path.partition("/")
    if not slash or not master:
        raise ConfigError(f"REDIS_URI={quote(shown)} names no master; the Sentinels monitor it under a name, "
                          f"as in {_SENTINEL_FORMS}")
    master = unquote(master)
    if not _MASTER_NAME.match(master):
        raise ConfigError(f"REDIS_URI={quote(shown)} has master name {quote(master)}; a Sentinel master name "
                          "is printable ASCII without spaces")
    if "/" in db_text or (db_text and _whole_number(db_text) is None):
        raise ConfigError(f"REDIS_URI={quote(shown)} has database {quote(db_text)}; a database is a number such as "
                          f"/0 after the master name, as in {_SENTINEL_FORMS}")
    user, colon, password = login.partition(":")
    return RedisSettings(
        username=unquote(user) if user else None,
        password=unquote(password) if colon else None,
        db=int(db_text or 0),
        tls=scheme == "rediss+sentinel",
        sentinel=SentinelSettings(addresses=tuple(addresses), master=master),
    )


def parse_listen_address(name, value):
    host, port = _split_host_port(value)
    if port is None:
        raise ConfigError(f"{name}={quote(value)} is not a listen address; use {_LISTEN_FORMS}")
    number = _port(name, value, port, forms=_LISTEN_FORMS)
    return ListenAddress(host=host, port=number)


def _required(environ, name):
    value = environ.get(name, "")
    if not value.strip():
        raise ConfigError(f"{name} is required and must not be empty")
    return value


def _retention(environ):
    return _duration(environ, "REDIS_STREAM_RETENTION", None, examples="6h or 90m", minimum=1,
                     too_short="must be longer than zero, e.g. 6h")


def _runs_max_age(environ):
    return _duration(environ, "RUNS_MAX_AGE", DEFAULT_RUNS_MAX_AGE, examples="168h (7 days) or 24h",
                     minimum=60 * 10**9, too_short="is under a minute; the run ledger keeps records at least 1m, "
                                                   "e.g. 168h")


def _duration(environ, name, default, *, examples, minimum, too_short):
    """The Go duration in variable *name* in nanoseconds (*default* when unset), at least *minimum*."""
    raw = environ.get(name, "")
    if not raw:
        return default
    try:
        value = parse_duration(raw)
    except DurationError as error:
        raise ConfigError(f"{name}={quote(raw)} is not a duration ({shorten(str(error))}); "
                          f"use a Go duration such as {examples}") from None
    if value < minimum:
        raise ConfigError(f"{name}={quote(raw)} {too_short}")
    return value


def _listen_address(environ, name):
    raw = environ.get(name, "")
    return parse_listen_address(name, raw) if raw else None


def _positive_int(environ, name, default):
    raw = environ.get(name, "")
    if not raw:
        return default
    text = raw.strip()
    if not _whole_number(text):
        raise ConfigError(f"{name}={quote(raw)} must be a positive whole number such as {default}")
    return int(text)


def _split_host_port(text):
    """Split "host:port", "[v6]:port", ":port" or "host"; the port stays text."""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None, None
        port = rest[1:] if rest else None
        host = f"[{host}]" if host else ""
    else:
        host, colon, port = text.rpartition(":")
        if not colon:
            host, port = text, None
        elif ":" in host:
            return None, None  # an IPv6 address needs brackets
    if host and not _HOST.match(host):
        return None, None
    return host.strip("[]"), port


def _port(name, shown, port, forms=_REDIS_URI_FORMS):
    number = _whole_number(port)
    if number is None or not 0 < number < 65536:
        raise ConfigError(f"{name}={quote(shown)} has port {quote(port)}; use {forms}")
    return number


def _whole_number(text, digits=18):
    """*text* as an int when it is at most *digits* ASCII digits, else None (never a ValueError)."""
    if text.isascii() and text.isdigit() and len(text) <= digits:
        return int(text)
    return None


def _delimiter_before_login(text):
    """The first of "/", "?" and "#" in *text* (a URI after its "://") when an "@" follows it, else "".

    Such an "@" can only end a login whose password holds that character
    unencoded; urlsplit would cut the password there and read the rest as a
    path, query or fragment.
    """
    login_end = text.rfind("@")
    return next((character for character in text[:max(login_end, 0)] if character in _PERCENT_ENCODED), "")


def _redacted(value):
    """*value* with the login's password masked, whether or not it parses as a URL.

    The login is everything before the last "@" anywhere in *value*, so a
    password holding "?", "#", "/" or "@" unencoded is masked whole, after an
    optional scheme ("redis://", "redis:/", "redis:" or any "name://"): its
    user name stays, the rest becomes ***. A login without a colon may be a
    bare password, so it is masked whole. Options (?password=…) and
    fragments after the host are masked too.
    """
    login, at, rest = value.rpartition("@")
    address = re.split(r"[?#]", rest, maxsplit=1)[0]
    masked_options = rest[len(address)] + "***" if len(address) < len(rest) else ""
    if not at:
        return address + masked_options
    scheme = _SCHEME.match(login)
    start = scheme.end() if scheme and (scheme.group().endswith("//") or _is_redis_scheme(scheme.group())) else 0
    user, colon, _ = login[start:].partition(":")
    return f"{login[:start]}{user + ':***' if colon else '***'}@{address}{masked_options}"


def _is_redis_scheme(prefix):
    return prefix.partition(":")[0] in ("redis", "rediss", "redis+sentinel", "rediss+sentinel")


def host_port(host, port):
    """"host:port", with an IPv6 host in brackets."""
    return f"{_bracket(host)}:{port}"


def _bracket(host):
    return f"[{host}]" if ":" in host else host
