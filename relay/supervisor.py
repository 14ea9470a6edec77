"""``relay start``: the supervisor that owns the life of the process.

    config → logging → Redis and Docker reachable (fail fast) → orphan sweep
    → state writer, watcher → load and build /functions (the reconciler)
    → image GC → consumer group → spawn the loops (consumer, reclaimer,
      reconciler, watcher, state writer, backlog, scheduler, retention, metrics)
    → run until SIGTERM/SIGINT → stop taking work → drain (deadline)
    → final bounded state flush → stop

It runs in the main greenlet; gevent has already patched the standard
library (see relay.entry). Each loop is a greenlet owned by one module,
with loop() and stop().

Every loop is watched. A loop that raises, or returns while Relay is not
stopping, is logged at ERROR (with the traceback) and stops Relay the
ordinary way: no new work, the bounded drain, the final flush; then the
process exits with status 1 so systemd, Docker or Kubernetes starts it
again. A Relay that is up never has a dead loop.
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
from relay.offload import in_thread
from relay.stream.keys import StreamAddress

log = logging.getLogger("relay.supervisor")

DRAIN_MARGIN = 30.0  # seconds on top of the longest rule timeout


@dataclass(frozen=True)
class Timing:
    """The engine's fixed intervals, in seconds. Only tests construct another one."""

    reclaim_interval: float = 60.0
    min_idle: float = 60.0
    backlog_interval: float = 15.0
    rescan_interval: float = 30.0   # the reconciler's periodic pass
    watch_interval: float = 0.5     # the watcher's polls of /functions
    debounce: float = 0.75          # quiet time after a function's last change
    stats_interval: float = 5.0     # counters → state database


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
        return Supervisor(config).run()
    except RelayError as error:
        log.error("Relay cannot start", extra={"error": str(error)})
        return 1


class Supervisor:
    def __init__(self, config, functions_dir=FUNCTIONS_DIR, secrets_dir=None, timing=Timing(), state_path=None):
        """*state_path* overrides the fixed /var/lib/relay/db.sqlite3 (tests only)."""
        self.config = config
        self.address = StreamAddress(config.stream, config.group, config.consumer)
        self.functions_dir = functions_dir
        self.secrets_dir = secrets_dir
        self.timing = timing
        self.state_path = state_path
        self.stopping = Event()
        self.redis = None
        self.docker = None
        self.executor = None
        self.consumer = None
        self.state = None
        self.catalog = None
        self.secrets = None
        self.loops = []
        self.services = []
        self.failed_loop = None  # the name of the first loop that ended unexpectedly

    def run(self):
        """Run until a stop signal or a dead loop; the exit code: 0, or 1 after a dead loop."""
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
        if self.failed_loop is not None:
            log.error("Relay stopped because a loop ended unexpectedly", extra={"loop": self.failed_loop})
            return 1
        log.info("Relay stopped")
        return 0

    def request_stop(self):
        """Called from a signal handler: only sets the flag."""
        self.stopping.set()

    # --- start ------------------------------------------------------------------

    def _connect(self):
        from relay.clients import connect_docker, connect_redis, ping_redis
        from relay.stream.consumer import max_reply_bytes

        config = self.config
        self.redis = connect_redis(config.redis, max_reply_bytes(config.max_buffered_events, config.max_event_bytes))
        ping_redis(self.redis, config.redis)
        log.debug("Redis reachable", extra={"redis": config.redis.redacted})
        self.docker = connect_docker(config.docker_env)
        log.debug("Docker engine reachable")

    def _start_engine(self):
        from relay.gitsync.webhook_secret import secret_store
        from relay.live.catalog import Catalog
        from relay.metrics.prometheus import Metrics
        from relay.runtime.executor import Executor
        from relay.runtime.pins import ImagePins
        from relay.runtime.sweep import Leftovers, sweep_orphans
        from relay.secrets.store import environment
        from relay.stream.group import ensure_group
        from relay.wiring import build_engine

        config, client = self.config, self.redis
        self.metrics = metrics = Metrics()
        sweep_orphans(self.docker, config.consumer)
        leftovers = Leftovers(self.docker)
        self._spawn_services([leftovers])
        self.catalog = Catalog()
        self.pins = ImagePins()
        self.secrets = secrets = secret_store(self.secrets_dir) if self.secrets_dir else secret_store()
        self.executor = executor = Executor(
            self.docker, config.consumer, pins=self.pins, leftovers=leftovers,
            warm_capacity=config.max_concurrency, functions=self.catalog.snapshot,
            environment=lambda function: environment(function, secrets),
            on_warm_count=lambda function, count: metrics.warm_containers.labels(function).set(count),
            # late-bound: the reconciler is made by _load_functions, before any invocation
            on_image_missing=lambda function, image: self.reconciler.image_missing(function, image))  # noqa: PLW0108
        self._spawn_services([executor.warm])
        self._load_functions()

        ensure_group(client, config.stream, config.group)
        engine = build_engine(
            client, self.address, catalog=self.catalog, executor=executor,
            environment=lambda function: environment(function, secrets), pins=self.pins, metrics=metrics,
            max_concurrency=config.max_concurrency, max_buffered_events=config.max_buffered_events,
            max_event_bytes=config.max_event_bytes,
            reclaim_interval=self.timing.reclaim_interval, min_idle=self.timing.min_idle)
        self.consumer = engine.consumer
        self.loops += [self._spawn("consumer", self.consumer.read_loop),
                       self._spawn("reclaimer", self.consumer.reclaim_loop)]
        self._start_services()

    def _load_functions(self):
        """The state writer and the watcher first (a slow startup build is visible, an edit
        during it is not lost), then every function, built; then the startup image GC."""
        from relay.live.reconciler import ActiveImages, Reconciler
        from relay.live.watcher import Debouncer, Watcher
        from relay.runtime.image_gc import collect_garbage, retire_image
        from relay.runtime.images import ImageBuilder
        from relay.view.database import DB_PATH, StateDatabase
        from relay.view.writer import StateWriter, previous_functions

        metrics, timing, docker = self.metrics, self.timing, self.docker
        # Functions load in the hub's thread pool. croniter's first import runs `file` through
        # subprocess, which gevent only allows on the hub's own thread: import it here first.
        import croniter  # noqa: F401
        state_path = self.state_path or DB_PATH
        known_before = previous_functions(state_path)
        self.state = StateWriter(StateDatabase(state_path), metrics, interval=timing.stats_interval)
        self.state_loop = self._spawn("state writer", self.state.loop)
        builder = ImageBuilder(
            docker,
            on_build_failure=lambda name: metrics.build_failures.labels(name).inc(),
            on_build_seconds=lambda name, seconds: metrics.build_duration.labels(name).observe(seconds),
            offload=in_thread)
        active_images = ActiveImages(self.catalog)
        self.reconciler = Reconciler(
            self.functions_dir, builder, self.catalog,
            retire=lambda tag: (self.executor.warm.retire_image(tag),
                                retire_image(docker, tag, self.pins, active_images)),
            on_change=self._functions_changed,
            offload=in_thread,
            webhook_secret=self.secrets.webhook_secret,
            rescan_interval=timing.rescan_interval)
        self.debouncer = Debouncer(self.reconciler.request, delay=timing.debounce)
        self.watcher = Watcher(self.functions_dir, self.debouncer.touch, interval=timing.watch_interval)
        self._spawn_services([self.watcher])

        found = self.reconciler.load_all()
        log.info("Loaded functions", extra={"ready": len(self.catalog.snapshot()), "found": found})
        # Old versions of what is loaded now, and images of functions removed while Relay was down.
        collect_garbage(docker, active_images, self.pins,
                        functions={*active_images, *self.reconciler.statuses, *known_before})
        self._spawn_services([self.reconciler])

    def _functions_changed(self, statuses):
        for status in statuses:
            self.metrics.function_loaded(status.function.name)
        self.state.functions_changed(statuses)

    def _start_services(self):
        """The side loops: each has loop() and stop()."""
        from relay.gitsync.webhook import webhook_service
        from relay.metrics.server import MetricsServer
        from relay.secrets.store import FileSecretStore
        from relay.stream.backlog import Backlog
        from relay.stream.retention import Retention
        from relay.stream.schedules import Publisher, Scheduler

        config = self.config
        try:  # a webhook port that cannot be bound stops the start (WebhookBindError), loops and all
            webhook = webhook_service(config.webhook_addr,
                                      secrets=FileSecretStore(self.secrets_dir) if self.secrets_dir else None)
        except RelayError:
            self.stopping.set()
            self.consumer.stop()
            gevent.killall(self.loops, timeout=5)
            raise
        services = [Backlog(self.redis, self.address, self.metrics,
                            interval=self.timing.backlog_interval),
                    Scheduler(self.catalog, Publisher(self.redis, config.stream, self.metrics))]
        if config.retention:
            services.append(Retention(self.redis, config.stream, config.retention))
        if config.metrics_addr:
            services.append(MetricsServer(config.metrics_addr, self.metrics.registry))
        if webhook is not None:
            services.append(webhook)
        self._spawn_services(services)

    def _spawn_services(self, services):
        self.services += services
        self.loops += [self._spawn(_loop_name(service), service.loop) for service in services]

    def _spawn(self, name, loop):
        return gevent.spawn(self._watched, name, loop)

    def _watched(self, name, loop):
        """Run *loop*; if it raises, or returns while Relay is not stopping, stop Relay with exit status 1.

        Killing the greenlet at shutdown (GreenletExit) is not a failure."""
        try:
            loop()
        except Exception:
            log.error("Loop ended unexpectedly; Relay stops", extra={"loop": name}, exc_info=True)
        else:
            if self.stopping.is_set():
                return
            log.error("Loop returned while Relay was running; Relay stops", extra={"loop": name})
        if self.failed_loop is None:
            self.failed_loop = name
        self.stopping.set()

    def _function_count(self):
        return len(self.catalog.snapshot()) if self.catalog else 0

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
        """Stop taking work (events and reconciles), let running invocations finish within
        their timeouts, write the state one last time (bounded), then stop."""
        for service in self.services:
            service.stop()
        if self.consumer is None:
            self._final_flush()
            return
        self.consumer.stop()
        self.debouncer.cancel()
        deadline = self._drain_deadline()
        if not self.consumer.drain(deadline):
            log.warning("Invocations still running at the drain deadline; their entries stay pending",
                        extra={"running": len(self.consumer.dispatches), "deadline": f"{deadline:.0f}s"})
            self.consumer.dispatches.kill(timeout=10)
        if not self.executor.warm.close():
            log.warning("Warm containers still being removed at the deadline; the next start sweeps them")
        gevent.joinall(self.loops, timeout=5)
        gevent.killall([loop for loop in self.loops if not loop.dead], timeout=5)
        self._final_flush()

    def _final_flush(self):
        if self.state is not None:
            self.state.stop()
            self.state_loop.join(timeout=5)
            self.state.final_flush()

    def _drain_deadline(self):
        timeouts = [entry.timeout for active in self.catalog.snapshot()
                    for entry in (*active.function.template.rules, *active.function.template.schedules)]
        longest = max(timeouts, default=0) or MAX_TIMEOUT
        return longest / 1e9 + DRAIN_MARGIN

    def _close(self):
        for client in (self.redis, self.docker):
            if client is not None:
                client.close()


def _loop_name(service):
    """"metrics server" for MetricsServer, "backlog" for Backlog: the name a log line shows."""
    words = "".join(f" {char.lower()}" if char.isupper() else char for char in type(service).__name__)
    return words.strip()
