"""Relay as a subprocess, run exactly as an operator would: the command, its
environment (this one minus Relay's own variables) and the repository root."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def base_env(**overrides):
    """The environment of a Relay subprocess: this one minus Relay's own variables."""
    env = {key: value for key, value in os.environ.items()
           if key not in RELAY_VARIABLES and not key.startswith("DOCKER_")}
    env.update({key: value for key, value in overrides.items() if value is not None})
    return env


RELAY_VARIABLES = (
    "REDIS_URI", "REDIS_SENTINEL_PASSWORD", "REDIS_STREAM", "REDIS_GROUP", "REDIS_STREAM_RETENTION", "METRICS_ADDR",
    "GIT_WEBHOOK_ADDR", "LOG_LEVEL", "MAX_CONCURRENCY", "MAX_BUFFERED_EVENTS",
    "MAX_EVENT_BYTES", "CONSOLE_ADDR",
)


def relay_command(*args):
    return [sys.executable, "-m", "relay", *args]


def run_relay(*args, env=None, timeout=60, input=None):
    return subprocess.run(relay_command(*args), cwd=ROOT, env=env or base_env(), capture_output=True,
                          text=True, timeout=timeout, input=input)


class RelayProcess:
    """A Relay process (``relay start`` unless *command* says otherwise) whose log lines
    a test reads as they come."""

    def __init__(self, env, command=None):
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines = []

    def wait_for(self, fragment, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            if fragment in line:
                return line
        self.process.kill()
        pytest.fail(f"{fragment!r} never appeared; stderr so far:\n{''.join(self.lines)}")

    def stop(self, signum=signal.SIGTERM, timeout=30):
        self.process.send_signal(signum)
        _, rest = self.process.communicate(timeout=timeout)
        self.lines.extend(rest.splitlines(keepends=True))
        return self.process.returncode

    @property
    def stderr(self):
        return "".join(self.lines)
