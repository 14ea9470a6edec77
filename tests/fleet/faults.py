"""The faults, each at a jittered moment of the run while events flow."""

import threading
import time
from dataclasses import dataclass

FAULT_TIMELINE = (   # seconds after the producer starts, name
    (10, "malformed burst"),
    (25, "SIGKILL a worker"),
    (50, "Redis DEBUG SLEEP 8"),
    (70, "Docker engine restart"),
    (90, "malformed burst"),
    (105, "Redis SIGKILL + restart (AOF)"),
    (125, "SIGKILL a worker"),
    (140, "malformed burst"),
)
# Under Sentinel (--sentinel) the two Redis faults become failovers: the second
# one makes the first primary primary again.
SENTINEL_FAULTS = {"Redis DEBUG SLEEP 8": "SIGKILL the primary", "Redis SIGKILL + restart (AOF)": "failover back"}
SENTINEL_TIMELINE = tuple((at, SENTINEL_FAULTS.get(name, name)) for at, name in FAULT_TIMELINE)
REJOIN_PAUSE = 3    # seconds between the promotion and starting the killed primary again
HARMLESS = ("malformed burst",)   # faults that only add entries: none can make a handler run twice


@dataclass
class FaultWindow:
    """When a fault was applied, in Unix time; *at* is its moment in seconds after the producer started,
    and *host* the worker it hit when it hit only one (a worker SIGKILL)."""

    name: str
    start: float
    end: float
    at: float = 0.0
    host: str | None = None

    @property
    def label(self):
        return f"{self.name}{f' {self.host}' if self.host else ''} at {self.at:.0f}s"


@dataclass
class Failover:
    killed: str         # the data node that was primary
    promoted: str
    seconds: float      # from the SIGKILL until every Sentinel named the promoted node and it was primary
    rejoined: float     # from starting the killed node again until it was a linked replica


class Faults:
    def __init__(self, fleet, rng):
        self.fleet = fleet
        self.rng = rng
        self.record = []    # (name, started at, seconds, detail)
        self.windows = []   # FaultWindow of each fault, for the limits' verdict and the duplicates' account
        self.origin = None  # Unix time the timeline started at (the producer's start)
        self.failovers = []  # Failover, under Sentinel
        self.errors = []
        self.finished = threading.Event()

    def run(self, scale=1.0):
        start, self.origin = time.monotonic(), time.time()
        actions = {
            "malformed burst": self.malformed_burst,
            "SIGKILL a worker": self.kill_worker,
            "Redis DEBUG SLEEP 8": self.redis_sleep,
            "Docker engine restart": self.docker_restart,
            "Redis SIGKILL + restart (AOF)": self.redis_restart,
            "SIGKILL the primary": self.kill_primary,
            "failover back": self.kill_primary,
        }
        timeline = SENTINEL_TIMELINE if self.fleet.sentinel else FAULT_TIMELINE
        try:
            for at, name in timeline:
                moment = start + (at + self.rng.uniform(-4, 4)) * scale
                time.sleep(max(0.0, moment - time.monotonic()))
                began = time.monotonic()
                wall = time.time()
                detail = actions[name]()
                offset = round(began - start, 1)
                self.windows.append(FaultWindow(name, wall, time.time(), offset,
                                                detail if name == "SIGKILL a worker" else None))
                self.record.append((name, offset, round(time.monotonic() - began, 1), detail))
        except Exception as error:  # reported by the run; the fleet goes on without the rest
            self.errors.append(f"{type(error).__name__}: {error}")
        finally:
            self.finished.set()

    def malformed_burst(self):
        return f"{self.fleet.producer.malformed_burst()} entries"

    def kill_worker(self):
        worker = self.rng.choice(self.fleet.workers)
        with worker.lock:
            worker.kill()
            time.sleep(2)
            worker.start()
        return worker.hostname

    def redis_sleep(self):
        client = self.fleet.redis.client(socket_timeout=30)
        client.execute_command("DEBUG", "SLEEP", "8")
        client.close()
        return "server blocked 8s"

    def docker_restart(self):
        self.fleet.docker.restart()
        return "SIGTERM dockerd, start again"

    def redis_restart(self):
        self.fleet.redis.kill()
        time.sleep(3)
        self.fleet.redis.start()
        return "down ~3s"

    def kill_primary(self):
        """SIGKILL the primary, wait for the Sentinels to promote the replica, start the killed
        node again a little later (it comes back as a replica) and wait until it is linked."""
        redis = self.fleet.redis
        old = redis.kill_primary()
        seconds = redis.wait_failover(old)
        promoted = redis.primary()
        time.sleep(REJOIN_PAUSE)
        began = time.monotonic()
        old.start()
        redis.wait_settled(timeout=120)
        failover = Failover(old.name, promoted.name, round(seconds, 1), round(time.monotonic() - began, 1))
        self.failovers.append(failover)
        return (f"{failover.killed} killed, {failover.promoted} promoted in {failover.seconds:.1f}s; "
                f"{failover.killed} a linked replica again {failover.rejoined:.1f}s after its start")
