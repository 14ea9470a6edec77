"""``relay start``: the supervisor that owns the life of the process.

    config → logging → Redis and Docker reachable (fail fast) → orphan sweep
    → load and build /functions → consumer group → spawn the loops
    → run until SIGTERM/SIGINT → stop taking work → drain (deadline) → stop

It runs in the main greenlet; gevent has already patched the standard
library (see relay.entry). Each loop is a greenlet owned by one module.
"""

import logging
import os
import signal
import sys
from dataclasses import dataclass

import gevent
from gevent.event import Event

from relay import __version__
from relay.config import FUNCTIONS_DIR, load_config
from relay.errors import ConfigError, RelayError
from relay.functions.template import MAX_TIMEOUT

log = logging.getLogger("relay.supervisor")

DRAIN_MARGIN = 30.0  # seconds on top of the longest rule timeout


@dataclass(frozen=True)
class Timing:
    """The engine's fixed intervals, in seconds. Only tests construct another one."""

    reclaim_interval: float = 60.0
    min_idle: float = 60.0
    backlog_interval: float = 15.0


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
    try:
        Supervisor(config).run()
    except RelayError as error:
        log.error("Relay cannot start", extra={"error": str(error)})
        return 1
    return 0


class Supervisor:
    def __init__(self, config, functions_dir=FUNCTIONS_DIR, secrets_dir=None, timing=Timing()):
        self.config = config
        self.functions_dir = functions_dir
        self.secrets_dir = secrets_dir
        self.timing = timing
        self.stopping = Event()
        self.redis = None
        self.docker = None
        self.consumer = None
        self.loops = []
        self.services = []

    def run(self):
        config = self.config
        log.info("Relay starting", extra={
            "version": __version__, "consumer": config.consumer, "stream": config.stream,
            "group": config.group, "redis": config.redis.redacted})
        self._install_signal_handlers()
        try:
            self._connect()
            self._start_engine()
            log.info("Relay started", extra={"consumer": config.consumer, "functions": self._function_count()})
            self._wait_for_stop()
            log.info("Relay stopping")
            self._shutdown()
        finally:
            self._close()
        log.info("Relay stopped")

    def request_stop(self):
        """Called from a signal handler: only sets the flag."""
        self.stopping.set()

    # --- start ------------------------------------------------------------------

    def _connect(self):
        from relay.clients import connect_docker, connect_redis, ping_redis

        self.redis = connect_redis(self.config.redis)
        ping_redis(self.redis, self.config.redis)
        log.debug("Redis reachable", extra={"redis": self.config.redis.redacted})
        self.docker = connect_docker(self.config.docker_env)
        log.debug("Docker engine reachable")

    def _start_engine(self):
        from relay.catalog import Catalog
        from relay.loading import discover, prepare
        from relay.metrics import Metrics
        from relay.runtime.executor import Executor
        from relay.runtime.image_gc import collect_garbage
        from relay.runtime.images import ImageBuilder
        from relay.runtime.leases import ImageLeases
        from relay.runtime.sweep import sweep_orphans
        from relay.secrets import FileSecretStore, environment
        from relay.stream.consumer import Buffer, Consumer
        from relay.stream.dispatcher import Dispatcher
        from relay.stream.group import ensure_group
        from relay.stream.settle import Settler
        from relay.stream.slots import Slots
        from relay.stream.state import InvocationStore

        config, client = self.config, self.redis
        self.metrics = metrics = Metrics()
        sweep_orphans(self.docker, config.consumer)

        builder = ImageBuilder(
            self.docker,
            on_build_failure=lambda name: metrics.build_failures.labels(name).inc(),
            on_build_seconds=lambda name, seconds: metrics.build_duration.labels(name).observe(seconds))
        functions = discover(self.functions_dir)
        self.catalog = Catalog(filter(None, (prepare(function, builder) for function in functions)))
        log.info("Loaded functions", extra={"ready": len(self.catalog.snapshot()), "found": len(functions)})
        self.leases = ImageLeases()
        collect_garbage(self.docker, {active.name: active.image for active in self.catalog.snapshot()},
                        self.leases)

        ensure_group(client, config.stream, config.group)
        secrets = FileSecretStore(self.secrets_dir) if self.secrets_dir else FileSecretStore()
        settler = Settler(client, config.stream, config.group, config.consumer)
        dispatcher = Dispatcher(
            store=InvocationStore(client, config.stream, config.group),
            settler=settler,
            executor=Executor(self.docker, config.consumer),
            slots=Slots(config.max_concurrency, on_wait=metrics.concurrency_waits.inc),
            metrics=metrics,
            environment=lambda function: environment(function, secrets),
            leases=self.leases,
        )
        self.consumer = Consumer(
            client=client, stream=config.stream, group=config.group, consumer=config.consumer,
            catalog=self.catalog, dispatcher=dispatcher, settler=settler,
            buffer=Buffer(config.max_buffered_events, metrics.buffered_events), metrics=metrics,
            reclaim_interval=self.timing.reclaim_interval, min_idle=self.timing.min_idle)
        self.loops += [gevent.spawn(self.consumer.read_loop), gevent.spawn(self.consumer.reclaim_loop)]
        self._start_services()

    def _start_services(self):
        """The side loops: each has loop() and stop()."""
        from relay.stream.backlog import Backlog
        from relay.stream.retention import Retention

        config = self.config
        self.services.append(Backlog(self.redis, config.stream, config.group, self.metrics,
                                     interval=self.timing.backlog_interval))
        if config.retention:
            self.services.append(Retention(self.redis, config.stream, config.retention))
        self.loops += [gevent.spawn(service.loop) for service in self.services]

    def _function_count(self):
        return len(self.catalog.snapshot())

    # --- stop -------------------------------------------------------------------

    def _wait_for_stop(self):
        # gevent's signal watchers do not keep the hub alive on their own; a
        # timed wait does, so an idle Relay never dies with LoopExit.
        while not self.stopping.wait(timeout=1.0):
            pass

    def _install_signal_handlers(self):
        for signum in (signal.SIGTERM, signal.SIGINT):
            gevent.signal_handler(signum, self.request_stop)

    def _shutdown(self):
        """Stop taking work, let running invocations finish within their timeouts, then stop."""
        if self.consumer is None:
            return
        self.consumer.stop()
        for service in self.services:
            service.stop()
        deadline = self._drain_deadline()
        if not self.consumer.drain(deadline):
            log.warning("Invocations still running at the drain deadline; their entries stay pending",
                        extra={"running": len(self.consumer.dispatches), "deadline": f"{deadline:.0f}s"})
            self.consumer.dispatches.kill(timeout=10)
        gevent.joinall(self.loops, timeout=5)
        gevent.killall([loop for loop in self.loops if not loop.dead], timeout=5)

    def _drain_deadline(self):
        timeouts = [rule.timeout for active in self.catalog.snapshot() for rule in active.function.template.rules]
        longest = max(timeouts, default=0) or MAX_TIMEOUT
        return longest / 1e9 + DRAIN_MARGIN

    def _close(self):
        for client in (self.redis, self.docker):
            if client is not None:
                client.close()
