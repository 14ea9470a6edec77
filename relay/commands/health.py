"""``relay health``: are Redis and the Docker engine reachable?

It only creates clients and pings; it never consumes, loads functions,
builds images or opens the state database. Both checks run at once, and
the whole command is bounded by DEADLINE: a dependency that accepts a
connection and never answers fails its check when the deadline passes,
well inside a container HEALTHCHECK's timeout. Under Sentinel, the Redis
check asks the Sentinels for the primary and PINGs it, and says which step
failed (relay.clients.ping_redis).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING

from relay.errors import RelayError

if TYPE_CHECKING:
    from relay.commands import Arguments
    from relay.config import RedisSettings

DEADLINE = 5.0  # seconds for the whole command, both checks together


def run(args: Arguments, environ: Mapping[str, str] | None = None) -> int:
    """Run ``relay health``; return the exit code."""
    return health(environ, env_file=args["--env-file"])


def health(environ: Mapping[str, str] | None = None, deadline: float = DEADLINE, env_file: str | None = None) -> int:
    """*environ* None: this process's environment, completed by *env_file* (relay.envfile)."""
    try:
        from relay.config import load_docker_env, load_redis_settings

        if environ is None:
            from relay.envfile import command_environment

            environ = command_environment(env_file, os.environ)
        settings = load_redis_settings(environ)
        docker_env = load_docker_env(environ)
    except RelayError as error:
        print(f"relay health: {error}", file=sys.stderr)
        return 1
    docker_host = docker_env.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    checks = [_Check("redis", settings.redacted, f"Redis at {settings.redacted}", partial(_ping_redis, settings)),
              _Check("docker", docker_host, f"Docker engine at {docker_host}", partial(_ping_docker, docker_env))]
    ends = time.monotonic() + deadline
    for check in checks:
        check.start()
    for check in checks:
        check.join(max(0.0, ends - time.monotonic()))
    failed = None
    for check in checks:
        if check.ok:
            print(f"{check.name}: ok ({check.where}{check.detail})")
        elif failed is None:
            failed = check.error or f"{check.what} did not answer within {deadline:g}s"
    if failed is not None:
        print(f"relay health: {failed}", file=sys.stderr)
        return 1
    return 0


class _Check:
    """One ping in a daemon thread: a check that hangs never holds the command past its deadline.

    *ping* is called with the check: it may say what it is waiting for
    (``what``, for the deadline's message) and add to the ok line (``detail``).
    """

    def __init__(self, name: str, where: str, what: str, ping: Callable[[_Check], None]) -> None:
        self.name, self.where, self.what = name, where, what
        self.ok = False
        self.error: str | None = None
        self.detail = ""
        self._thread = threading.Thread(target=self._run, args=(ping,), name=f"health-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self, ping: Callable[[_Check], None]) -> None:
        try:
            ping(self)
            self.ok = True
        except RelayError as error:
            self.error = str(error)


def _ping_redis(settings: RedisSettings, check: _Check) -> None:
    """PING Redis; under Sentinel, first ask where the primary is, so a primary that never
    answers is named in the deadline's message."""
    from relay.clients import connect_redis, locate_primary, ping_redis

    client = connect_redis(settings)
    try:
        primary = None
        if settings.sentinel is not None:
            primary = locate_primary(settings)
            check.what = f"Redis at {settings.redacted}: primary {primary}"
            check.detail = f", primary {primary}"
        ping_redis(client, settings, primary=primary)
    finally:
        client.close()


def _ping_docker(docker_env: Mapping[str, str], check: _Check) -> None:
    from relay.clients import connect_docker

    connect_docker(docker_env).close()
