"""Every configuration rule: required variables, formats, defaults, messages."""

import dataclasses

import pytest

from relay.config import (
    DEFAULT_MAX_BUFFERED_EVENTS,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_EVENT_BYTES,
    ListenAddress,
    RedisSettings,
    SentinelSettings,
    load_config,
    load_docker_env,
    parse_redis_uri,
)
from relay.durations import HOUR, MINUTE, SECOND
from relay.errors import ConfigError, RelayError

REQUIRED = {"REDIS_URI": "redis:6379", "REDIS_STREAM": "events", "REDIS_GROUP": "relay"}


def config(**variables):
    return load_config({**REQUIRED, **variables}, hostname="worker-1")


def rejected(**variables):
    with pytest.raises(ConfigError) as caught:
        config(**variables)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_defaults():
    loaded = config()
    assert loaded.redis == RedisSettings(host="redis", port=6379)
    assert (loaded.stream, loaded.group, loaded.consumer) == ("events", "relay", "worker-1")
    assert loaded.retention is None
    assert loaded.metrics_addr is None and loaded.webhook_addr is None
    assert loaded.log_level == "INFO"
    assert (loaded.max_concurrency, loaded.max_buffered_events) == (8, 16)
    assert (DEFAULT_MAX_CONCURRENCY, DEFAULT_MAX_BUFFERED_EVENTS) == (8, 16)
    assert loaded.max_event_bytes == DEFAULT_MAX_EVENT_BYTES == 1048576
    assert dict(loaded.docker_env) == {}


def test_config_is_frozen():
    loaded = config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.stream = "other"
    with pytest.raises(TypeError):
        loaded.docker_env["DOCKER_HOST"] = "tcp://x:1"


def test_consumer_defaults_to_the_hostname():
    import socket

    assert load_config(REQUIRED).consumer == socket.gethostname()


def test_config_errors_are_relay_errors():
    assert issubclass(ConfigError, RelayError)


@pytest.mark.parametrize("name", ["REDIS_URI", "REDIS_STREAM", "REDIS_GROUP"])
@pytest.mark.parametrize("value", [None, "", "   "])
def test_required_variables(name, value):
    variables = dict(REQUIRED)
    if value is None:
        del variables[name]
    else:
        variables[name] = value
    with pytest.raises(ConfigError, match=f"^{name} is required and must not be empty$"):
        load_config(variables, hostname="h")


@pytest.mark.parametrize(("uri", "expected"), [
    ("redis:6379", RedisSettings(host="redis", port=6379)),
    ("127.0.0.1:6380", RedisSettings(host="127.0.0.1", port=6380)),
    ("[::1]:6379", RedisSettings(host="::1", port=6379)),
    ("redis://redis:6379", RedisSettings(host="redis", port=6379)),
    ("redis://redis", RedisSettings(host="redis", port=6379)),
    ("redis://user:pa%40ss@redis:6390", RedisSettings(host="redis", port=6390, username="user", password="pa@ss")),
    ("redis://:secret@redis:6379/2", RedisSettings(host="redis", port=6379, password="secret", db=2)),
    ("rediss://user:pw@cache.example.com:6380", RedisSettings(
        host="cache.example.com", port=6380, username="user", password="pw", tls=True)),
    ("redis://[::1]:7000/0", RedisSettings(host="::1", port=7000)),
])
def test_redis_uri_forms(uri, expected):
    assert parse_redis_uri(uri) == expected


@pytest.mark.parametrize(("uri", "fragment"), [
    ("redis", "is not a Redis address"),
    ("redis:", "has port ''"),
    ("redis:port", "has port 'port'"),
    ("redis:0", "has port '0'"),
    ("redis:65536", "has port '65536'"),
    (":6379", "is not a Redis address"),
    ("::1:6379", "is not a Redis address"),
    ("http://redis:6379", "unknown scheme 'http'"),
    ("redis://", "names no host"),
    ("redis://redis:6379/zero", "database 'zero'"),
    ("redis://redis:6379?timeout=1", "options Relay does not read"),
    ("redis://bad host:6379", "is not a Redis address"),
])
def test_redis_uri_rejected(uri, fragment):
    message = rejected(REDIS_URI=uri)
    assert message.startswith("REDIS_URI=")
    assert fragment in message
    assert "host:port" in message or "database" in message


def sentinel(*addresses, master="mymaster", password=None):
    return SentinelSettings(addresses=addresses, master=master, password=password)


@pytest.mark.parametrize(("uri", "expected"), [
    ("redis+sentinel://s1:26379,s2:26380,s3/mymaster", RedisSettings(
        sentinel=sentinel(("s1", 26379), ("s2", 26380), ("s3", 26379)))),
    ("redis+sentinel://10.0.0.1/mymaster/", RedisSettings(sentinel=sentinel(("10.0.0.1", 26379)))),
    ("redis+sentinel://:pw@s1,[::1]:5000/mymaster/3", RedisSettings(
        password="pw", db=3, sentinel=sentinel(("s1", 26379), ("::1", 5000)))),
    ("rediss+sentinel://relay:p%2Fw@s1/cache-01.eu", RedisSettings(
        username="relay", password="p/w", tls=True, sentinel=sentinel(("s1", 26379), master="cache-01.eu"))),
])
def test_sentinel_uri_forms(uri, expected):
    assert parse_redis_uri(uri) == expected


@pytest.mark.parametrize(("uri", "fragment"), [
    ("redis+sentinel://s1", "names no master"),
    ("redis+sentinel://s1/", "names no master"),
    ("redis+sentinel:///mymaster", "names no Sentinel"),
    ("redis+sentinel://s1,,s2/mymaster", "has Sentinel address '', which is not host[:port]"),
    ("redis+sentinel://s1,bad host/mymaster", "has Sentinel address 'bad host'"),
    ("redis+sentinel://s1:0/mymaster", "has port '0'"),
    ("redis+sentinel://s1:x/mymaster", "has port 'x'"),
    ("redis+sentinel://s1,s1:26379/mymaster", "names Sentinel 's1:26379' twice"),
    ("redis+sentinel://s1/mymaster/one", "has database 'one'"),
    ("redis+sentinel://s1/mymaster/1/2", "has database '1/2'"),
    ("redis+sentinel://s1/my%20master", "has master name 'my master'"),
    ("redis+sentinel://s1/mymaster?db=1", "options Relay does not read"),
    ("redis+sentinel://s1/mymaster#x", "options Relay does not read"),
    ("sentinel://s1/mymaster", "unknown scheme 'sentinel'"),
])
def test_sentinel_uri_rejected(uri, fragment):
    message = rejected(REDIS_URI=uri)
    assert message.startswith(f"REDIS_URI='{uri}'") or message.startswith("REDIS_URI=")
    assert fragment in message
    assert "sentinel://" in message


def test_sentinel_password_comes_from_its_own_variable_and_needs_sentinels():
    loaded = config(REDIS_URI="redis+sentinel://:data@s1/mymaster", REDIS_SENTINEL_PASSWORD="guard")
    assert loaded.redis == RedisSettings(password="data", sentinel=sentinel(("s1", 26379), password="guard"))
    assert "guard" not in repr(loaded) and "data" not in repr(loaded)
    assert loaded.redis.redacted == "redis+sentinel://:***@s1:26379/mymaster/0"
    assert config(REDIS_URI="redis+sentinel://s1/mymaster", REDIS_SENTINEL_PASSWORD="").redis.sentinel.password is None
    message = rejected(REDIS_URI="redis:6379", REDIS_SENTINEL_PASSWORD="guard")
    assert message.startswith("REDIS_SENTINEL_PASSWORD is set, but REDIS_URI names no Sentinels")
    assert "guard" not in message


def test_a_password_with_an_unencoded_slash_is_refused_without_showing_it():
    for uri in ("redis://admin:hun/ter2@redis:6379", "redis+sentinel://admin:hun/ter2@s1/mymaster"):
        message = rejected(REDIS_URI=uri)
        assert "percent-encode" in message and "%2F" in message
        assert "hun" not in message and "ter2" not in message


@pytest.mark.parametrize(("uri", "delimiter", "encoded"), [
    ("redis://u:ab?cd@h", "?", "%3F"), ("redis://u:ab#cd@h:1/0", "#", "%23"), ("rediss://:ab?cd?@h", "?", "%3F"),
    ("redis+sentinel://u:ab?cd@s1/m", "?", "%3F"), ("rediss+sentinel://:ab#cd@s1:1,s2/m/0", "#", "%23"),
    ("redis://u:ab/cd?@h", "/", "%2F"), ("redis://u:ab?cd/@h", "?", "%3F"),
])
def test_a_password_with_an_unencoded_delimiter_is_refused_without_any_part_of_it(uri, delimiter, encoded):
    message = rejected(REDIS_URI=uri)
    assert f'has "@" after a "{delimiter}"; percent-encode a "{delimiter}" in the password as {encoded}' in message
    assert "ab" not in message and "cd" not in message


URI_DELIMITERS = ":/?#[]@!$&'()*+,;=% \\\"<>{}|^`"
LOGIN_FORMS = [
    "redis://u:{}@h:1/0", "redis://:{}@h", "rediss://u:{}@h", "redis://u:{}@h:bad", "redis://u:{}@h:1?x=1",
    "redis+sentinel://u:{}@s1:1,s2/m/0", "rediss+sentinel://:{}@s1/m", "redis+sentinel://u:{}@s1:bad/m",
    "u:{}@h:1", ":{}@h", "{}@h", "redis://{}@h", "redis+sentinel://{}@s1/m",
]


@pytest.mark.parametrize(("form", "delimiter"), [
    (form, delimiter) for form in LOGIN_FORMS for delimiter in URI_DELIMITERS
    if not (delimiter == ":" and "{}@" in form.replace(":{}@", ""))])  # the first ":" of a bare login ends its user
def test_no_delimiter_in_a_password_shows_any_part_of_it(form, delimiter):
    password = f"PWA{delimiter}PWB{delimiter}PWC"
    try:
        shown = parse_redis_uri(form.format(password)).redacted
    except ConfigError as error:
        shown = str(error)
    assert "PW" not in shown


def test_redis_password_never_in_errors_or_repr():
    message = rejected(REDIS_URI="redis://admin:hunter2@redis:notaport")
    assert "hunter2" not in message and "admin:***@" in message
    settings = parse_redis_uri("rediss://admin:hunter2@redis:6379")
    assert "hunter2" not in repr(settings) and "hunter2" not in settings.redacted
    assert settings.redacted == "rediss://admin:***@redis:6379/0"


HOSTILE_REDIS_URIS = [
    "admin:hunter2@redis:6379", "redis:/admin:hunter2@redis", "redis:admin:hunter2@redis:6379", ":hunter2@redis:6379",
    "hunter2@redis", "redis://[::1", "redis://admin:hunter2@[::1", "redis://:hunter2@[zz]:1",
    "redis://admin:hunter2@[::1]x", "redis://admin:hunter2@redis:99999", "redis://admin:hunter2@redis:-1",
    "redis://admin:hunter2@redis:" + "9" * 5000, "redis://admin:hunter2@redis/" + "9" * 5000, "redis:" + "9" * 5000,
    "redis://admin:hunter2@redis:\u0661", "redis://admin:hunter2@redis/\u0661", "redis://admin:hunter2@r\u00e9dis:1",
    "redis://admin:hunter2\n@redis:1", "redis://admin:hunter2@redis\n:1", "redis://admin:hunt\ud800er2@redis",
    "redis://admin:hunter2@redis:6379/\ud800", "http://admin:hunter2@redis", "redis://admin:hunter2@",
    "redis://admin:hunter2@redis:1?password=hunter2", "redis://admin@hunter2@@redis:x",
    "redis+sentinel://admin:hunter2@", "redis+sentinel://admin:hunter2@s1:99999/m", "redis+sentinel://admin:hunter2@s1",
    "redis+sentinel://admin:hunter2@s1/m/x", "redis+sentinel://admin:hunter2@s1,,/m",
    "rediss+sentinel://admin:hunter2@[::1/m", "redis+sentinel://admin:hunter2@s1:" + "9" * 5000 + "/m",
    "redis+sentinel://admin:hunter2@s1/m?password=hunter2", "redis+sentinel://admin:hunter2@s1/m\n",
    "redis+sentinel://admin:hunter2@s1/m%00", "redis+sentinel://admin@hunter2@s1:x/m",
]


@pytest.mark.parametrize("uri", HOSTILE_REDIS_URIS)
def test_a_hostile_redis_uri_is_one_line_without_the_password(uri):
    message = rejected(REDIS_URI=uri)
    assert message.startswith("REDIS_URI=")
    assert "hunter2" not in message
    assert message.isprintable()


def test_credentials_without_a_scheme_are_named_and_masked():
    assert rejected(REDIS_URI="admin:hunter2@redis:6379") == (
        "REDIS_URI='admin:***@redis:6379' has a login but no redis:// scheme; use redis://user:password@host:port")
    assert "'redis:/admin:***@redis'" in rejected(REDIS_URI="redis:/admin:hunter2@redis")


@pytest.mark.parametrize(("name", "value"), [
    ("MAX_CONCURRENCY", "9" * 5000), ("MAX_BUFFERED_EVENTS", "9" * 5000), ("METRICS_ADDR", ":" + "9" * 5000),
    ("GIT_WEBHOOK_ADDR", "[::1]:" + "9" * 5000), ("MAX_CONCURRENCY", "\ud800"), ("METRICS_ADDR", "[zz]:1"),
    ("REDIS_STREAM_RETENTION", "9" * 5000 + "h"), ("LOG_LEVEL", "\ud800"),
])
def test_odd_values_of_other_variables_are_one_line_errors(name, value):
    assert rejected(**{name: value}).startswith(f"{name}=")


@pytest.mark.parametrize(("name", "value"), [
    ("REDIS_URI", "redis://user:pw@" + "h" * 5000 + ":63x"), ("REDIS_URI", "user:pw@" + "h" * 5000),
    ("MAX_CONCURRENCY", "x" * 5000), ("METRICS_ADDR", "x" * 5000), ("LOG_LEVEL", "x" * 5000),
    ("REDIS_STREAM_RETENTION", "9" * 5000 + "q"), ("MAX_EVENT_BYTES", "x" * 5000),
])
def test_a_long_value_is_quoted_at_about_a_hundred_characters(name, value):
    message = rejected(**{name: value})
    assert message.startswith(f"{name}=") and "pw" not in message
    assert len(message) < 400


@pytest.mark.parametrize(("value", "expected"), [
    ("6h", 6 * HOUR), ("90m", 90 * MINUTE), ("1h30m", 90 * MINUTE), ("1.5s", 1500 * SECOND // 1000), ("", None),
])
def test_retention(value, expected):
    assert config(REDIS_STREAM_RETENTION=value).retention == expected


@pytest.mark.parametrize(("value", "fragment"), [
    ("0", "must be longer than zero"), ("-5m", "must be longer than zero"), ("0s", "must be longer than zero"),
    ("6", "missing unit"), ("1d", "unknown unit"), ("six hours", "is not a duration"),
])
def test_retention_rejected(value, fragment):
    message = rejected(REDIS_STREAM_RETENTION=value)
    assert message.startswith(f"REDIS_STREAM_RETENTION={value!r}") and fragment in message


@pytest.mark.parametrize("name", ["METRICS_ADDR", "GIT_WEBHOOK_ADDR"])
@pytest.mark.parametrize(("value", "expected"), [
    (":9090", ListenAddress(host="", port=9090)),
    ("0.0.0.0:9090", ListenAddress(host="0.0.0.0", port=9090)),
    ("127.0.0.1:8081", ListenAddress(host="127.0.0.1", port=8081)),
    ("localhost:8081", ListenAddress(host="localhost", port=8081)),
    ("[::]:9090", ListenAddress(host="::", port=9090)),
    ("", None),
])
def test_listen_addresses(name, value, expected):
    attribute = {"METRICS_ADDR": "metrics_addr", "GIT_WEBHOOK_ADDR": "webhook_addr"}[name]
    assert getattr(config(**{name: value}), attribute) == expected


@pytest.mark.parametrize("name", ["METRICS_ADDR", "GIT_WEBHOOK_ADDR"])
@pytest.mark.parametrize("value", ["9090", "localhost", ":http", ":0", ":70000", "a b:80", "::1:80", "[::1]x:80"])
def test_listen_addresses_rejected(name, value):
    message = rejected(**{name: value})
    assert message.startswith(f"{name}={value!r}") and ":9090" in message


def test_listen_address_text():
    assert str(ListenAddress(host="", port=9090)) == ":9090"
    assert str(ListenAddress(host="::1", port=9090)) == "[::1]:9090"


@pytest.mark.parametrize(("value", "expected"), [
    ("DEBUG", "DEBUG"), ("info", "INFO"), ("Warn", "WARN"), (" error \n", "ERROR"), ("", "INFO"), ("  ", "INFO"),
])
def test_log_level(value, expected):
    assert config(LOG_LEVEL=value).log_level == expected


@pytest.mark.parametrize("value", ["WARNING", "trace", "fatal", "1", "INFO,DEBUG"])
def test_log_level_rejected(value):
    message = rejected(LOG_LEVEL=value)
    assert message.startswith(f"LOG_LEVEL={value!r}")
    assert "DEBUG, INFO, WARN, ERROR" in message


@pytest.mark.parametrize("name", ["MAX_CONCURRENCY", "MAX_BUFFERED_EVENTS", "MAX_EVENT_BYTES"])
@pytest.mark.parametrize(("value", "expected"), [("1", 1), ("32", 32), (" 4 ", 4), ("", None)])
def test_limits(name, value, expected):
    loaded = config(**{name: value})
    default = {"MAX_CONCURRENCY": 8, "MAX_BUFFERED_EVENTS": 16, "MAX_EVENT_BYTES": 1048576}[name]
    assert getattr(loaded, name.lower()) == (default if expected is None else expected)


@pytest.mark.parametrize("name", ["MAX_CONCURRENCY", "MAX_BUFFERED_EVENTS", "MAX_EVENT_BYTES"])
@pytest.mark.parametrize("value", ["0", "-1", "1.5", "abc", "+4", "1e3", "٣"])
def test_limits_rejected(name, value):
    message = rejected(**{name: value})
    assert message.startswith(f"{name}={value!r}") and "positive whole number" in message


def test_max_event_bytes_names_its_default_when_rejected():
    assert rejected(MAX_EVENT_BYTES="1MiB") == "MAX_EVENT_BYTES='1MiB' must be a positive whole number such as 1048576"


def test_docker_variables_are_captured_once():
    environ = {**REQUIRED, "DOCKER_HOST": "tcp://proxy:2375", "DOCKER_TLS_VERIFY": "", "DOCKER_CERT_PATH": "/certs"}
    loaded = load_config(environ, hostname="h")
    assert dict(loaded.docker_env) == {"DOCKER_HOST": "tcp://proxy:2375", "DOCKER_CERT_PATH": "/certs"}
    environ["DOCKER_HOST"] = "changed"
    assert loaded.docker_env["DOCKER_HOST"] == "tcp://proxy:2375"
    assert dict(load_docker_env({})) == {}


def test_every_bad_variable_is_reported_at_once():
    from relay.config import load_config
    from relay.errors import ConfigError

    environ = {"REDIS_URI": "redis://127.0.0.1:99999", "REDIS_STREAM": "events", "LOG_LEVEL": "loud",
               "MAX_CONCURRENCY": "0"}
    with pytest.raises(ConfigError) as raised:
        load_config(environ, hostname="h")
    lines = str(raised.value).splitlines()
    assert lines[0] == "4 problems with the environment:"
    assert lines[1].startswith("  REDIS_URI='redis://127.0.0.1:99999' has port")
    assert lines[2:] == ["  REDIS_GROUP is required and must not be empty",
                         "  LOG_LEVEL='loud' is not a log level; use one of DEBUG, INFO, WARN, ERROR",
                         "  MAX_CONCURRENCY='0' must be a positive whole number such as 8"]


@pytest.mark.parametrize(("value", "expected"), [
    ("", (7 * 24 * 3600 * 10**9, 100_000)),
    ("24h", (24 * 3600 * 10**9, 100_000)),
])
def test_the_run_ledger_s_bounds(value, expected):
    config = load_config({**REQUIRED, "RUNS_MAX_AGE": value})
    assert (config.runs_max_age, config.runs_max_entries) == expected


@pytest.mark.parametrize(("variables", "error"), [
    ({"RUNS_MAX_AGE": "7d"}, "RUNS_MAX_AGE='7d' is not a duration (unknown unit \"d\" in duration \"7d\"); "
                             "use a Go duration such as 168h (7 days) or 24h"),
    ({"RUNS_MAX_AGE": "30s"}, "RUNS_MAX_AGE='30s' is under a minute; the run ledger keeps records at least 1m, "
                              "e.g. 168h"),
    ({"RUNS_MAX_ENTRIES": "0"}, "RUNS_MAX_ENTRIES='0' must be a positive whole number such as 100000"),
])
def test_bad_run_ledger_bounds_are_named(variables, error):
    with pytest.raises(ConfigError) as raised:
        load_config({**REQUIRED, **variables})
    assert str(raised.value) == error
