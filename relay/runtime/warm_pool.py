"""The warm executor: the warm containers of one worker, reused per function version.

A warm invocation takes an idle container of its function's version (same
image, network and environment) or starts one, runs on it, and gives it
back; a container is one invocation at a time. Limits:

- The dispatcher's slots bound the invocations of a warm function to
  ``warm.containers``, and every invocation to MAX_CONCURRENCY; the pool
  never holds more than *capacity* (MAX_CONCURRENCY) containers. To start one
  more at capacity it stops the least recently used idle one.
- Starting a container has its own bound (START_TIMEOUT); a start that
  fails or runs past it fails the invocation as an engine error would (not
  charged). A handler's timeout counts from the moment its event is handed
  to a ready container.
- A container is removed after ``warm.max_invocations`` invocations, after
  ``warm.idle`` without one, after any failure of the container itself
  (timeout, exit, protocol break), when its image is retired (a new version
  is active, or the function is gone), when a newer version of its function
  has been asked for, and when Relay stops.

Every container pins its image from before it is created until
it is removed, so image garbage collection never takes an image a warm
container uses. ``run`` never raises for a failing handler or engine error:
the Outcome says what happened, as it does for a cold invocation. It is the
peer of relay.runtime.cold.ColdExecutor; both fit the dispatcher's Executor
seam, and relay.runtime.executor.Router sends each invocation to one of them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TextIO

from docker import DockerClient
from docker.errors import DockerException, ImageNotFound
from requests.exceptions import RequestException

from relay.durations import format_duration
from relay.errors import ContainerExited, DeadlineExceeded, ExecutionError, ImageMissing, ProtocolBreak, RelayError
from relay.functions import ActiveFunction, Function
from relay.functions.runtimes import runtime_for
from relay.functions.template import Warm
from relay.runtime import context
from relay.runtime.containers import HostConfigs
from relay.runtime.events import NoObserver, RuntimeObserver
from relay.runtime.invocation import Invocation, Outcome, engine_error_text, is_unreachable, log_outcome
from relay.runtime.output import PrefixParts
from relay.runtime.pins import ImagePins
from relay.runtime.sweep import Leftovers
from relay.runtime.warm import Version, WarmContainer

log = logging.getLogger("relay.runtime.warm")

START_TIMEOUT = 30.0   # seconds from asking for a container to its bootstrap being ready
IDLE_CHECK = 1.0       # seconds between looks for idle containers to stop
CLOSE_TIMEOUT = 30.0   # seconds Relay's stop waits for its warm containers' removal

Removal = tuple[WarmContainer, str]   # a container to remove, and why


class WarmExecutor:
    def __init__(self, docker_client: DockerClient, hostname: str, output: TextIO, *, capacity: int,
                 host_configs: HostConfigs | None = None, pins: ImagePins | None = None,
                 leftovers: Leftovers | None = None,
                 functions: Callable[[], Iterable[ActiveFunction]] | None = None,
                 environment: Callable[[Function], Mapping[str, str]] | None = None,
                 observer: RuntimeObserver | None = None, start_timeout: float = START_TIMEOUT,
                 idle_check: float = IDLE_CHECK, clock: Callable[[], float] = time.monotonic) -> None:
        """*functions* (returning the active functions) and *environment* (a function's variables,
        secrets resolved) let ``loop`` start the containers of functions with ``warm.prestart``;
        *host_configs* are the HostConfigs shared with the cold executor (default: its own);
        *observer* hears every change of a function's number of containers
        (``warm_containers_changed``) and that a start found the image gone (``image_missing``)."""
        self._api = docker_client.api
        self._observer = observer if observer is not None else NoObserver()
        self._functions = functions
        self._environment = environment
        self._prestarted: set[str] = set()  # images whose containers were started at ready
        self._hostname = hostname
        self._output = output
        self._capacity = capacity
        self._pins = pins
        self._leftovers = leftovers
        self._start_timeout = start_timeout
        self._idle_check = idle_check
        self._clock = clock
        self._host_configs = host_configs if host_configs is not None else HostConfigs(self._api)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._waiting = 0        # checkouts waiting on _changed for room: notified only when there are some
        self._idle: list[WarmContainer] = []      # least recently used first
        self._members: dict[Version, int] = {}    # containers started, starting or running (not yet removed)
        self._latest: dict[str, Version] = {}     # function → the Version asked for last
        self._retired: set[str] = set()           # images whose containers go as soon as they are idle
        self._closed = False
        self._stopping = threading.Event()

    # --- one invocation -----------------------------------------------------------

    def run(self, invocation: Invocation) -> Outcome:
        """Run *invocation* on a warm container; an Outcome, as ColdExecutor.run returns."""
        outcome = self._run(invocation)
        log_outcome(invocation, outcome)
        return outcome

    def _run(self, invocation: Invocation) -> Outcome:
        started = self._clock()
        parts = (invocation.function, invocation.handler, invocation.message_id, invocation.event_id)
        warm = invocation.warm
        assert warm is not None, "a warm invocation carries its template's warm settings"

        container: WarmContainer | None = None

        def outcome(exit_code: int | None, *, timed_out: bool = False, error: str | None = None,
                    engine_unavailable: bool = False) -> Outcome:
            """Taken before the container is given back: once idle, another invocation may claim it."""
            stdout_tail = stderr_tail = ""
            container_id = None
            if container is not None:
                stdout_tail, stderr_tail = container.tails()
                container_id = container.container_id
            return Outcome(ok=exit_code == 0 and error is None, exit_code=exit_code,
                           duration=self._clock() - started, timed_out=timed_out, error=error,
                           engine_unavailable=engine_unavailable, stdout_tail=stdout_tail,
                           stderr_tail=stderr_tail, container_id=container_id, warm=True)

        def describe(text: str) -> str:
            return f'function "{invocation.function}" handler "{invocation.handler}": {text}'

        try:
            container = self._checkout(Version.of(invocation), invocation, parts)
        except ImageMissing as error:
            self._observer.image_missing(invocation.function, invocation.image)
            return outcome(None, engine_unavailable=True,
                           error=describe(f"no warm container could be started: {error}"))
        except (ExecutionError, DockerException, RequestException, OSError) as error:
            return outcome(None, engine_unavailable=True, error=describe(
                f"no warm container could be started: {engine_error_text(error, invocation.env)}"))
        try:
            deadline = time.monotonic() + invocation.timeout / 1e9
            variables = context.request_variables(invocation, time.time() + invocation.timeout / 1e9)
            if container.invoke(invocation.handler, variables, invocation.payload, parts, deadline):
                result = outcome(0)
            else:
                result = outcome(1, error=describe("the handler failed in its warm container"))
        except DeadlineExceeded:
            return outcome(None, timed_out=True, error=describe(
                f"timed out after {format_duration(invocation.timeout)}; its warm container was removed"))
        except (ContainerExited, ProtocolBreak) as error:
            # An exit whose code the engine cannot tell is the engine's trouble (it restarted), not the handler's.
            unknown = isinstance(error, ContainerExited) and container.exit_code is None
            return outcome(container.exit_code, engine_unavailable=unknown,
                           error=describe(f"{error}; the container is replaced"))
        except (DockerException, RequestException, OSError) as error:
            return outcome(None, engine_unavailable=is_unreachable(error), error=describe(
                f"the Docker engine failed during the invocation: {engine_error_text(error, invocation.env)}"))
        finally:
            self._checkin(container, warm)
            if container.output_failed is not None:
                log.warning("Handler output could not be written; lines were dropped",
                            extra={"function": invocation.function, "handler": invocation.handler,
                                   "error": str(container.output_failed)})
        return result

    def _checkout(self, version: Version, invocation: Invocation, prefix_parts: PrefixParts) -> WarmContainer:
        """An idle container of *version* that is still alive, or a new one started for it."""
        deadline = time.monotonic() + self._start_timeout
        while True:
            container, to_remove = self._claim(version, deadline)
            if container is not None:
                try:
                    container.forward_idle_output()
                    return container
                except (ContainerExited, ProtocolBreak, OSError) as error:
                    self._discard(container, f"it ended while idle: {error}")
            elif to_remove is None:
                return self._start(version, invocation.env, prefix_parts, deadline)
            else:
                for old, why in to_remove:
                    self._discard(old, why)

    def _claim(self, version: Version, deadline: float) -> tuple[WarmContainer | None, list[Removal] | None]:
        """One step of a checkout, under the lock: (an idle container, None), or (None, None) when
        room for a new one was reserved, or (None, [(container, why), ...]) to remove first."""
        with self._lock:
            while True:
                if self._closed:
                    raise ExecutionError("Relay is stopping")
                self._latest[version.function] = version
                container = self._take_idle(version)
                if container is not None:
                    return container, None
                stale = self._take_stale(version)
                if stale:
                    return None, [(old, "a newer version of its function is in use") for old in stale]
                if sum(self._members.values()) < self._capacity:
                    self._add_member(version)
                    return None, None
                if self._idle:
                    return None, [(self._idle.pop(0), "least recently used, to make room")]
                self._waiting += 1
                try:
                    room = self._changed.wait(timeout=max(0.0, deadline - time.monotonic()))
                finally:
                    self._waiting -= 1
                if not room:
                    raise ExecutionError(f"no room for a warm container within {self._start_timeout:g}s")

    def _take_idle(self, version: Version) -> WarmContainer | None:
        for index in range(len(self._idle) - 1, -1, -1):   # the most recently used: let the others idle out
            if self._idle[index].version == version:
                return self._idle.pop(index)
        return None

    def _take_stale(self, version: Version) -> list[WarmContainer]:
        """Idle containers of the same function but another version: a newer one is asked for now."""
        stale = [container for container in self._idle
                 if container.version.function == version.function and container.version != version]
        for container in stale:
            self._idle.remove(container)
        return stale

    def _start(self, version: Version, env: Mapping[str, str], prefix_parts: PrefixParts,
               deadline: float) -> WarmContainer:
        if self._pins is not None:
            self._pins.pin(version.image)
        container = WarmContainer(self._api, function=version.function, image=version.image, version=version,
                                  hostname=self._hostname, output=self._output, leftovers=self._leftovers)
        began = time.monotonic()
        try:
            container.start(command=runtime_for(version.runtime).warm_command, env=env,
                            host_config=self._host_configs.get(version.network), prefix_parts=prefix_parts,
                            deadline=deadline)
        except ImageNotFound:
            self._discard(container, "its image does not exist")
            raise ImageMissing(version.image) from None
        except DeadlineExceeded:
            self._discard(container, "it did not start in time")
            raise ExecutionError(f"it was not ready within {self._start_timeout:g}s") from None
        except BaseException:
            self._discard(container, "it did not start")
            raise
        log.debug("Warm container started", extra={
            "function": version.function, "container": container.name, "image": version.image,
            "duration": round(time.monotonic() - began, 3)})
        return container

    def _checkin(self, container: WarmContainer, warm: Warm) -> None:
        why = None
        with self._lock:
            version = container.version
            if self._closed:
                why = "Relay is stopping"
            elif container.broken:
                why = "it failed"
            elif container.served >= warm.max_invocations:
                why = f"it served {container.served} invocations (warm.max_invocations)"
            elif version.image in self._retired:
                why = "its version was retired"
            elif self._latest.get(version.function) != version:
                why = "a newer version of its function is in use"
            else:
                container.last_used = self._clock()
                container.idle_limit = warm.idle / 1e9
                self._idle.append(container)
                if self._waiting:
                    self._changed.notify()
        if why is not None:
            self._discard(container, why)

    def _discard(self, container: WarmContainer, why: str) -> None:
        """Remove *container*; it no longer counts against the capacity."""
        try:
            container.remove()
        finally:
            if self._pins is not None:
                self._pins.unpin(container.image)
            with self._lock:
                left = self._members.get(container.version, 0) - 1
                if left > 0:
                    self._members[container.version] = left
                else:
                    self._members.pop(container.version, None)
                self._changed.notify_all()
                self._count_changed(container.function)
            log.debug("Warm container removed", extra={
                "function": container.function, "container": container.name, "reason": why,
                "served": container.served})

    def _add_member(self, version: Version) -> None:
        """Under the lock: one more container of *version*."""
        self._members[version] = self._members.get(version, 0) + 1
        self._count_changed(version.function)

    def _count_changed(self, function: str) -> None:
        self._observer.warm_containers_changed(function, sum(count for version, count in self._members.items()
                                                             if version.function == function))

    # --- lifecycle ----------------------------------------------------------------

    def retire_image(self, image: str) -> None:
        """*image* is no longer a function's active version: its containers go once idle."""
        with self._lock:
            self._retired.add(image)
            retired = [container for container in self._idle if container.image == image]
            for container in retired:
                self._idle.remove(container)
        for container in retired:
            self._discard(container, "its version was retired")

    def stop_idle(self) -> None:
        """Remove the containers idle longer than their function's ``warm.idle``."""
        now = self._clock()
        with self._lock:
            expired = [container for container in self._idle if now - container.last_used >= container.idle_limit]
            for container in expired:
                self._idle.remove(container)
        for container in expired:
            self._discard(container, f"idle for {format_duration(int(container.idle_limit * 1e9))}")

    def containers(self) -> dict[str, int]:
        """How many warm containers each function has now (started, starting or running)."""
        with self._lock:
            counts: dict[str, int] = {}
            for version, count in self._members.items():
                counts[version.function] = counts.get(version.function, 0) + count
            return counts

    def prestart(self) -> None:
        """Start ``warm.containers`` containers for each active function version with ``warm.prestart``,
        once per version, as far as there is room."""
        functions, environment = self._functions, self._environment
        if functions is None or environment is None:
            return
        for active in functions():
            template = active.function.template
            if template.warm is None or not template.warm.prestart or active.image in self._prestarted:
                continue
            self._prestarted.add(active.image)
            try:
                env = environment(active.function)
            except RelayError as error:
                log.warning("Warm containers not prestarted", extra={"function": active.name, "error": str(error)})
                continue
            version = Version(active.name, active.image, template.runtime, template.network,
                              frozenset(env.items()))
            self._prestart_version(version, template.warm, env)

    def _prestart_version(self, version: Version, warm: Warm, env: Mapping[str, str]) -> None:
        started = 0
        for _ in range(warm.containers):
            with self._lock:
                if self._closed or sum(self._members.values()) >= self._capacity:
                    break
                self._latest.setdefault(version.function, version)
                self._add_member(version)
            try:
                container = self._start(version, env, (version.function,), time.monotonic() +
                                        self._start_timeout)
            except (ExecutionError, DockerException, RequestException, OSError) as error:
                log.warning("A warm container could not be prestarted", extra={
                    "function": version.function, "error": engine_error_text(error, dict(version.env))})
                break
            self._checkin(container, warm)
            started += 1
        log.debug("Warm containers prestarted", extra={"function": version.function, "containers": started})

    def loop(self) -> None:
        while not self._stopping.wait(self._idle_check):
            self.prestart()
            self.stop_idle()

    def stop(self) -> None:
        self._stopping.set()

    def close(self, timeout: float = CLOSE_TIMEOUT) -> bool:
        """Relay is stopping: remove every idle container now, and each running one when its invocation ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._changed.notify_all()
        removers = [threading.Thread(target=self._discard, args=(container, "Relay is stopping"), daemon=True)
                    for container in idle]
        for remover in removers:
            remover.start()
        deadline = time.monotonic() + timeout
        for remover in removers:
            remover.join(max(0.0, deadline - time.monotonic()))
        return not any(remover.is_alive() for remover in removers)
