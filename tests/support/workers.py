"""Relay workers as real processes for end-to-end tests."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.relay_process import ROOT, base_env

HARNESS = ROOT / "tests" / "support" / "harness.py"


class Worker:
    """A Relay process whose stdout (handler output) and stderr (logs) go to files."""

    def __init__(self, command, env, directory, name):
        self.stdout_path = Path(directory) / f"{name}.out"
        self.stderr_path = Path(directory) / f"{name}.err"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=err)

    @property
    def stdout(self):
        return self.stdout_path.read_text(errors="replace")

    @property
    def stderr(self):
        return self.stderr_path.read_text(errors="replace")

    def wait_for(self, fragment, timeout=120, where="stderr", count=1):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if getattr(self, where).count(fragment) >= count:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        pytest.fail(f"{fragment!r} (x{count}) never appeared in {where}; exit={self.process.poll()}\n"
                    f"stderr:\n{self.stderr[-4000:]}\nstdout:\n{self.stdout[-2000:]}")

    def stop(self, signum=signal.SIGTERM, timeout=60):
        if self.process.poll() is None:
            self.process.send_signal(signum)
        return self.process.wait(timeout)

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def engine_env(redis_server, **overrides):
    env = base_env(REDIS_URI=redis_server.address, REDIS_STREAM="events", REDIS_GROUP="relay", **overrides)
    env["PYTHONPATH"] = str(ROOT)
    return env


def harness_command(functions_dir, consumer, reclaim=1.0, idle=2.0, state_db=None, **timing):
    """The harness; its state database defaults to relay-state/db.sqlite3 next to *functions_dir*,
    never the host's /var/lib/relay. *timing* sets other Timing fields (seconds)."""
    state_db = state_db or Path(functions_dir).parent / "relay-state" / "db.sqlite3"
    options = [f"state_db={state_db}", *(f"{name}={value}" for name, value in timing.items())]
    return [sys.executable, str(HARNESS), str(functions_dir), consumer, str(reclaim), str(idle), *options]


def namespaced_relay_command(functions_dir, state_dir, hostname, program=(sys.executable, "-m", "relay")):
    """``relay start`` (of *program*: the module, or ``python relay.pyz``) in a private mount and UTS
    namespace: the directories appear at the fixed paths /functions and /var/lib/relay, and the
    hostname (the consumer name) is *hostname*; the host's own paths are untouched."""
    for mount_point in ("/functions", "/var/lib/relay"):
        os.makedirs(mount_point, exist_ok=True)
    script = ('hostname "$1"; mount --bind "$2" /functions; mount --bind "$3" /var/lib/relay; shift 3; '
              'exec "$@"')
    return [shutil.which("unshare"), "--mount", "--uts", "--propagation", "private", "--", "sh", "-ec", script,
            "relay-e2e", hostname, str(functions_dir), str(state_dir), *program, "start"]


def write_function(root, name, template, files):
    directory = Path(root) / name
    directory.mkdir(parents=True)
    (directory / "template.yaml").write_text(template)
    for relative, text in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return directory


def with_private_paths(command, functions_dir, state_dir):
    """*command* in a private mount namespace where /functions and /var/lib/relay
    are *functions_dir* and *state_dir*; the hostname stays the machine's."""
    for directory in (functions_dir, state_dir):
        os.makedirs(directory, exist_ok=True)
    for mount_point in ("/functions", "/var/lib/relay"):
        os.makedirs(mount_point, exist_ok=True)
    script = 'mount --bind "$1" /functions; mount --bind "$2" /var/lib/relay; shift 2; exec "$@"'
    return [shutil.which("unshare"), "--mount", "--propagation", "private", "--", "sh", "-ec", script,
            "relay-test", str(functions_dir), str(state_dir), *command]


def publish(client, event, stream="events"):
    """XADD *event* (a dict) as the entry's JSON event field; its message id."""
    return client.xadd(stream, {"event": json.dumps(event)}).decode()


def pending(client, stream="events", group="relay"):
    return client.xpending(stream, group)["pending"]


def wait_until(condition, timeout=60, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")
