"""A Redis deployment under Sentinel on loopback: one primary, one replica, three Sentinels.

Each data node runs from a config file of its own, so the REPLICAOF and
CONFIG REWRITE that Sentinel sends during a failover survive a restart: a
killed primary started again comes back as what Sentinel last made it, as
on a real host. Used by the tests (tests/test_sentinel*.py) and by the fleet
harness (``python -m tests.fleet --sentinel``).
"""

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.support.redis_server import free_port

MASTER = "relaymaster"
DOWN_AFTER_MS = 2000       # how long a primary may be silent before a Sentinel calls it down
FAILOVER_TIMEOUT_MS = 10000


class SentinelError(Exception):
    pass


def _wait(check, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise SentinelError(f"{what} within {timeout:g}s")


def _redis_server():
    binary = shutil.which("redis-server")
    if binary is None:
        raise SentinelError("redis-server is not installed: run scripts/setup")
    return binary


def _listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


class Node:
    """One redis-server (a data node or a Sentinel) started from its own config file."""

    def __init__(self, name, directory, port, config, sentinel=False):
        self.name = name
        self.directory = Path(directory)
        self.port = port
        self.sentinel = sentinel
        self.process = None
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config_path = self.directory / ("sentinel.conf" if sentinel else "redis.conf")
        self.config_path.write_text(config)

    @property
    def address(self):
        return ("127.0.0.1", self.port)

    @property
    def log(self):
        return self.directory / "redis.log"

    def start(self):
        args = [_redis_server(), str(self.config_path)] + (["--sentinel"] if self.sentinel else [])
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        _wait(lambda: self._alive() and _listening(self.port), 10, f"{self.name} did not listen on {self.port}")
        return self

    def _alive(self):
        if self.process.poll() is not None:
            raise SentinelError(f"{self.name} exited with {self.process.returncode} (log: {self.log})")
        return True

    @property
    def running(self):
        return self.process is not None and self.process.poll() is None

    def kill(self):
        """SIGKILL: a host that dies; the append-only file is all that is left."""
        if self.running:
            self.process.kill()
            self.process.wait(10)

    def freeze(self):
        """SIGSTOP: a host that stops answering without closing a connection."""
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self):
        self.process.send_signal(signal.SIGCONT)

    def stop(self):
        if self.running:
            self.thaw()
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


class SentinelRedis:
    """A primary, a replica and three Sentinels monitoring them as MASTER.

    *password* protects the data nodes (requirepass, masterauth and
    Sentinel's auth-pass); *sentinel_password* the Sentinels themselves.
    With *persistent*, the data nodes fsync an append-only file on every
    write, so a SIGKILL loses nothing they acknowledged.
    """

    def __init__(self, directory, *, password=None, sentinel_password=None, persistent=False, master=MASTER,
                 down_after_ms=DOWN_AFTER_MS):
        self.directory = Path(directory)
        self.password = password
        self.sentinel_password = sentinel_password
        self.master = master
        ports = [free_port() for _ in range(5)]
        self.data = [Node(f"redis-{index}", self.directory / f"redis-{index}", port,
                          self._data_config(index, port, ports[0], persistent))
                     for index, port in enumerate(ports[:2])]
        self.sentinels = [Node(f"sentinel-{index}", self.directory / f"sentinel-{index}", port,
                               self._sentinel_config(index, port, ports[0], down_after_ms), sentinel=True)
                          for index, port in enumerate(ports[2:])]

    def _data_config(self, index, port, primary_port, persistent):
        lines = [f"port {port}", "bind 127.0.0.1", f'dir "{self.directory / f"redis-{index}"}"',
                 'logfile "redis.log"', 'save ""', "repl-diskless-sync yes", "repl-diskless-sync-delay 0",
                 "enable-debug-command local"]
        lines += ["appendonly yes", "appendfsync always"] if persistent else ["appendonly no"]
        if self.password:
            lines += [f"requirepass {self.password}", f"masterauth {self.password}"]
        if index:
            lines.append(f"replicaof 127.0.0.1 {primary_port}")
        return "\n".join(lines) + "\n"

    def _sentinel_config(self, index, port, primary_port, down_after_ms):
        lines = [f"port {port}", "bind 127.0.0.1", f'dir "{self.directory / f"sentinel-{index}"}"',
                 'logfile "redis.log"',
                 f"sentinel monitor {self.master} 127.0.0.1 {primary_port} 2",
                 f"sentinel down-after-milliseconds {self.master} {down_after_ms}",
                 f"sentinel failover-timeout {self.master} {FAILOVER_TIMEOUT_MS}",
                 f"sentinel parallel-syncs {self.master} 1"]
        if self.password:
            lines.append(f"sentinel auth-pass {self.master} {self.password}")
        if self.sentinel_password:
            lines += [f"requirepass {self.sentinel_password}", f"sentinel sentinel-pass {self.sentinel_password}"]
        return "\n".join(lines) + "\n"

    # --- addresses ---

    def uri(self, *, login=None, db=None, scheme="redis+sentinel"):
        """REDIS_URI for Relay; *login* is "user:password@"-less text such as ":pw" or "user:pw"."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.sentinels)
        at = f"{login}@" if login else ""
        return f"{scheme}://{at}{hosts}/{self.master}" + (f"/{db}" if db is not None else "")

    def environment(self):
        """The variables besides REDIS_URI a Relay process needs for these Sentinels."""
        return {"REDIS_SENTINEL_PASSWORD": self.sentinel_password} if self.sentinel_password else {}

    # --- lifecycle ---

    def start(self):
        for node in self.data:
            node.start()
        for node in self.sentinels:
            node.start()
        self.wait_settled()
        return self

    def stop(self):
        for node in self.sentinels + self.data:
            node.stop()

    def wait_settled(self, timeout=60):
        """Until every Sentinel agrees on a reachable primary with one linked replica and knows the
        other two Sentinels: a failover can then be decided and carried out."""
        def settled():
            primary = self.primary_address()
            if primary is None:
                return False
            for sentinel in self.sentinels:
                state = self._sentinel_client(sentinel).sentinel_master(self.master)
                if (state["is_sdown"] or state["is_odown"] or state["num-other-sentinels"] != 2
                        or state["num-slaves"] != 1 or (state["ip"], state["port"]) != primary):
                    return False
                replicas = self._sentinel_client(sentinel).sentinel_slaves(self.master)
                if [(r["ip"], r["port"], r["is_sdown"], r["master-link-status"]) for r in replicas] != [
                        (*self.replica().address, False, "ok")]:
                    return False
            return self.replica_linked()
        _wait(lambda: _quietly(settled), timeout, "the Sentinels did not agree on a primary with a linked replica")

    # --- roles ---

    def primary_address(self):
        """(host, port) of the primary the first answering Sentinel names, or None."""
        for sentinel in self.sentinels:
            if not sentinel.running:
                continue
            try:
                reply = self._sentinel_client(sentinel).execute_command(
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master)
            except OSError:
                continue
            except Exception:   # redis.RedisError: a Sentinel still starting
                continue
            if reply:
                return reply[0].decode(), int(reply[1])
        return None

    def sentinel_state(self, index):
        """What Sentinel *index* knows of the master (redis-py's parsed SENTINEL MASTER)."""
        return self._sentinel_client(self.sentinels[index]).sentinel_master(self.master)

    def node_at(self, address):
        return next(node for node in self.data if node.address == tuple(address))

    def primary(self):
        return self.node_at(self.primary_address())

    def replica(self):
        primary = self.primary()
        return next(node for node in self.data if node is not primary)

    def replica_linked(self):
        replica = self.replica()
        if not replica.running:
            return False
        info = self.client(replica).info("replication")
        return info.get("role") == "slave" and info.get("master_link_status") == "up"

    # --- clients ---

    def client(self, node=None, **options):
        """A plain client of *node* (default: the current primary)."""
        import redis

        node = node or self.primary()
        return redis.Redis(host="127.0.0.1", port=node.port, password=self.password, **options)

    def _sentinel_client(self, node):
        import redis

        return redis.Redis(host="127.0.0.1", port=node.port, password=self.sentinel_password,
                           socket_timeout=2, socket_connect_timeout=2)

    def sentinel_client(self, **options):
        """A client that follows the primary through the Sentinels, as a producer would."""
        from redis.sentinel import Sentinel

        sentinel_kwargs = {"password": self.sentinel_password, "socket_timeout": 2, "socket_connect_timeout": 2}
        sentinel = Sentinel([node.address for node in self.sentinels], sentinel_kwargs=sentinel_kwargs)
        return sentinel.master_for(self.master, password=self.password, **options)

    # --- faults ---

    def kill_primary(self):
        """SIGKILL the primary; returns it (start it again with ``node.start()``)."""
        primary = self.primary()
        primary.kill()
        return primary

    def wait_failover(self, old, timeout=60):
        """Seconds until every Sentinel names a primary other than *old* and that node is a primary."""
        started = time.monotonic()

        def promoted():
            addresses = set()
            for sentinel in self.sentinels:
                reply = self._sentinel_client(sentinel).execute_command(
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master)
                addresses.add((reply[0].decode(), int(reply[1])))
            if len(addresses) != 1 or addresses == {old.address}:
                return False
            return self.client(self.node_at(addresses.pop())).info("replication").get("role") == "master"
        _wait(lambda: _quietly(promoted), timeout, f"no failover away from {old.name}")
        return time.monotonic() - started

    def failover(self, timeout=60):
        """SENTINEL FAILOVER: a switchover an operator asks for; seconds until the replica is primary."""
        old = self.primary()
        self._sentinel_client(self.sentinels[0]).execute_command("SENTINEL", "FAILOVER", self.master)
        return self.wait_failover(old, timeout)


def _quietly(check):
    """*check*(), with a connection or reply error meaning "not yet"."""
    import redis

    try:
        return check()
    except (redis.RedisError, OSError, StopIteration):
        return False

