"""``relay start``: the supervisor that owns the life of the process.

    config → logging → Redis and Docker reachable (fail fast) → build the
    process (relay.wiring.build_process) → orphan sweep → state writer,
    watcher → load and build /functions (the reconciler) → image GC
    → consumer group → spawn the loops (consumer, reclaimer, reconciler,
      watcher, state writer, backlog, scheduler, retention, metrics, webhook)
    → run until SIGTERM/SIGINT → stop taking work → drain (deadline)
    → final bounded state flush → stop

It runs in the main greenlet; gevent has already patched the standard
library (see relay.entry). It builds nothing itself: relay.wiring builds
every part, and the supervisor only starts, watches and stops them. Each
loop is a greenlet owned by one module, with loop() and stop().

Every loop is watched. A loop that raises, or returns while Relay is not
stopping, is logged at ERROR (with the traceback) and stops Relay the
ordinary way: no new work, the bounded drain, the final flush; then the
process exits with status 1 so systemd, Docker or Kubernetes starts it
again. A Relay that is up never has a dead loop.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import gevent
from gevent.event import Event

from relay import __version__
from relay.clients import connect_docker, connect_redis, ping_redis
from relay.config import FUNCTIONS_DIR, Config, load_config
from relay.errors import ConfigError, RelayError
from relay.functions.template import MAX_TIMEOUT
from relay.runtime.image_gc import collect_garbage
from relay.runtime.sweep import sweep_orphans
from relay.stream.consumer import max_reply_bytes
from relay.stream.group import ensure_group
from relay.wiring import Clients, Process, Service, Timing, build_process, listen_webhook

__all__ = ["DRAIN_MARGIN", "Supervisor", "Timing", "start"]

log = logging.getLogger("relay.supervisor")

DRAIN_MARGIN = 30.0  # seconds on top of the longest rule timeout


class Closable(Protocol):
    def close(self) -> None: ...


def start(imported_before_patch: Sequence[str] = ()) -> int:
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
    def __init__(self, config: Config, functions_dir: str | Path = FUNCTIONS_DIR,
                 secrets_dir: str | Path | None = None, timing: Timing | None = None,
                 state_path: str | Path | None = None) -> None:
        """*secrets_dir*, *timing* and *state_path* override the fixed secret store,
        intervals and /var/lib/relay/db.sqlite3 (tests only)."""
        self.config = config
        self.functions_dir = functions_dir
        self.secrets_dir = secrets_dir
        self.timing = timing if timing is not None else Timing()
        self.state_path = state_path
        self.stopping = Event()
        self.process: Process | None = None
        self._to_close: list[Closable] = []   # the clients made so far
        self.loops: list[gevent.Greenlet] = []
        self.services: list[Service] = []
        self.state_loop: gevent.Greenlet | None = None
        self.write_behind_loop: gevent.Greenlet | None = None
        self.failed_loop: str | None = None  # the name of the first loop that ended unexpectedly

    def run(self) -> int:
        """Run until a stop signal or a dead loop; the exit code: 0, or 1 after a dead loop."""
        config = self.config
        log.info("Relay starting", extra={
            "version": __version__, "consumer": config.consumer, "stream": config.stream,
            "group": config.group, "redis": config.redis.redacted})
        self._install_signal_handlers()
        try:
            clients = self._connect()
            self.process = process = build_process(
                config, clients, functions_dir=self.functions_dir, secrets_dir=self.secrets_dir,
                state_path=self.state_path, timing=self.timing)
            self._start(process, clients)
            log.info("Relay started", extra={"consumer": config.consumer,
                                             "functions": len(process.catalog.snapshot())})
            self._wait_for_stop()
            log.info("Relay stopping")
            self._shutdown(process)
        finally:
            self._close()
        if self.failed_loop is not None:
            log.error("Relay stopped because a loop ended unexpectedly", extra={"loop": self.failed_loop})
            return 1
        log.info("Relay stopped")
        return 0

    def request_stop(self) -> None:
        """Called from a signal handler: only sets the flag."""
        self.stopping.set()

    # --- start ------------------------------------------------------------------

    def _connect(self) -> Clients:
        config = self.config
        client = connect_redis(config.redis, max_reply_bytes(config.max_buffered_events, config.max_event_bytes))
        self._to_close.append(client)
        ping_redis(client, config.redis)
        log.debug("Redis reachable", extra={"redis": config.redis.redacted})
        docker_client = connect_docker(config.docker_env)
        self._to_close.append(docker_client)
        log.debug("Docker engine reachable")
        return Clients(redis=client, docker=docker_client)

    def _start(self, process: Process, clients: Clients) -> None:
        """Start *process* step by step; each step's loops run before the next step begins."""
        config = self.config
        sweep_orphans(clients.docker, config.consumer)
        self._spawn_services({"leftovers": process.leftovers, "warm pool": process.warm})

        # The state writer and the watcher first (a slow startup build is visible, an edit
        # during it is not lost), then every function, built; then the startup image GC.
        # Functions load in the hub's thread pool. croniter's first import runs `file` through
        # subprocess, which gevent only allows on the hub's own thread: import it here first.
        import croniter  # noqa: F401
        self.state_loop = self._spawn("state writer", process.state.loop)   # stopped after the drain
        self._spawn_services({"watcher": process.watcher})
        found = process.reconciler.load_all()
        log.info("Loaded functions", extra={"ready": len(process.catalog.snapshot()), "found": found})
        # Old versions of what is loaded now, and images of functions removed while Relay was down.
        active_images = process.active_images
        collect_garbage(clients.docker, active_images, process.pins,
                        functions={*active_images, *process.reconciler.statuses, *process.functions_before})
        self._spawn_services({"reconciler": process.reconciler})

        ensure_group(clients.redis, config.stream, config.group)
        consumer = process.engine.consumer
        self.loops += [self._spawn("consumer", consumer.read_loop), self._spawn("reclaimer", consumer.reclaim_loop)]
        self.write_behind_loop = self._spawn("write-behind", process.engine.write_behind.loop)   # ends after the drain
        self.loops.append(self.write_behind_loop)
        self._start_side_loops(process)

    def _start_side_loops(self, process: Process) -> None:
        """The side loops: each has loop() and stop()."""
        try:  # a webhook port that cannot be bound stops the start (WebhookBindError), loops and all
            webhook = listen_webhook(self.config, self.secrets_dir)
        except RelayError:
            self.stopping.set()
            process.engine.consumer.stop()
            gevent.killall(self.loops, timeout=5)
            raise
        services = dict(process.side_loops)
        if webhook is not None:
            services["webhook server"] = webhook
        self._spawn_services(services)

    def _spawn_services(self, services: dict[str, Service]) -> None:
        self.services += services.values()
        self.loops += [self._spawn(name, service.loop) for name, service in services.items()]

    def _spawn(self, name: str, loop: Callable[[], object]) -> gevent.Greenlet:
        return gevent.spawn(self._watched, name, loop)

    def _watched(self, name: str, loop: Callable[[], object]) -> None:
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

    # --- stop -------------------------------------------------------------------

    def _wait_for_stop(self) -> None:
        # gevent's signal watchers do not keep the hub alive on their own; a
        # timed wait does, so an idle Relay never dies with LoopExit.
        while not self.stopping.wait(timeout=1.0):
            pass

    def _install_signal_handlers(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            gevent.signal_handler(signum, self.request_stop)

    def _shutdown(self, process: Process) -> None:
        """Stop taking work (events and reconciles), let running invocations finish within
        their timeouts, write the state one last time (bounded), then stop."""
        for service in self.services:
            service.stop()
        consumer = process.engine.consumer
        consumer.stop()
        process.debouncer.cancel()
        deadline = _drain_deadline(process)
        if not consumer.drain(deadline):
            log.warning("Invocations still running at the drain deadline; their entries stay pending",
                        extra={"running": len(consumer.dispatches), "deadline": f"{deadline:.0f}s"})
            consumer.dispatches.kill(timeout=10)
        if not process.warm.close():
            log.warning("Warm containers still being removed at the deadline; the next start sweeps them")
        process.engine.write_behind.stop()   # it writes what is still owed (bounded), then ends
        if self.write_behind_loop is not None:
            self.write_behind_loop.join(timeout=process.engine.write_behind.grace + 5)
        gevent.joinall(self.loops, timeout=5)
        gevent.killall([loop for loop in self.loops if not loop.dead], timeout=5)
        self._final_flush(process)

    def _final_flush(self, process: Process) -> None:
        process.state.stop()
        if self.state_loop is not None:
            self.state_loop.join(timeout=5)
        process.state.final_flush()

    def _close(self) -> None:
        for client in self._to_close:
            client.close()


def _drain_deadline(process: Process) -> float:
    """Seconds the running invocations may take to finish: the longest timeout of any rule or schedule."""
    templates = [active.function.template for active in process.catalog.snapshot()]
    timeouts = [rule.timeout for template in templates for rule in template.rules]
    timeouts += [schedule.timeout for template in templates for schedule in template.schedules]
    longest = max(timeouts, default=0) or MAX_TIMEOUT
    return longest / 1e9 + DRAIN_MARGIN
