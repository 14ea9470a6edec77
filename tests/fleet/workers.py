"""Relay workers as operators run them: ``python3 relay.pyz start``, one per
host name, each in a private mount and UTS namespace where /functions is the
fleet's functions directory and /var/lib/relay the worker's own state."""

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.fleet.errors import FleetError
from tests.support.relay_process import base_env

NAMESPACE_SCRIPT = ('hostname "$1"; mount --bind "$2" /functions; mount --bind "$3" /var/lib/relay; '
                    'shift 3; exec "$@"')


def host_interpreter():
    """The interpreter behind this one (a venv's python is a link to it): relay.pyz
    must run on a bare CPython, without the project's virtual environment."""
    return os.path.realpath(sys.executable)


class FleetWorker:
    def __init__(self, hostname, pyz, functions_dir, run_dir, environment):
        self.hostname = hostname
        self.pyz = pyz
        self.functions_dir = functions_dir
        self.state_dir = Path(run_dir) / hostname / "state"
        self.log_dir = Path(run_dir) / hostname
        self.environment = environment
        self.process = None
        self.incarnation = 0
        self.exits = []     # exit codes of the incarnations that ended on their own
        self.lock = threading.Lock()
        self.state_dir.mkdir(parents=True, exist_ok=True)

    def command(self):
        return [shutil.which("unshare"), "--mount", "--uts", "--propagation", "private", "--",
                "sh", "-ec", NAMESPACE_SCRIPT, "relay-fleet", self.hostname, str(self.functions_dir),
                str(self.state_dir), host_interpreter(), str(self.pyz), "start"]

    def start(self):
        self.incarnation += 1
        stem = self.log_dir / f"run{self.incarnation}"
        with open(f"{stem}.out", "wb") as out, open(f"{stem}.err", "wb") as err:
            self.process = subprocess.Popen(self.command(), env=self.environment, stdout=out, stderr=err)

    def wait_started(self, timeout=300):
        log = self.log_dir / f"run{self.incarnation}.err"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if 'msg="Relay started"' in log.read_text(errors="replace"):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise FleetError(f"worker {self.hostname} did not start (exit {self.process.poll()}); "
                         f"log tail:\n{log.read_text(errors='replace')[-3000:]}")

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self, timeout=360):
        """SIGTERM and the exit code once Relay drained."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)
            return "killed after stop timeout"

    def restart_if_exited(self, pause=5.0):
        """What systemd's Restart=on-failure with RestartSec=5s does for deploy/relay.service:
        ``relay start`` exits 1 when Redis or Docker is unreachable at start, by design."""
        with self.lock:
            code = self.process.poll()
            if code is None:
                return None
            self.exits.append(code)
            time.sleep(pause)
            self.start()
            return code

    def outputs(self):
        return sorted(self.log_dir.glob("run*.out"))

    def logs(self):
        return sorted(self.log_dir.glob("run*.err"))


def worker_environment(redis_uri, docker_host, pyz_cache, **extra):
    return base_env(REDIS_URI=redis_uri, REDIS_STREAM="events", REDIS_GROUP="relay", DOCKER_HOST=docker_host,
                    MAX_CONCURRENCY="4", LOG_LEVEL="INFO", RELAY_PYZ_CACHE=str(pyz_cache), **extra)


def prepare_mount_points():
    for mount_point in ("/functions", "/var/lib/relay"):
        os.makedirs(mount_point, exist_ok=True)
