"""The webhook's sync: ``relay git sync`` run as a child process, exactly as an operator runs it.

A child keeps git, paramiko and the file copying off the gevent hub (nothing
in the sync blocks event processing), holds the same sync lock as a manual
run, and can be killed cleanly at shutdown or on a timeout. Its output
lines become log lines; the running Relay's reconciler picks the new
/functions up by itself.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import relay

log = logging.getLogger("relay.gitsync")

SYNC_TIMEOUT = 15 * 60.0  # seconds; a sync that hangs longer is killed


def sync_command() -> list[str]:
    return [sys.executable, "-m", "relay", "git", "sync"]


def child_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment, with Relay's own code first on the child's path (inside
    relay.pyz that is the extraction directory, which also holds the dependencies)."""
    environ = dict(os.environ if environ is None else environ)
    root = str(Path(relay.__file__).resolve().parent.parent)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, environ.get("PYTHONPATH")]))
    return environ


def run_sync_process(timeout: float = SYNC_TIMEOUT) -> bool:
    log.info("Git sync started", extra={"trigger": "webhook"})
    started = time.monotonic()
    try:
        result = subprocess.run(sync_command(), env=child_environment(), stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        log.error("Git sync timed out and was killed", extra={"timeout": f"{timeout:g}s"})
        return False
    except OSError as error:
        log.error("Git sync could not start", extra={"error": error.strerror or str(error)})
        return False
    duration = f"{time.monotonic() - started:.2f}s"
    for line in result.stdout.splitlines():
        if line.strip():
            log.info("Git sync", extra={"output": line.strip()})
    problems = [line.strip().removeprefix("relay git sync: ") for line in result.stderr.splitlines() if line.strip()]
    if result.returncode == 0:
        for line in problems:
            log.warning("Git sync", extra={"output": line})
        log.info("Git sync finished", extra={"duration": duration})
        return True
    log.error("Git sync failed", extra={"exit_code": result.returncode, "duration": duration,
                                        "error": " ".join(problems) or "no output"})
    return False
