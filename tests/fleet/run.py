"""One fleet run: services, three workers, the producer and the faults, then the verdict.

With *cold*, every function runs cold (no ``warm:`` block). With
*max_duplicates* (a percentage), the verdict fails a run whose duplicates
are more than that share of its executions; each duplicate's account (when
its executions ran, on which worker, the fault it met) is written to
``duplicates.txt`` in the run directory.

With *sentinel*, Redis is a primary, a replica and three Sentinels
(tests/support/sentinel.py): the workers find the primary through the
Sentinels, the producer waits for a replica to confirm each add, the two Redis
faults are failovers, and the verdict also checks that both data nodes agree.
"""

import random
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.fleet.errors import FleetError
from tests.fleet.faults import Faults
from tests.fleet.functions import write_functions
from tests.fleet.producer import Producer, ReplicatedProducer
from tests.fleet.services import PersistentRedis, PrivateDocker
from tests.fleet.verdict import judge, judge_replicas, undelivered
from tests.fleet.workers import FleetWorker, prepare_mount_points, worker_environment
from tests.support.sentinel import SentinelRedis

HOSTNAMES = ("fleet-a", "fleet-b", "fleet-c")
BASE_IMAGES = ("python:3.14-slim", "node:24-alpine")
DRAIN_TIMEOUT = 25 * 60
DEFAULT_ROOT = Path("/var/tmp/relay-fleet")
KEEP_RUNS = 3   # run directories (logs, Redis files) kept for a look afterwards


@dataclass
class RunReport:
    verdict: object
    seconds: float
    drain_seconds: float
    faults: list
    exit_codes: dict
    restarts: int
    exits: int          # of those restarts, after the worker exited on its own
    retried_adds: int
    error_lines: int
    run_dir: Path
    notes: list = field(default_factory=list)
    sentinel: bool = False
    cold: bool = False
    fault_windows: list = field(default_factory=list)   # faults.FaultWindow
    failovers: list = field(default_factory=list)   # faults.Failover, under Sentinel
    unconfirmed_adds: int = 0


class Fleet:
    def __init__(self, pyz, root, seed, sentinel=False, cold=False, max_duplicates=None):
        self.root = Path(root)
        self.run_dir = self.root / time.strftime("run-%Y%m%d-%H%M%S")
        self.rng = random.Random(seed)
        self.pyz = pyz
        self.docker = PrivateDocker(self.root / "docker")
        self.sentinel = sentinel
        self.cold = cold
        self.max_duplicates = max_duplicates
        self.redis = (SentinelRedis(self.run_dir / "redis", persistent=True) if sentinel
                      else PersistentRedis(self.run_dir / "redis"))
        self.workers = []
        self.producer = None

    def run(self, events, seconds, progress=print):
        started = time.monotonic()
        try:
            return self._run(events, seconds, progress, started)
        finally:
            for worker in self.workers:
                if worker.process and worker.process.poll() is None:
                    worker.process.kill()
            self.redis.stop()
            self.docker.stop()

    def _run(self, events, seconds, progress, started):
        for old in sorted(self.root.glob("run-*"))[:-KEEP_RUNS + 1 or None]:
            shutil.rmtree(old, ignore_errors=True)
        progress(f"fleet: run directory {self.run_dir}")
        self.docker.forget_networking()
        self.docker.start()
        self.docker.load_images(BASE_IMAGES)
        self._clean_engine()
        self.redis.start()
        functions_dir = self.run_dir / "functions"
        write_functions(functions_dir, cold=self.cold)
        prepare_mount_points()
        redis_uri, extra = (self.redis.uri(), self.redis.environment()) if self.sentinel else (self.redis.address, {})
        environment = worker_environment(redis_uri, self.docker.host, self.run_dir / "pyz-cache", **extra)
        self.workers = [FleetWorker(name, self.pyz, functions_dir, self.run_dir, environment) for name in HOSTNAMES]
        for worker in self.workers:
            worker.start()
        for worker in self.workers:
            worker.wait_started()
        progress(f"fleet: {len(self.workers)} workers started in {time.monotonic() - started:.0f}s; "
                 f"adding {events} events over {seconds}s under faults")

        producer = ReplicatedProducer if self.sentinel else Producer
        self.producer = producer(self.redis_client(socket_timeout=5, socket_connect_timeout=2), self.run_dir.name,
                                 self.rng)
        faults = Faults(self, self.rng)
        supervising = threading.Event()
        supervisor = threading.Thread(target=self._supervise, args=(supervising, progress), daemon=True)
        supervisor.start()
        threads = [threading.Thread(target=self.producer.run, args=(events, seconds), daemon=True),
                   threading.Thread(target=faults.run, args=(seconds / 150,), daemon=True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if faults.errors:
            raise FleetError(f"a fault could not be applied: {faults.errors[0]}")
        for name, at, took, detail in faults.record:
            progress(f"fleet: fault at {at:6.1f}s ({took:4.1f}s): {name} — {detail}")

        drain_started = time.monotonic()
        self._wait_drained(progress)
        drain_seconds = time.monotonic() - drain_started
        supervising.set()
        supervisor.join()
        exit_codes = {worker.hostname: worker.stop() for worker in self.workers}
        progress(f"fleet: drained in {drain_seconds:.0f}s; workers stopped {exit_codes}")

        client = self.redis_client()
        outputs = [path for worker in self.workers for path in worker.outputs()]
        verdict = judge(client=client, produced=self.producer.events, output_paths=outputs, hostnames=HOSTNAMES,
                        fault_windows=faults.windows, max_duplicates=self.max_duplicates)
        client.close()
        self._write_duplicates(verdict, faults.origin, progress)
        if self.sentinel:
            self._judge_replicas(verdict)
        for hostname, code in exit_codes.items():
            if code != 0:
                verdict.fail(f"worker {hostname} exited with {code} after SIGTERM")
        self._judge_engine(verdict)
        return RunReport(
            verdict=verdict, seconds=time.monotonic() - started, drain_seconds=drain_seconds,
            faults=faults.record, exit_codes=exit_codes,
            restarts=sum(worker.incarnation - 1 for worker in self.workers),
            exits=sum(len(worker.exits) for worker in self.workers),
            retried_adds=self.producer.retried_adds,
            error_lines=sum(log.read_text(errors="replace").count("level=ERROR")
                            for worker in self.workers for log in worker.logs()),
            run_dir=self.run_dir, sentinel=self.sentinel, cold=self.cold, fault_windows=faults.windows,
            failovers=faults.failovers,
            unconfirmed_adds=self.producer.unconfirmed_adds)

    def redis_client(self, **options):
        """A client of the fleet's Redis; under Sentinel it follows the primary."""
        return self.redis.sentinel_client(**options) if self.sentinel else self.redis.client(**options)

    def _write_duplicates(self, verdict, origin, progress):
        """Each duplicate on a line of duplicates.txt, its times in seconds after the producer started."""
        if verdict.duplicate_account:
            path = self.run_dir / "duplicates.txt"
            path.write_text("".join(f"{duplicate.describe(origin or 0.0)}\n"
                                    for duplicate in verdict.duplicate_account))
            progress(f"fleet: {len(verdict.duplicate_account)} duplicates accounted for in {path}")

    def _judge_replicas(self, verdict):
        primary, replica = self.redis.primary(), self.redis.replica()
        clients = [self.redis.client(node, socket_timeout=10) for node in (primary, replica)]
        judge_replicas(verdict, *clients, streams=("events", "relay:events:dlq"))
        for client in clients:
            client.close()

    def _supervise(self, done, progress):
        while not done.wait(1.0):
            for worker in self.workers:
                code = worker.restart_if_exited()
                if code is not None:
                    progress(f"fleet: worker {worker.hostname} exited with {code}; "
                             "restarted as a service manager would")

    def _clean_engine(self):
        """Each run starts from an engine without containers or function images,
        so the three workers build the images together, from cold."""
        containers = self.docker.docker("ps", "-aq").stdout.split()
        if containers:
            self.docker.docker("rm", "-f", *containers)
        images = self.docker.docker("images", "-q", "--filter", "label=relay.build.kind=function").stdout.split()
        if images:
            self.docker.docker("rmi", "-f", *sorted(set(images)))

    def _wait_drained(self, progress):
        """Until every entry was delivered and nothing is pending, three checks in a row."""
        client = self.redis_client(socket_timeout=5)
        deadline = time.monotonic() + DRAIN_TIMEOUT
        quiet, last_report = 0, 0.0
        while quiet < 3:
            if time.monotonic() > deadline:
                raise FleetError(f"the fleet did not drain within {DRAIN_TIMEOUT}s")
            try:
                pending = client.xpending("events", "relay")["pending"]
                lag = undelivered(client, "events", "relay")
            except redis.RedisError:
                pending = lag = None
            quiet = quiet + 1 if pending == 0 and lag == 0 else 0
            if time.monotonic() - last_report > 30:
                progress(f"fleet: draining: {pending} pending, {lag} not yet delivered")
                last_report = time.monotonic()
            time.sleep(1)
        client.close()

    def _judge_engine(self, verdict):
        containers = self.docker.docker(
            "ps", "-a", "--filter", "label=relay.function", "--format",
            '{{.ID}} {{.Status}} host={{.Label "relay.hostname"}} function={{.Label "relay.function"}} '
            'message={{.Label "relay.message_id"}} created={{.CreatedAt}}').stdout.splitlines()
        if containers:
            verdict.fail(f"{len(containers)} execution containers left behind: " + "; ".join(containers[:8]))
        dangling = self.docker.docker("images", "-q", "--filter", "dangling=true",
                                      "--filter", "label=relay.build.kind=function").stdout.split()
        if dangling:
            verdict.fail(f"{len(dangling)} dangling relay-fn images left behind")
