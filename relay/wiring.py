"""Relay's parts put together, once: the supervisor, the tests and bench/ all build them here.

``build_engine`` joins the stream engine. The caller brings what differs
between the supervisor, the tests and bench/ (the executor, the secrets
behind ``environment``, the image pins, the clock and the intervals, any
observer besides Prometheus); the invocation store, the Settler, the
admission (the slots and the fleet-wide limits), the buffer, the dispatcher
and the consumer are always joined the same way.

``build_process`` builds everything one ``relay start`` runs around it: the
metrics, the catalog and the pins, the cold and warm executors, the image
builder, the reconciler, the watcher and its debounce, the state writer and
the side loops; who hears whose events is decided here. Building touches
nothing outside the process but the state database it reads; the
supervisor then starts it step by step (relay.supervisor). The webhook
server alone is made at its step of the start (``listen_webhook``): it
binds its port as it is made.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote

import docker
import redis

from relay import __version__
from relay.config import DEFAULT_MAX_EVENT_BYTES, FUNCTIONS_DIR, Config
from relay.console.heartbeat import Heartbeat, Pulse, function_state
from relay.console.server import console_server, console_site
from relay.gitsync.webhook import webhook_service
from relay.gitsync.webhook_secret import secret_store
from relay.live.catalog import Catalog
from relay.live.reconciler import ActiveImages, Reconciler
from relay.live.watcher import Debouncer, Watcher
from relay.metrics.prometheus import Metrics, PrometheusObserver
from relay.metrics.server import metrics_server
from relay.offload import in_thread
from relay.runs.ledger import RunLedger
from relay.runtime.events import RuntimeObservers
from relay.runtime.executor import Router, build_executor
from relay.runtime.image_gc import retire_image
from relay.runtime.images import ImageBuilder
from relay.runtime.pins import ImagePins
from relay.runtime.sweep import Leftovers
from relay.runtime.warm_pool import WarmExecutor
from relay.secrets.store import FileSecretStore, environment
from relay.stream import seams
from relay.stream.admission import SLOT_WAIT, Admission
from relay.stream.backlog import Backlog
from relay.stream.consumer import MIN_IDLE, READ_BLOCK_MS, RECLAIM_INTERVAL, Buffer, Consumer
from relay.stream.dispatcher import Dispatcher
from relay.stream.invocations import InvocationStore
from relay.stream.journal import Journal
from relay.stream.keys import StreamAddress
from relay.stream.limits import FleetLimits
from relay.stream.retention import Retention
from relay.stream.schedules import Provenance, Publisher, Scheduler
from relay.stream.settle import Settler
from relay.stream.slots import Slots
from relay.stream.writebehind import Counters as WriteBehindCounters
from relay.stream.writebehind import WriteBehind
from relay.view.database import DB_PATH, StateDatabase
from relay.view.writer import StateWriter, previous_functions

if TYPE_CHECKING:
    from relay.runtime.invocation import Outcome
    from relay.stream.limits import Limit
    from relay.stream.seams import Attempt
    from relay.stream.verdict import Settlement


class Service(Protocol):
    """A loop the supervisor runs in a greenlet of its own until ``stop``."""

    def loop(self) -> None: ...

    def stop(self) -> None: ...


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
    heartbeat_interval: float = 5.0  # the worker's heartbeat (relay.console.heartbeat)


@dataclass(frozen=True)
class Clients:
    """The connections to Relay's two dependencies (relay.clients), made and checked by the supervisor."""

    redis: redis.Redis
    docker: docker.DockerClient


@dataclass(frozen=True)
class Engine:
    """The stream engine of one worker: the consumer's two loops feed the dispatcher."""

    address: StreamAddress
    observer: seams.Observer
    store: InvocationStore
    settler: Settler
    slots: Slots
    buffer: Buffer
    dispatcher: Dispatcher
    consumer: Consumer
    limits: seams.Limits
    write_behind: WriteBehind    # bookkeeping that met a Redis outage, written when it answers (a loop)


def build_engine(client: redis.Redis, address: StreamAddress, *, catalog: seams.RuleSource,
                 executor: seams.Executor, environment: seams.Environment, pins: seams.Pins,
                 metrics: Metrics, observers: Sequence[seams.Observer] = (), max_concurrency: int,
                 max_buffered_events: int, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
                 clock: seams.Clock = time.time_ns, slot_wait: float = SLOT_WAIT, block_ms: int = READ_BLOCK_MS,
                 reclaim_interval: float = RECLAIM_INTERVAL, min_idle: float = MIN_IDLE,
                 limits: seams.Limits | None = None, ledger: RunLedger | None = None,
                 journal: Path | None = None) -> Engine:
    """The engine for *address*; the consumer group must exist (relay.stream.group.ensure_group).

    Its domain events go to a PrometheusObserver on *metrics*, then to *ledger* (the run ledger, which
    the Settler writes with each settle), then to each of *observers*. *limits* replaces the fleet-wide
    limits in Redis (tests only). *journal* is the file where the write-behind mirrors what it owes
    Redis (relay.stream.journal); without one, only memory holds it.
    """
    observer = _one_observer([PrometheusObserver(metrics), *([ledger] if ledger else []), *observers])
    write_behind = WriteBehind(client, address, reclaim_after=min_idle, counters=WriteBehindCounters(
        deferred=lambda kind: metrics.bookkeeping_deferred.labels(kind).inc(), late=metrics.bookkeeping_late.inc,
        lost=metrics.bookkeeping_lost.inc, resent=metrics.bookkeeping_resent.inc,
        unrecorded=metrics.runs_unrecorded.inc), runs_max_entries=ledger.max_entries if ledger else 0,
        journal=Journal(journal) if journal is not None else None)
    store = InvocationStore(client, address, write_behind)
    settler = Settler(client, address, observer, ledger, write_behind)
    slots = Slots(max_concurrency, on_wait=metrics.concurrency_waits.inc)
    buffer = Buffer(max_buffered_events, metrics.buffered_events)
    if limits is None:
        limits = FleetLimits(client, address)
    admission = Admission(slots, limits, observer, slot_wait)
    dispatcher = Dispatcher(stream=address.stream, store=store, settler=settler, executor=executor,
                            admission=admission, observer=observer, environment=environment, pins=pins,
                            provenance=Provenance(client), clock=clock)
    consumer = Consumer(client=client, address=address, catalog=catalog, dispatcher=dispatcher, settler=settler,
                        buffer=buffer, observer=observer, block_ms=block_ms, reclaim_interval=reclaim_interval,
                        min_idle=min_idle, max_event_bytes=max_event_bytes)
    return Engine(address, observer, store, settler, slots, buffer, dispatcher, consumer, limits, write_behind)


@dataclass(frozen=True)
class Process:
    """Everything one ``relay start`` runs, built and joined (``build_process``)."""

    metrics: Metrics
    catalog: Catalog
    pins: ImagePins
    leftovers: Leftovers          # removals the engine could not confirm, retried (a loop)
    executor: Router              # the dispatcher's Executor: cold, or warm on ``warm``
    warm: WarmExecutor            # the same warm executor: its loop prestarts and stops idle containers
    state: StateWriter            # the state database's writer (a loop)
    functions_before: frozenset[str]   # what the previous run left in the state database: the image GC's
    active_images: ActiveImages   # function → active image, read live from the catalog: what GC keeps
    reconciler: Reconciler        # /functions → catalog (a loop: the periodic pass)
    debouncer: Debouncer
    watcher: Watcher              # changes under /functions → the debouncer → the reconciler (a loop)
    engine: Engine                # the consumer's two loops and what they feed
    side_loops: Mapping[str, Service]   # by the name a log line gives each: backlog, scheduler, ...


def build_process(config: Config, clients: Clients, *, functions_dir: str | Path = FUNCTIONS_DIR,
                  secrets_dir: str | Path | None = None, state_path: str | Path | None = None,
                  timing: Timing = Timing()) -> Process:
    """Everything ``relay start`` runs for *config*, over *clients*, joined; nothing is started.

    *secrets_dir* and *state_path* override the fixed secret store and state
    database (tests only). The previous run's function names are read from
    the state database here, before its writer can replace them.
    """
    docker_client = clients.docker
    metrics = Metrics()
    prometheus = PrometheusObserver(metrics)
    runtime_events = RuntimeObservers([prometheus])
    catalog = Catalog()
    pins = ImagePins()
    secrets = secret_store(secrets_dir) if secrets_dir else secret_store()
    function_environment = partial(environment, provider=secrets)
    leftovers = Leftovers(docker_client)
    executor = build_executor(docker_client, config.consumer, sys.stdout, pins=pins, leftovers=leftovers,
                              warm_capacity=config.max_concurrency, functions=catalog.snapshot,
                              environment=function_environment, observer=runtime_events)
    warm = executor.warm

    state_path = state_path or DB_PATH
    functions_before = frozenset(previous_functions(state_path))
    state = StateWriter(StateDatabase(state_path), metrics, interval=timing.stats_interval)
    active_images = ActiveImages(catalog)

    def retire(tag: str) -> None:
        """An old version's image: its warm containers go once idle, its tag after its last pin."""
        warm.retire_image(tag)
        retire_image(docker_client, tag, pins, active_images)

    builder = ImageBuilder(docker_client, observer=runtime_events, offload=in_thread)
    reconciler = Reconciler(functions_dir, builder, catalog, retire=retire, observers=(prometheus, state),
                            offload=in_thread, webhook_secret=secrets.webhook_secret,
                            rescan_interval=timing.rescan_interval)
    runtime_events.add(reconciler)   # an invocation that finds its image gone has it built again
    debouncer = Debouncer(reconciler.request, delay=timing.debounce)
    watcher = Watcher(functions_dir, debouncer.touch, interval=timing.watch_interval)

    client, address = clients.redis, StreamAddress(config.stream, config.group, config.consumer)
    engine = build_engine(
        client, address, catalog=catalog, executor=executor, environment=function_environment, pins=pins,
        metrics=metrics, max_concurrency=config.max_concurrency, max_buffered_events=config.max_buffered_events,
        max_event_bytes=config.max_event_bytes, reclaim_interval=timing.reclaim_interval, min_idle=timing.min_idle,
        ledger=RunLedger(client, config.stream, host=config.consumer, pid=os.getpid(),
                         max_entries=config.runs_max_entries, max_age_ms=config.runs_max_age // 1_000_000,
                         unrecorded=metrics.runs_unrecorded.inc),
        journal=Path(state_path).parent / f"owed-{quote(config.consumer, safe='')}.jsonl")
    side_loops: dict[str, Service] = {
        "backlog": Backlog(client, address, metrics, interval=timing.backlog_interval),
        "scheduler": Scheduler(catalog, Publisher(client, config.stream, metrics))}
    side_loops["heartbeat"] = Heartbeat(client, config.stream, host=config.consumer, pid=os.getpid(),
                                        version=__version__, interval=timing.heartbeat_interval,
                                        pulse=partial(_pulse, reconciler, warm, metrics, engine))
    if config.retention:
        side_loops["retention"] = Retention(client, config.stream, config.retention)
    if config.metrics_addr:
        side_loops["metrics server"] = metrics_server(config.metrics_addr, metrics.registry)
    if config.console_addr:   # refused here, with one line, on a non-loopback address without a console token
        side_loops["console"] = console_server(config.console_addr, console_site(
            client, stream=config.stream, group=config.group, address=config.console_addr, secrets=secrets,
            functions=catalog.snapshot, max_event_bytes=config.max_event_bytes))
    return Process(metrics=metrics, catalog=catalog, pins=pins, leftovers=leftovers, executor=executor, warm=warm,
                   state=state, functions_before=functions_before, active_images=active_images,
                   reconciler=reconciler, debouncer=debouncer, watcher=watcher, engine=engine, side_loops=side_loops)


def _pulse(reconciler: Reconciler, warm: WarmExecutor, metrics: Metrics, engine: Engine) -> Pulse:
    """What the worker's heartbeat says it holds now."""
    statuses = sorted(reconciler.statuses.values(), key=lambda status: status.name)
    in_flight = metrics.registry.get_sample_value("in_flight_invocations") or 0
    return Pulse(functions=[function_state(status) for status in statuses],
                 warm_containers=sum(warm.containers().values()), in_flight=int(in_flight),
                 buffered=engine.buffer.used)


def listen_webhook(config: Config, secrets_dir: str | Path | None = None) -> Service | None:
    """The webhook server, listening on GIT_WEBHOOK_ADDR; None (logged) when it is not enabled.

    A port that cannot be bound raises WebhookBindError: the start stops."""
    service: Service | None = webhook_service(
        config.webhook_addr, secrets=FileSecretStore(secrets_dir) if secrets_dir else None)
    return service


def _one_observer(observers: list[seams.Observer]) -> seams.Observer:
    return observers[0] if len(observers) == 1 else Observers(observers)


class Observers:
    """Several observers as one: each event goes to every one of them, in order."""

    def __init__(self, observers: Sequence[seams.Observer]) -> None:
        self.observers = tuple(observers)

    def received(self, count: int) -> None:
        for observer in self.observers:
            observer.received(count)

    def matched(self, function: str) -> None:
        for observer in self.observers:
            observer.matched(function)

    def invocation_started(self, attempt: Attempt) -> None:
        for observer in self.observers:
            observer.invocation_started(attempt)

    def invocation_finished(self, attempt: Attempt, outcome: Outcome | None) -> None:
        for observer in self.observers:
            observer.invocation_finished(attempt, outcome)

    def invocation_expired(self, attempt: Attempt) -> None:
        for observer in self.observers:
            observer.invocation_expired(attempt)

    def limit_waited(self, function: str, limit: Limit, seconds: float) -> None:
        for observer in self.observers:
            observer.limit_waited(function, limit, seconds)

    def settled(self, settlement: Settlement, count: int) -> None:
        for observer in self.observers:
            observer.settled(settlement, count)

    def expired(self, function: str) -> None:
        for observer in self.observers:
            observer.expired(function)

    def ran_twice(self, attempt: Attempt) -> None:
        for observer in self.observers:
            observer.ran_twice(attempt)
