"""The faults, each at a jittered moment of the run while events flow."""

import threading
import time

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


class Faults:
    def __init__(self, fleet, rng):
        self.fleet = fleet
        self.rng = rng
        self.record = []    # (name, started at, seconds, detail)
        self.windows = []   # (start, end) of each fault in Unix time, for the limits' verdict
        self.errors = []
        self.finished = threading.Event()

    def run(self, scale=1.0):
        start = time.monotonic()
        actions = {
            "malformed burst": self.malformed_burst,
            "SIGKILL a worker": self.kill_worker,
            "Redis DEBUG SLEEP 8": self.redis_sleep,
            "Docker engine restart": self.docker_restart,
            "Redis SIGKILL + restart (AOF)": self.redis_restart,
        }
        try:
            for at, name in FAULT_TIMELINE:
                moment = start + (at + self.rng.uniform(-4, 4)) * scale
                time.sleep(max(0.0, moment - time.monotonic()))
                began = time.monotonic()
                wall = time.time()
                detail = actions[name]()
                self.windows.append((wall, time.time()))
                self.record.append((name, round(began - start, 1), round(time.monotonic() - began, 1), detail))
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
