"""The orphan sweep: at start, remove the execution containers a previous
Relay process on this host left behind.

Only containers with a relay.function label *and* a relay.hostname label equal
to this worker's hostname are removed, running or exited. Another hostname's
containers (a live or crashed replica's) and non-Relay containers are never
touched, and nothing is pruned. The sweep is bounded: after the deadline it
stops and says how many were left.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from docker import APIClient, DockerClient
from docker.errors import APIError
from requests.exceptions import RequestException

from relay.runtime.containers import FUNCTION_LABEL, HOSTNAME_LABEL, remove_container, short

log = logging.getLogger("relay.runtime.sweep")

DEADLINE_SECONDS = 30.0


def sweep_orphans(docker_client: DockerClient, hostname: str, deadline_seconds: float = DEADLINE_SECONDS) -> int:
    """Remove this host's orphaned execution containers; return how many were removed.

    The work runs in a helper thread (a greenlet under gevent) so a hung
    engine cannot hold the caller past the deadline.
    """
    sweep = _Sweep(docker_client.api, hostname, time.monotonic() + deadline_seconds)
    worker = threading.Thread(target=sweep.run, name="relay-orphan-sweep", daemon=True)
    worker.start()
    worker.join(deadline_seconds)
    if worker.is_alive():
        sweep.stop = True
        log.warning("Orphan sweep did not finish in time; the rest stay for the next start",
                    extra={"hostname": hostname, "removed": sweep.removed, "deadline": f"{deadline_seconds:g}s"})
    elif sweep.found:
        log.info("Removed orphaned containers", extra={"hostname": hostname, "removed": sweep.removed,
                                                       "found": sweep.found})
    return sweep.removed


class _Sweep:
    def __init__(self, api: APIClient, hostname: str, deadline: float) -> None:
        self.api = api
        self.hostname = hostname
        self.deadline = deadline
        self.stop = False
        self.found = 0
        self.removed = 0

    def run(self) -> None:
        try:
            listed = self.api.containers(all=True, filters={
                "label": [FUNCTION_LABEL, f"{HOSTNAME_LABEL}={self.hostname}"]})
        except (APIError, RequestException) as error:
            log.warning("Orphan sweep cannot list containers", extra={"error": str(error)})
            return
        orphans = [entry for entry in listed if self._owned(entry.get("Labels") or {})]
        self.found = len(orphans)
        for entry in orphans:
            if self.stop or time.monotonic() >= self.deadline:
                return
            labels = entry.get("Labels") or {}
            if remove_container(self.api, entry["Id"], {"function": labels.get(FUNCTION_LABEL)}):
                self.removed += 1
                log.debug("Removed orphaned container", extra={
                    "container": entry["Id"][:12], "function": labels.get(FUNCTION_LABEL),
                    "handler": labels.get("relay.handler"), "state": entry.get("State")})

    def _owned(self, labels: Mapping[str, str]) -> bool:
        """Checked again here: the engine's filter is the first line, not the only one."""
        return FUNCTION_LABEL in labels and labels.get(HOSTNAME_LABEL) == self.hostname


LEFTOVER_RETRY_INTERVAL = 30.0  # seconds
UNCONFIRMED_CREATE_GRACE = 60.0  # seconds a create the engine never answered may still take to land


class Leftovers:
    """Execution containers whose removal failed because the engine could not
    be reached, removed again every interval until the engine confirms it.

    A container created just before an engine restart would otherwise stay
    (as "Created": AutoRemove only acts on containers that ran) until this
    worker restarts and sweeps its orphans. A create the engine never
    answered is known only by its name, and a hung engine may still carry
    it out later: such a name is kept until its grace period is over and
    the engine then says it is gone.
    """

    def __init__(self, docker_client: DockerClient, interval: float = LEFTOVER_RETRY_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._api = docker_client.api
        # container id or name → (log context, not gone before this time)
        self._references: dict[str, tuple[Mapping[str, object], float]] = {}
        self.interval = interval
        self.clock = clock
        self.stopping = threading.Event()

    def add(self, reference: str, context: Mapping[str, object] | None = None, grace: float = 0.0) -> None:
        self._references[reference] = (context or {}, self.clock() + grace)

    def __len__(self) -> int:
        return len(self._references)

    def retry(self) -> None:
        for reference, (context, settled_at) in list(self._references.items()):
            if remove_container(self._api, reference, context) and self.clock() >= settled_at:
                del self._references[reference]
                log.info("Removed a container left behind while the engine was unreachable",
                         extra={**context, "container": short(reference)})

    def loop(self) -> None:
        while not self.stopping.wait(self.interval):
            if self._references:
                self.retry()

    def stop(self) -> None:
        self.stopping.set()
