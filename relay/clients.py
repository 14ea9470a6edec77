"""Connections to Relay's two dependencies, with errors that say what failed.

Importing this module imports redis; docker-py is imported by
``connect_docker``, so ``relay dlq`` (Redis only) does not load it.
"""

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from relay.errors import DependencyError, reason
from relay.speedups import log_in_use

CONNECT_TIMEOUT = 5.0  # seconds for a first answer; fail fast, not forever


def connect_redis(settings):
    """A Redis client for *settings*; it connects lazily, see ``ping_redis``.

    redis-py's own retries are off: a failed command fails at once, and the
    loop that issued it decides how to back off and when to warn. Logs at
    DEBUG which JSON decoder and which Redis reply parser are in use.
    """
    log_in_use()
    return redis.Redis(
        host=settings.host,
        port=settings.port,
        username=settings.username,
        password=settings.password,
        db=settings.db,
        ssl=settings.tls,
        socket_connect_timeout=CONNECT_TIMEOUT,
        socket_keepalive=True,
        health_check_interval=30,
        decode_responses=False,
        retry=Retry(NoBackoff(), 0),
    )


def ping_redis(client, settings):
    try:
        client.ping()
    except redis.RedisError as error:
        raise DependencyError(f"Redis at {settings.redacted} is unreachable: "
                              f"{reason(error, innermost=True, limit=300)}") from None


def connect_docker(docker_env):
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
