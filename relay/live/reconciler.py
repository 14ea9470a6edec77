"""The reconciler: what is in /functions becomes what Relay serves, one function at a time.

``reconcile(name)`` looks at /functions/<name> and does exactly one of:

    directory gone        stop matching it; its image is retired after its last invocation
    invalid name          logged once, skipped
    no template.yaml      "not ready": an active version keeps serving, nothing else happens
    same fingerprint      nothing, and nothing is recorded -- unless its image
                          went missing: then it is built again
    changed or new        load and validate, build, then swap it into the catalog

A template's warnings (a pattern key that looks like an operator Relay does
not have) are logged one line each when it loads, and change nothing.

A failure (invalid template, failed build) leaves the active version, if
any, serving and is recorded as the last reconcile; a failed build is tried
again on the next change or periodic pass, the same invalid content only
when it changes. A new function starts matching once its image is built.
The catalog swaps its snapshot atomically, so a dispatch that is running
keeps the version it started with. Whatever changes is reported to the
observers (``functions_changed``, a FunctionsObserver) as the FunctionStatus
of every loaded function (relay.live.status); the state view builds its
rows from them, Prometheus creates each function's counters.

Hashing a directory and loading a template (reading, parsing, validating)
run through *offload*, the hub's thread pool under ``relay start``: a huge
function or a hostile template costs a worker thread, never the hub, so
events keep moving meanwhile. A template may not use the webhook's secret
(``relay git set --webhook-secret``); its name is read at every load.

Requests come from the startup load (every directory, waited for), the
watcher (debounced) and the 30 s rescan. A request for a function that is
being reconciled coalesces into one more pass after the current one; a few
different functions build at once. The reconciler is also one of the
runtime's observers: an invocation that finds its function's image gone
(``image_missing``) has it built again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from gevent.event import Event
from gevent.pool import Pool

from relay.coalesce import CoalescingRunner
from relay.errors import BuildError, MissingTemplate, TemplateError
from relay.functions import ActiveFunction, Function, fingerprint_directory, function_name_problem, load_function
from relay.functions.function import TEMPLATE_FILE
from relay.gitsync.webhook_secret import webhook_secret_name
from relay.live.catalog import Catalog
from relay.live.loading import function_names
from relay.live.status import FunctionStatus, Outcome, now
from relay.quoting import show
from relay.runtime.events import RuntimeObserver

log = logging.getLogger("relay.live.reconciler")

RESCAN_INTERVAL = 30.0  # seconds between periodic passes; fixed, shorter only in tests
PARALLEL = 2            # functions reconciled (built) at once


class FunctionsObserver(Protocol):
    """Hears what the reconciler reports (relay.view.writer.StateWriter, the Prometheus observer)."""

    def functions_changed(self, statuses: Sequence[FunctionStatus]) -> None:
        """The FunctionStatus of every loaded function, sorted by name, whenever one of them changes."""


class Builder(Protocol):
    """Makes a function's image (relay.runtime.images.ImageBuilder)."""

    def prepare(self, function: Function) -> str:
        """The tag of an image that runs *function*; raises BuildError."""


Offload = Callable[..., Any]
"""``offload(function, *args)``: runs a blocking call away from the gevent hub and returns its result."""


def _in_place(function: Callable[..., Any], *args: Any) -> Any:
    return function(*args)


@dataclass(frozen=True)
class _Failure:
    fingerprint: str
    retry: bool  # a failed build may succeed on its own; the same invalid template never does


class Reconciler(RuntimeObserver):
    def __init__(self, functions_dir: str | Path, builder: Builder, catalog: Catalog, *,
                 retire: Callable[[str], object] | None = None, observers: Sequence[FunctionsObserver] = (),
                 offload: Offload = _in_place, webhook_secret: Callable[[], str | None] = webhook_secret_name,
                 rescan_interval: float = RESCAN_INTERVAL, parallel: int = PARALLEL,
                 clock: Callable[[], datetime] = now) -> None:
        """*retire(tag)* disposes of an image that stopped being active; each of *observers*
        hears every FunctionStatus, sorted by name, whenever one changes (``functions_changed``);
        *offload(function, *args)* runs a blocking call (hashing a directory, loading a
        template) away from the hub; *webhook_secret()* names the secret no template may
        use (default: the git source under /var/lib/relay)."""
        self.root = Path(functions_dir)
        self.builder = builder
        self.catalog = catalog
        self.retire = retire or _keep
        self.observers = tuple(observers)
        self.offload = offload
        self.webhook_secret = webhook_secret
        self.rescan_interval = rescan_interval
        self.clock = clock
        self.statuses: dict[str, FunctionStatus] = {}   # of every function loaded
        self.stopping = Event()
        self._failures: dict[str, _Failure] = {}        # of the last attempt
        self._noted: dict[str, str] = {}    # the condition last logged for a function (invalid, not ready)
        self._missing: set[str] = set()     # names whose active image an invocation found gone: rebuilt
        self._pool = Pool(parallel)
        self._runner = CoalescingRunner(self.reconcile, _reconcile_failed, spawn=self._pool.spawn)

    # --- driving ------------------------------------------------------------------

    def load_all(self) -> int:
        """The startup load: reconcile every directory of /functions, wait for all; return their number."""
        if not self.root.is_dir():
            log.warning("Functions directory does not exist; waiting for it", extra={"path": str(self.root)})
        names = function_names(self.root)
        for name in names:
            self.request(name)
        self._pool.join()
        self._publish()  # even an empty view: rows left from an earlier run must go
        return len(names)

    def loop(self) -> None:
        """The periodic pass, a backstop for changes the watcher missed."""
        while not self.stopping.wait(self.rescan_interval):
            try:
                self.rescan()
            except Exception:
                log.exception("Periodic rescan of the functions failed")

    def rescan(self) -> None:
        serving = {active.name for active in self.catalog.snapshot()}
        names = set(function_names(self.root)) | set(self.statuses) | serving
        for name in sorted(names):
            self.request(name)

    def stop(self) -> None:
        """Take no more requests and abandon reconciles in progress (a swap is one step: none is half done)."""
        self.stopping.set()
        self._runner.stop()
        self._pool.kill(block=False)

    def request(self, name: str) -> None:
        """Reconcile *name* soon (once more after the pass going on, if any); waits only for a free slot."""
        self._runner.request(name)

    def image_missing(self, name: str, image: str) -> None:
        """An invocation found *image* gone from the engine: removed by an operator
        (``docker image prune -a``) or by another process's clean-up. When it is
        still *name*'s active image, build it again; until then the invocations
        fail uncharged and their entries wait for the reclaimer."""
        active = self.active(name)
        if active is None or active.image != image or name in self._missing:
            return
        self._missing.add(name)
        log.warning("Function image is missing from the engine; building it again",
                    extra={"function": name, "image": image})
        self.request(name)

    # --- one function ---------------------------------------------------------------

    def reconcile(self, name: str) -> None:
        directory = self.root / name
        if not directory.is_dir():
            self._remove(name)
            return
        problem = function_name_problem(name, render=show)
        if problem:
            self._note(name, "invalid", logging.ERROR, "Invalid function name; directory skipped",
                       path=str(directory), error=problem)
            return
        active = self.active(name)
        if not (directory / TEMPLATE_FILE).exists():  # a FIFO or socket is there: loading refuses it, unopened
            if active is not None:
                self._note(name, "not ready", logging.INFO,
                           "Function directory has no template.yaml; the active version keeps serving", function=name)
            else:
                self._note(name, "not ready", logging.DEBUG, "Directory has no template.yaml; ignored",
                           path=str(directory))
            return
        try:
            fingerprint = self.offload(fingerprint_directory, directory)
        except FileNotFoundError:
            return  # removed while being read: its removal is the next change
        except OSError as error:
            self._note(name, "unreadable", logging.WARNING, "Function directory cannot be read; skipped",
                       function=name, error=str(error))
            return
        self._noted.pop(name, None)
        failure = self._failures.get(name)
        if active is not None and active.function.fingerprint == fingerprint and name not in self._missing:
            if failure is not None:
                self._back_to_active(name)
            return
        if failure is not None and failure.fingerprint == fingerprint and not failure.retry:
            return
        self._update(name, directory, fingerprint, active)

    def _update(self, name: str, directory: Path, fingerprint: str, active: ActiveFunction | None) -> None:
        try:
            function = self.offload(load_function, directory, self.webhook_secret())
        except MissingTemplate:
            return  # removed since the check; the next change brings it back
        except TemplateError as error:
            log.error("Invalid function; skipped" if active is None
                      else "Invalid function; the previous version keeps serving",
                      extra={"function": name, "path": str(directory), "error": str(error)})
            if active is None:
                self.catalog.remove(name)   # no longer waiting: its rules are unknown now
            self._fail(name, fingerprint, str(error), retry=False)
            return
        _log_warnings(function)
        if name not in self.statuses:
            self._set(FunctionStatus(function, ready=False, updated_at=self.clock()))
        try:
            image = self.builder.prepare(function)
        except Exception as error:
            if not isinstance(error, BuildError):
                log.exception("Preparing the function's image failed unexpectedly", extra={"function": name})
            log.error("Function is pending: its image could not be built" if active is None
                      else "Function rebuild failed; the previous version keeps serving",
                      extra={"function": name, "image": function.image})
            self._fail(name, function.fingerprint, str(error) or type(error).__name__, retry=True,
                       loaded=None if active else function)
            if active is None:
                self.catalog.mark_waiting(function)
            return
        self._activate(function, image, active)

    def _activate(self, function: Function, image: str, previous: ActiveFunction | None) -> None:
        self.catalog.put(ActiveFunction(function=function, image=image))
        self._failures.pop(function.name, None)
        self._missing.discard(function.name)
        moment = self.clock()
        self._set(FunctionStatus(function, ready=True, image=image, prepared_at=moment, last_reconcile_at=moment,
                                 last_outcome=Outcome.SUCCEEDED, updated_at=moment))
        attrs = {"function": function.name, "image": image, "handlers": len(function.template.rules),
                 "schedules": len(function.template.schedules)}
        if previous is None:
            log.info("Function ready", extra=attrs)
        elif previous.image == image and previous.function.fingerprint == function.fingerprint:
            log.info("Function image rebuilt", extra=attrs)
        else:
            log.info("Function updated", extra={**attrs, "previous": previous.image})
            if previous.image != image:
                self.retire(previous.image)

    def _fail(self, name: str, fingerprint: str, error: str, *, retry: bool, loaded: Function | None = None) -> None:
        """Record a failed attempt; *loaded* (a function never built) replaces the pending version."""
        self._failures[name] = _Failure(fingerprint, retry)
        moment = self.clock()
        status = FunctionStatus(loaded, ready=False, updated_at=moment) if loaded else self.statuses.get(name)
        if status is not None:
            self._set(replace(status, last_reconcile_at=moment, last_outcome=Outcome.FAILED, last_error=error,
                              updated_at=moment))

    def _back_to_active(self, name: str) -> None:
        """The directory was reverted to the version that is serving: the failure is over."""
        self._failures.pop(name, None)
        status = self.statuses.get(name)
        if status is not None and status.last_outcome is Outcome.FAILED:
            moment = self.clock()
            self._set(replace(status, last_reconcile_at=moment, last_outcome=Outcome.SUCCEEDED, last_error=None,
                              updated_at=moment))
            log.info("Function is back to its active version", extra={"function": name, "image": status.image})

    def _remove(self, name: str) -> None:
        active = self.active(name)
        self._failures.pop(name, None)
        self._missing.discard(name)
        self._noted.pop(name, None)
        known = self.statuses.pop(name, None) is not None
        if active is None and not known:
            return
        self.catalog.remove(name)
        self._publish()
        log.info("Function removed", extra={"function": name})
        if active is not None:
            self.retire(active.image)

    # --- helpers --------------------------------------------------------------------

    def active(self, name: str) -> ActiveFunction | None:
        """The ActiveFunction serving *name*, or None."""
        for active in self.catalog.snapshot():
            if active.name == name:
                return active
        return None

    def _set(self, status: FunctionStatus) -> None:
        self.statuses[status.name] = status
        self._publish()

    def _publish(self) -> None:
        statuses = [self.statuses[name] for name in sorted(self.statuses)]
        for observer in self.observers:
            observer.functions_changed(statuses)

    def _note(self, name: str, condition: str, level: int, message: str, **attrs: object) -> None:
        """Log a lasting condition once, not at every pass."""
        if self._noted.get(name) != condition:
            self._noted[name] = condition
            log.log(level, message, extra=attrs)


def _log_warnings(function: Function) -> None:
    """One line for each warning of the template just loaded (what ``relay validate`` says of it too)."""
    source = str(function.directory / TEMPLATE_FILE)
    for warning in function.template.warnings:
        attrs = {"function": function.name, "file": source, "line": warning.line, "field": warning.path,
                 "warning": warning.message}
        log.warning("Template warning; the function loads all the same",
                    extra={key: value for key, value in attrs.items() if value not in (None, "")})


def _keep(tag: str) -> None:
    """No retirement: the image stays (a reconciler without a runtime, in tests)."""


def _reconcile_failed(name: str) -> None:
    log.exception("Reconcile failed unexpectedly; retried on the next pass", extra={"function": name})


class ActiveImages(Mapping[str, str]):
    """function name -> active image tag, read live from the catalog: the images GC must keep."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def __getitem__(self, name: str) -> str:
        for active in self.catalog.snapshot():
            if active.name == name:
                return active.image
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter([active.name for active in self.catalog.snapshot()])

    def __len__(self) -> int:
        return len(self.catalog.snapshot())

