"""The fleet's own services: a persistent redis-server and a private Docker engine.

Both can be stopped and started again on the same address, which is the point:
the faults restart them under a running fleet. Neither touches the machine's
default Redis or Docker engine, so the fleet can run beside other tests.
"""

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.fleet.errors import FleetError
from tests.support.redis_server import RedisServer


def _wait(check, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise FleetError(f"{what} within {timeout:g}s")


class PersistentRedis(RedisServer):
    """The suite's redis-server with the append-only file on and fsync on every
    write, so a SIGKILL loses nothing it acknowledged; DEBUG SLEEP allowed."""

    def __init__(self, directory):
        Path(directory).mkdir(parents=True, exist_ok=True)
        super().__init__(directory)
        self.extra_args = ["--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "local",
                           "--logfile", str(self.directory / "redis.log")]

    def kill(self):
        """SIGKILL: no shutdown, no final write; the AOF is all that is left."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def client(self, **options):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, **options)


class PrivateDocker:
    """A dockerd of the fleet's own (socket, data root and exec root under *root*).

    The data root outlives a run so the base images are loaded into it once;
    containers get no network, like the machine's own engine.
    """

    def __init__(self, root):
        self.root = Path(root)
        self.socket = self.root / "docker.sock"
        self.pidfile = self.root / "docker.pid"
        self.log = self.root / "dockerd.log"
        self.process = None

    @property
    def host(self):
        return f"unix://{self.socket}"

    def start(self):
        binary = shutil.which("dockerd") or "/usr/sbin/dockerd"
        if not os.path.exists(binary):
            raise FleetError("dockerd is not installed: run scripts/setup")
        self.root.mkdir(parents=True, exist_ok=True)
        self._kill_leftover()
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [binary, "--iptables=false", "--ip6tables=false", "--bridge=none", "--host", self.host,
                 "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"),
                 "--pidfile", str(self.pidfile)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        _wait(self.answers, 180, f"the fleet's dockerd did not answer on {self.host} (log: {self.log})")
        return self

    def answers(self):
        if self.process and self.process.poll() is not None:
            raise FleetError(f"the fleet's dockerd exited with {self.process.returncode} (log: {self.log})")
        try:
            return self.docker("info", check=False, timeout=10).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def stop(self):
        """SIGTERM, as a service manager restarting the engine does: running
        containers are stopped with it."""
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(120)

    def restart(self):
        self.stop()
        self.start()

    def forget_networking(self):
        """Drop the engine's network store before a fresh start. Every engine
        stop with running containers leaves their sandboxes in it, and each
        start removes those one by one (a second or more per hundred), which
        would slow every later restart of a data root that is reused."""
        shutil.rmtree(self.root / "data" / "network", ignore_errors=True)

    def _kill_leftover(self):
        """A dockerd left running on this root by an interrupted run holds its files."""
        try:
            pid = int(self.pidfile.read_text().strip())
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError):
            return
        _wait(lambda: not _alive(pid), 60, f"a leftover dockerd (pid {pid}) did not stop")

    def docker(self, *args, check=True, timeout=120, **options):
        result = subprocess.run(["docker", "-H", self.host, *args], capture_output=True, text=True,
                                timeout=timeout, **options)
        if check and result.returncode != 0:
            raise FleetError(f"docker {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def load_images(self, names):
        """Copy *names* from the machine's engine (scripts/setup made them) unless present."""
        missing = [name for name in names if self.docker("image", "inspect", name, check=False).returncode]
        if not missing:
            return
        save = subprocess.Popen(["docker", "save", *missing], stdout=subprocess.PIPE)
        load = subprocess.run(["docker", "-H", self.host, "load"], stdin=save.stdout, capture_output=True,
                              text=True, timeout=600)
        save.stdout.close()
        if save.wait(600) != 0 or load.returncode != 0:
            raise FleetError(f"could not copy {', '.join(missing)} into the fleet's engine "
                             f"(run scripts/setup first): {load.stderr.strip()}")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
