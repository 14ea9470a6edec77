"""Connections to Relay's two dependencies, with errors that say what failed.

Importing this module imports redis; docker-py is imported by
``connect_docker``, so ``relay dlq`` (Redis only) does not load it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from relay.config import host_port
from relay.errors import DependencyError, reason
from relay.speedups import log_in_use

if TYPE_CHECKING:
    import docker
    from redis.sentinel import Sentinel

    from relay.config import RedisSettings, SentinelSettings

CONNECT_TIMEOUT = 5.0  # seconds for a first answer; fail fast, not forever
# Seconds for any reply. The longest wait Relay asks of Redis is a 2 s blocking
# read; a server that keeps a connection open and answers nothing for longer
# (a frozen host, a partition, a primary that lost a failover) is gone, an
# outage like a refused connection, and the next command finds the new one.
COMMAND_TIMEOUT = 15.0
SENTINEL_TIMEOUT = 1.5  # seconds for a Sentinel to answer where the primary is; the next one is asked then


def connect_redis(settings: RedisSettings, max_reply_bytes: int | None = None) -> redis.Redis:
    """A Redis client for *settings*; it connects lazily, see ``ping_redis``.

    With *max_reply_bytes*, a reply that grows past it raises ReplyTooLarge
    and drops its connection unread (relay.reply_cap): the worker's client
    is built so, to hold no more than its limits whatever producers write.

    With Sentinels, the client asks them for the current primary whenever it
    opens a connection, and drops connections to a primary that lost its
    role (a ``READONLY`` reply is a connection error): after a failover the
    next command goes to the new primary, no restart needed.

    redis-py's own retries are off: a failed command fails at once, and the
    loop that issued it decides how to back off and when to warn. Logs at
    DEBUG which JSON decoder and which Redis reply parser are in use.
    """
    log_in_use()
    options: dict[str, Any] = dict(  # keyword arguments of redis.Redis, of many types
        username=settings.username,
        password=settings.password,
        db=settings.db,
        ssl=settings.tls,
        socket_connect_timeout=CONNECT_TIMEOUT,
        socket_timeout=COMMAND_TIMEOUT,
        socket_keepalive=True,
        health_check_interval=30,
        decode_responses=False,
        retry=Retry(NoBackoff(), 0),
    )
    if settings.sentinel is None:
        client = redis.Redis(host=settings.host, port=settings.port, **options)
    else:
        client = _sentinels(settings.sentinel, settings.tls).master_for(settings.sentinel.master, **options)
    if max_reply_bytes is not None:
        from relay.reply_cap import cap_replies

        cap_replies(client, max_reply_bytes)
    return client


def _sentinels(sentinel: SentinelSettings, tls: bool) -> Sentinel:
    from redis.sentinel import Sentinel

    return Sentinel(list(sentinel.addresses), sentinel_kwargs=_sentinel_options(sentinel, tls))


def _sentinel_options(sentinel: SentinelSettings, tls: bool) -> dict[str, Any]:
    """Keyword arguments of redis.Redis for a connection to a Sentinel."""
    return dict(password=sentinel.password, ssl=tls, socket_timeout=SENTINEL_TIMEOUT,
                socket_connect_timeout=SENTINEL_TIMEOUT, retry=Retry(NoBackoff(), 0))


def ping_redis(client: redis.Redis, settings: RedisSettings, primary: str | None = None) -> None:
    """PING Redis through *client*; DependencyError saying what did not answer.

    With Sentinels, each step has its own message: no Sentinel answered,
    none knows the master (or all see it down), or the primary they name
    did not answer. *primary* is where ``locate_primary`` found it, if the
    caller asked already.
    """
    where = f"Redis at {settings.redacted} is unreachable"
    if settings.sentinel is not None and primary is None:
        primary = locate_primary(settings)
    try:
        client.ping()
    except redis.RedisError as error:
        text = reason(error, innermost=True, limit=300)
        if primary is not None:
            text = f"primary {primary} did not answer: {text}"
        raise DependencyError(f"{where}: {text}") from None


def locate_primary(settings: RedisSettings) -> str:
    """"host:port" of the primary the Sentinels of *settings* name, asking them in order.

    Raises DependencyError: "no sentinel answered" (with each one's
    reason), "master … unknown to the sentinels", or "… is down" while
    they have not yet promoted a replica.
    """
    sentinel = settings.sentinel
    assert sentinel is not None, "locate_primary needs the settings of Sentinels"
    where = f"Redis at {settings.redacted} is unreachable"
    failures: list[tuple[str, str]] = []
    down = None
    for host, port in sentinel.addresses:
        client = redis.Redis(host=host, port=port, **_sentinel_options(sentinel, settings.tls))
        try:
            # redis-py's annotation allows a bool for other clients; a plain client answers a dict
            state = cast("dict[str, Any]", client.sentinel_master(sentinel.master))
        except redis.RedisError as error:
            if not (isinstance(error, redis.ResponseError) and "no such master" in str(error).lower()):
                failures.append((host_port(host, port), _sentinel_refusal(error, sentinel)))
            continue
        finally:
            client.close()
        primary = host_port(state["ip"], state["port"])
        if state["is_master"] and not (state["is_sdown"] or state["is_odown"]):
            return primary
        down = primary
    if len(failures) == len(sentinel.addresses):
        by_reason: dict[str, list[str]] = {}
        for address, text in failures:
            by_reason.setdefault(text, []).append(address)
        raise DependencyError(f"{where}: no sentinel answered (" + "; ".join(
            f"{', '.join(addresses)}: {text}" for text, addresses in by_reason.items()) + ")")
    if down is not None:
        raise DependencyError(f"{where}: the sentinels see primary {down} of master \"{sentinel.master}\" "
                              "down and have not promoted a replica yet")
    raise DependencyError(f"{where}: master \"{sentinel.master}\" unknown to the sentinels")


def _sentinel_refusal(error: redis.RedisError, sentinel: SentinelSettings) -> str:
    """Why a Sentinel did not answer, in words; a login problem says what to set."""
    text = reason(error, innermost=True, limit=200)
    if isinstance(error, redis.AuthenticationError) or "authenticated" in text or text.startswith("NOAUTH"):
        if sentinel.password is None:
            return "it asks for a password; set REDIS_SENTINEL_PASSWORD"
        return "it refused REDIS_SENTINEL_PASSWORD"
    return text


def connect_docker(docker_env: Mapping[str, str]) -> docker.DockerClient:
    """A Docker client from the DOCKER_* variables in *docker_env*; pings the engine."""
    import docker
    from docker.errors import DockerException

    where = docker_env.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(environment=dict(docker_env), version="auto", timeout=CONNECT_TIMEOUT)
        client.ping()
    except DockerException as error:
        raise DependencyError(f"Docker engine at {where} is unreachable: "
                              f"{reason(error, innermost=True, limit=300)}") from None
    except Exception as error:  # docker-py lets requests' and urllib3's errors through
        raise DependencyError(f"Docker engine at {where} is unreachable: "
                              f"{reason(error, innermost=True, limit=300)}") from None
    return client
