"""``relay start``: the supervisor that owns the life of the process.

    config → logging → Redis and Docker reachable (fail fast) → consumer group
    → run until SIGTERM/SIGINT → stop taking work → drain → stop

It runs in the main greenlet; gevent has already patched the standard
library (see relay.entry). The event loops plug in between "started" and
"stopping" as they land.
"""

import logging
import os
import signal
import sys

import gevent
from gevent.event import Event

from relay import __version__
from relay.config import load_config
from relay.errors import ConfigError, DependencyError, RelayError

log = logging.getLogger("relay.supervisor")


def start(imported_before_patch=()):
    """Run Relay until a stop signal; return the process exit code."""
    try:
        config = load_config(os.environ)
    except ConfigError as error:
        print(f"relay start: {error}", file=sys.stderr)
        return 1

    from relay.logs import configure_logging

    configure_logging(config.log_level)
    if imported_before_patch:
        log.warning("Modules were imported before gevent patched the standard library",
                    extra={"modules": ",".join(imported_before_patch)})
    supervisor = Supervisor(config)
    try:
        supervisor.run()
    except RelayError as error:
        log.error("Relay cannot start", extra={"error": str(error)})
        return 1
    return 0


class Supervisor:
    def __init__(self, config):
        self.config = config
        self.stopping = Event()
        self.redis = None
        self.docker = None

    def run(self):
        config = self.config
        log.info("Relay starting", extra={
            "version": __version__, "consumer": config.consumer, "stream": config.stream,
            "group": config.group, "redis": config.redis.redacted})
        self._install_signal_handlers()
        try:
            self._connect()
            ensure_group(self.redis, config.stream, config.group)
            log.info("Relay started", extra={"consumer": config.consumer})
            self._wait_for_stop()
            log.info("Relay stopping")
        finally:
            self._close()
        log.info("Relay stopped")

    def request_stop(self):
        """Called from a signal handler: only sets the flag."""
        self.stopping.set()

    def _wait_for_stop(self):
        # gevent's signal watchers do not keep the hub alive on their own; a
        # timed wait does, so an idle Relay never dies with LoopExit.
        while not self.stopping.wait(timeout=1.0):
            pass

    def _install_signal_handlers(self):
        for signum in (signal.SIGTERM, signal.SIGINT):
            gevent.signal_handler(signum, self.request_stop)

    def _connect(self):
        from relay.clients import connect_docker, connect_redis, ping_redis

        self.redis = connect_redis(self.config.redis)
        ping_redis(self.redis, self.config.redis)
        log.debug("Redis reachable", extra={"redis": self.config.redis.redacted})
        self.docker = connect_docker(self.config.docker_env)
        log.debug("Docker engine reachable")

    def _close(self):
        for client in (self.redis, self.docker):
            if client is not None:
                client.close()


def ensure_group(client, stream, group):
    """Create the consumer group at the stream's start; an existing group is fine.

    Position 0 (not "$") so that entries published before Relay's first start
    are delivered rather than skipped.
    """
    import redis

    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as error:
        if str(error).startswith("BUSYGROUP"):
            log.debug("Consumer group exists", extra={"stream": stream, "group": group})
            return
        raise DependencyError(f"cannot create consumer group {group!r} on stream {stream!r}: {error}") from None
    except redis.RedisError as error:
        raise DependencyError(f"cannot create consumer group {group!r} on stream {stream!r}: {error}") from None
    log.info("Created consumer group", extra={"stream": stream, "group": group})
