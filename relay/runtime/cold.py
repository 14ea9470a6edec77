"""The cold executor: one handler invocation in one throw-away container.

    create (hardened, AutoRemove, labelled) → attach → register wait → start
    → event on stdin → forward output until the stream closes → exit code

The rule's timeout bounds all of it: every wait on the engine has the
remaining time as its socket timeout, and when it runs out the container is
killed (force-removed) and the invocation is a failure. AutoRemove deletes
containers that exit; explicit removal is only the backstop for everything
else -- a failed start, a timeout, an engine error, or the caller cancelling
(a greenlet killed mid-run) -- and is idempotent.

``ColdExecutor.run`` blocks the calling thread or greenlet, never raises for
a failing handler or an engine error (the Outcome says what happened, with
the container's id and the tails of its output), and is safe to call from
many greenlets or threads at once. Its peer for
functions with ``warm:`` is relay.runtime.warm_pool.WarmExecutor;
relay.runtime.executor.Router sends each invocation to one of them.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import nullcontext
from typing import TextIO

from docker import DockerClient
from docker.errors import DockerException, ImageNotFound, NotFound
from requests.exceptions import RequestException

from relay.durations import format_duration
from relay.errors import ExecutionError, ImageMissing, reason
from relay.runtime import context, protocol
from relay.runtime.containers import USER, HostConfigs, container_name, labels, remove_container
from relay.runtime.events import NoObserver, RuntimeObserver
from relay.runtime.invocation import (
    Invocation,
    Outcome,
    engine_error_text,
    is_unreachable,
    log_attributes,
    log_outcome,
    redact,
)
from relay.runtime.output import STDERR, STDOUT, OutputForwarder, prefix
from relay.runtime.pins import ImagePins
from relay.runtime.sweep import UNCONFIRMED_CREATE_GRACE, Leftovers

log = logging.getLogger("relay.runtime.executor")


class ColdExecutor:
    def __init__(self, docker_client: DockerClient, hostname: str, output: TextIO | None = None, *,
                 host_configs: HostConfigs | None = None, pins: ImagePins | None = None,
                 leftovers: Leftovers | None = None, observer: RuntimeObserver | None = None) -> None:
        """*output* receives the handlers' lines (default: sys.stdout as it is now);
        *host_configs* are the HostConfigs shared with the warm executor (default: its own);
        *pins*, when given, protects each invocation's image from garbage collection while
        it runs; *leftovers*, when given, takes the containers that could not be removed
        because the engine was unreachable; *observer* hears ``image_missing`` when an
        invocation finds its function's image gone from the engine (that invocation is not
        charged)."""
        self._api = docker_client.api
        self._hostname = hostname
        self._output = output if output is not None else sys.stdout
        self._host_configs = host_configs if host_configs is not None else HostConfigs(self._api)
        self._pins = pins
        self._leftovers = leftovers
        self._observer = observer if observer is not None else NoObserver()

    def run(self, invocation: Invocation) -> Outcome:
        started = time.monotonic()
        with self._pins.holding(invocation.image) if self._pins is not None else nullcontext():
            outcome = _Execution(self, invocation, started).run()
        log_outcome(invocation, outcome)
        return outcome


class _Execution:
    def __init__(self, executor: ColdExecutor, invocation: Invocation, started: float) -> None:
        self.executor = executor
        self.api = executor._api
        self.invocation = invocation
        self.started = started
        self.deadline = started + invocation.timeout / 1e9
        self.wall_deadline = time.time() + (self.deadline - time.monotonic())   # RELAY_DEADLINE
        self.container_id: str | None = None
        self.forwarder: OutputForwarder | None = None
        self.name = container_name(invocation.function)
        self.unreachable = False

    def run(self) -> Outcome:
        invocation = self.invocation
        forwarder = self.forwarder = OutputForwarder(self.executor._output, prefix(
            invocation.function, invocation.handler, invocation.message_id, invocation.event_id))
        handle = wait = None
        exited = False
        try:
            container_id = self.container_id = self._create()
            handle, sock = protocol.attach(self.api, container_id)
            wait = protocol.register_wait(self.api, container_id, self.deadline)
            self._start(container_id)
            protocol.send_stdin(sock, invocation.payload, self.deadline)
            protocol.read_until_closed(sock, forwarder.feed, self.deadline)
            exit_code = protocol.exit_status(self.api, wait, self.deadline)
            exited = True
        except protocol.DeadlineExceeded:
            return self._outcome(None, timed_out=True,
                                 error=self._describe(f"timed out after {format_duration(invocation.timeout)}"))
        except ImageMissing as error:
            self.executor._observer.image_missing(invocation.function, invocation.image)
            return self._outcome(None, engine_unavailable=True, error=self._describe(str(error)))
        except ExecutionError as error:
            return self._outcome(None, error=self._describe(redact(str(error), invocation.env)))
        except (DockerException, RequestException, OSError) as error:
            unreachable = self.unreachable = is_unreachable(error)
            return self._outcome(None, engine_unavailable=unreachable, error=self._describe(
                f"the Docker engine {'is unreachable' if unreachable else 'failed'}: "
                f"{engine_error_text(error, invocation.env)}"))
        finally:
            protocol.close_quietly(handle, getattr(handle, "_sock", None), getattr(handle, "_response", None), wait)
            self._clean_up(exited)
            forwarder.close()
            if forwarder.failed is not None:
                log.warning("Handler output could not be written; lines were dropped",
                            extra={**log_attributes(invocation), "error": str(forwarder.failed)})
        if exit_code == 0:
            return self._outcome(0)
        return self._outcome(exit_code, error=self._describe(f"exited with code {exit_code}"))

    def _create(self) -> str:
        invocation = self.invocation
        try:
            created = self.api.create_container(
                invocation.image,
                name=self.name,
                user=USER,
                stdin_open=True,  # with detach=False: attach stdin, close it after our end-of-file
                environment=context.environment(invocation, self.wall_deadline),
                labels=labels(invocation, self.executor._hostname),
                host_config=self.executor._host_configs.get(invocation.network),
                use_config_proxy=False,  # the container's env is the template's, nothing else
            )
        except ImageNotFound:
            raise ImageMissing(invocation.image) from None
        container_id: str = created["Id"]
        return container_id

    def _clean_up(self, exited: bool) -> None:
        """The backstop removal. Without a container id after an unreachable
        engine, the create may still have happened: the name identifies it."""
        if exited:
            return
        leftovers, context = self.executor._leftovers, log_attributes(self.invocation)
        if self.container_id is not None:
            if not remove_container(self.api, self.container_id, context) and leftovers is not None:
                leftovers.add(self.container_id, context)
        elif self.unreachable:
            remove_container(self.api, self.name, context)
            if leftovers is not None:     # the create may land later: look again after the grace
                leftovers.add(self.name, context, grace=UNCONFIRMED_CREATE_GRACE)

    def _start(self, container_id: str) -> None:
        try:
            self.api.start(container_id)
        except NotFound:
            raise ExecutionError("the container disappeared before it started") from None
        except DockerException as error:
            raise ExecutionError(
                f"the container did not start: {reason(error, strerror=False, limit=300)}") from None

    def _describe(self, reason: str) -> str:
        return f'function "{self.invocation.function}" handler "{self.invocation.handler}": {reason}'

    def _outcome(self, exit_code: int | None, timed_out: bool = False, error: str | None = None,
                 engine_unavailable: bool = False) -> Outcome:
        """The outcome, with the output's tails: once it is decided no more output is read, so the
        streams' last partial lines are flushed first (``run``'s clean-up closes them again, idly)."""
        forwarder = self.forwarder
        stdout_tail = stderr_tail = ""
        if forwarder is not None:
            forwarder.close()
            stdout_tail, stderr_tail = forwarder.tails[STDOUT].text(), forwarder.tails[STDERR].text()
        return Outcome(ok=exit_code == 0 and error is None, exit_code=exit_code,
                       duration=time.monotonic() - self.started, timed_out=timed_out, error=error,
                       engine_unavailable=engine_unavailable, stdout_tail=stdout_tail, stderr_tail=stderr_tail,
                       container_id=self.container_id)
