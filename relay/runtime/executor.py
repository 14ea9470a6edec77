"""One handler invocation in one throw-away container.

    create (hardened, AutoRemove, labelled) → attach → register wait → start
    → event on stdin → forward output until the stream closes → exit code

The rule's timeout bounds all of it: every wait on the engine has the
remaining time as its socket timeout, and when it runs out the container is
killed (force-removed) and the invocation is a failure. AutoRemove deletes
containers that exit; explicit removal is only the backstop for everything
else -- a failed start, a timeout, an engine error, or the caller cancelling
(a greenlet killed mid-run) -- and is idempotent.

``Executor.run`` blocks the calling thread or greenlet, never raises for a
failing handler or an engine error (the Outcome says what happened), and is
safe to call from many greenlets or threads at once.
"""

import logging
import sys
import time
from contextlib import nullcontext

from docker.errors import DockerException, ImageNotFound, NotFound
from requests.exceptions import RequestException

from relay.config import DEFAULT_MAX_CONCURRENCY
from relay.durations import format_duration
from relay.errors import ExecutionError, ImageMissing, reason
from relay.runtime import context, protocol
from relay.runtime.containers import USER, container_name, host_config, labels, remove_container
from relay.runtime.invocation import Outcome, engine_error_text, is_unreachable, redact
from relay.runtime.output import OutputForwarder, prefix
from relay.runtime.sweep import UNCONFIRMED_CREATE_GRACE
from relay.runtime.warm_pool import WarmPool

log = logging.getLogger("relay.runtime.executor")


class Executor:
    def __init__(self, docker_client, hostname, output=None, *, pins=None, leftovers=None,
                 warm_capacity=DEFAULT_MAX_CONCURRENCY, functions=None, environment=None, on_warm_count=None,
                 on_image_missing=None):
        """*output* receives the handlers' lines (default: sys.stdout as it is
        now); *pins* (an ImagePins), when given, protects each
        invocation's image from garbage collection while it runs, and each
        warm container's for its life;
        *leftovers* (a sweep.Leftovers), when given, takes the containers
        that could not be removed because the engine was unreachable.
        Invocations of functions with ``warm:`` run on ``self.warm``, a
        WarmPool of at most *warm_capacity* (MAX_CONCURRENCY) containers;
        *functions* and *environment* let it prestart, and *on_warm_count* hears
        its number of containers per function (see WarmPool).
        *on_image_missing(function, image)* hears that an invocation found its
        function's image gone from the engine; that invocation is not charged."""
        self._api = docker_client.api
        self._hostname = hostname
        self._output = output if output is not None else sys.stdout
        self._pins = pins
        self._leftovers = leftovers
        self._host_configs = {}  # by network: one HostConfig for every container of the same network
        self._on_image_missing = on_image_missing or (lambda function, image: None)
        self.warm = WarmPool(docker_client, hostname, self._output, capacity=warm_capacity, pins=pins,
                             leftovers=leftovers, functions=functions, environment=environment,
                             on_count=on_warm_count, on_image_missing=self._on_image_missing)

    def _host_config(self, network):
        if network not in self._host_configs:
            self._host_configs[network] = host_config(self._api, network)
        return self._host_configs[network]

    def run(self, invocation):
        if invocation.warm is not None:
            outcome = self.warm.run(invocation)   # its container pins the image
        else:
            started = time.monotonic()
            with self._pins.holding(invocation.image) if self._pins is not None else nullcontext():
                outcome = _Execution(self, invocation, started).run()
        _log_outcome(invocation, outcome)
        return outcome


class _Execution:
    def __init__(self, executor, invocation, started):
        self.executor = executor
        self.api = executor._api
        self.invocation = invocation
        self.started = started
        self.deadline = started + invocation.timeout / 1e9
        self.wall_deadline = time.time() + (self.deadline - time.monotonic())   # RELAY_DEADLINE
        self.container_id = None
        self.name = container_name(invocation.function)
        self.unreachable = False

    def run(self):
        invocation = self.invocation
        forwarder = OutputForwarder(self.executor._output, prefix(
            invocation.function, invocation.handler, invocation.message_id, invocation.event_id))
        handle = wait = None
        exited = False
        try:
            self.container_id = self._create()
            handle, sock = protocol.attach(self.api, self.container_id)
            wait = protocol.register_wait(self.api, self.container_id, self.deadline)
            self._start()
            protocol.send_stdin(sock, invocation.payload, self.deadline)
            protocol.read_until_closed(sock, forwarder.feed, self.deadline)
            exit_code = protocol.exit_status(self.api, wait, self.deadline)
            exited = True
        except protocol.DeadlineExceeded:
            return self._outcome(None, timed_out=True,
                                 error=self._describe(f"timed out after {format_duration(invocation.timeout)}"))
        except ImageMissing as error:
            self.executor._on_image_missing(invocation.function, invocation.image)
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
                            extra={**_attributes(invocation), "error": str(forwarder.failed)})
        if exit_code == 0:
            return self._outcome(0)
        return self._outcome(exit_code, error=self._describe(f"exited with code {exit_code}"))

    def _create(self):
        invocation = self.invocation
        try:
            created = self.api.create_container(
                invocation.image,
                name=self.name,
                user=USER,
                stdin_open=True,  # with detach=False: attach stdin, close it after our end-of-file
                environment=context.environment(invocation, self.wall_deadline),
                labels=labels(invocation, self.executor._hostname),
                host_config=self.executor._host_config(invocation.network),
                use_config_proxy=False,  # the container's env is the template's, nothing else
            )
        except ImageNotFound:
            raise ImageMissing(invocation.image) from None
        return created["Id"]

    def _clean_up(self, exited):
        """The backstop removal. Without a container id after an unreachable
        engine, the create may still have happened: the name identifies it."""
        if exited:
            return
        leftovers, context = self.executor._leftovers, _attributes(self.invocation)
        if self.container_id is not None:
            if not remove_container(self.api, self.container_id, context) and leftovers is not None:
                leftovers.add(self.container_id, context)
        elif self.unreachable:
            remove_container(self.api, self.name, context)
            if leftovers is not None:     # the create may land later: look again after the grace
                leftovers.add(self.name, context, grace=UNCONFIRMED_CREATE_GRACE)

    def _start(self):
        try:
            self.api.start(self.container_id)
        except NotFound:
            raise ExecutionError("the container disappeared before it started") from None
        except DockerException as error:
            raise ExecutionError(
                f"the container did not start: {reason(error, strerror=False, limit=300)}") from None

    def _describe(self, reason):
        return f'function "{self.invocation.function}" handler "{self.invocation.handler}": {reason}'

    def _outcome(self, exit_code, timed_out=False, error=None, engine_unavailable=False):
        return Outcome(ok=exit_code == 0 and error is None, exit_code=exit_code,
                       duration=time.monotonic() - self.started, timed_out=timed_out, error=error,
                       engine_unavailable=engine_unavailable)


def _log_outcome(invocation, outcome):
    if outcome.ok and not log.isEnabledFor(logging.DEBUG):
        return
    attributes = {**_attributes(invocation), "duration": round(outcome.duration, 3), "exit_code": outcome.exit_code}
    if outcome.timed_out:
        log.warning("Handler timed out; its container was killed", extra=attributes)
    elif outcome.exit_code is None:
        log.warning("Handler could not run", extra={**attributes, "error": outcome.error})
    else:
        # The dispatcher logs the outcome of each invocation; this is the container's side.
        log.debug("Handler container exited", extra=attributes)


def _attributes(invocation):
    return {"function": invocation.function, "handler": invocation.handler, "message_id": invocation.message_id,
            "event_id": invocation.event_id, "event_name": invocation.event_name}
