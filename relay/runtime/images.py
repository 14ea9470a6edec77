"""Function images and their dependency images, built on the Docker engine.

``ImageBuilder.prepare(function)`` returns the tag of an image that runs
*function*: relay-fn-<name>:<first 16 hex of its fingerprint>, built FROM a
shared relay-dep-<fingerprint> image when the function has a dependency
manifest, else FROM the runtime's base image. A tag that already exists is
reused without building only when its labels carry the function's whole
fingerprint and the same recipe: the tag holds 16 hex of 64, and an image
someone else put under it is not the function. A base image missing locally
is pulled by the engine during the build.

Every build has a wall-clock deadline (BUILD_DEADLINE, ten minutes): when
it passes, the connection to the engine is cut, which makes the engine
abandon the build, and the build fails. Each build container gets at most
BUILD_MEMORY_BYTES of memory and no swap beyond it, so a hostile or runaway
install cannot take the host's memory.

Build output goes to DEBUG logs line by line, and every PROGRESS_INTERVAL
while a build runs one INFO line says which step it is on and for how
long it has run. A failed build raises
BuildError quoting at most the last TAIL_BYTES of the output, logs it at
ERROR, and tells the observer (``build_failed``: the build_failures_total
metric); a build that ran tells it how long it took (``image_built``).
Nothing is swapped here: whichever version the caller runs stays active
until it switches to the returned tag.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any, TypeVar

from docker import DockerClient
from docker.errors import DockerException, NotFound
from requests.exceptions import RequestException
from urllib3.exceptions import HTTPError as TransportError

from relay.durations import format_duration
from relay.errors import BuildError, reason
from relay.functions import Function
from relay.functions.fingerprint import fingerprint_directory
from relay.functions.runtimes import runtime_for
from relay.runtime.build_context import dependency_context, function_context
from relay.runtime.build_limits import Cutoff, Progress, Tail
from relay.runtime.events import NoObserver, RuntimeObserver
from relay.runtime.recipes import (
    FINGERPRINT_LABEL,
    RECIPE_LABEL,
    DependencyRecipe,
    FunctionRecipe,
    dependency_recipe,
    function_recipe,
)

log = logging.getLogger("relay.runtime.images")

BUILD_DEADLINE = 600.0  # seconds of wall time a build may take, a dependency install included
PROGRESS_INTERVAL = 15.0  # seconds between "still building" lines at INFO
BUILD_MEMORY_BYTES = 2 * 1024 * 1024 * 1024  # per build container; pip and npm need far less
TAIL_BYTES = 2048  # of build output quoted in a failed build's error
REASON_CHARACTERS = 500  # of the engine's own error message quoted
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

Result = TypeVar("Result")
Offload = Callable[..., Any]
"""``offload(function, *args)``: runs a blocking call away from the gevent hub and returns its result."""


def in_place(function: Callable[..., Result], *args: Any) -> Result:
    """An Offload that runs the call where it is (outside ``relay start``)."""
    return function(*args)


class ImageBuilder:
    def __init__(self, docker_client: DockerClient, *, observer: RuntimeObserver | None = None,
                 deadline: float = BUILD_DEADLINE, offload: Offload = in_place,
                 progress_interval: float = PROGRESS_INTERVAL) -> None:
        """*observer* hears every failed build (``build_failed``) and how long each build
        that ran took (``image_built``); *deadline* is each build's wall time in seconds
        (shorter only in tests); *offload(function, *args)* runs the blocking file work
        (tarring a context, hashing the directory) off the hub; a build still running
        logs its progress at INFO every *progress_interval* seconds."""
        self._progress_interval = progress_interval
        self._api = docker_client.api
        self._observer = observer if observer is not None else NoObserver()
        self._deadline = deadline
        self._architecture: str | None = None
        self._locks = _KeyedLocks()
        self._offload = offload

    def prepare(self, function: Function) -> str:
        """Make sure *function*'s image exists; return its tag, or raise BuildError."""
        started = time.monotonic()
        try:
            runtime = runtime_for(function.template.runtime)
            dependencies = dependency_recipe(function.directory, runtime, self.architecture())
            recipe = function_recipe(function, runtime, dependencies)
            with self._locks.hold(recipe.tag):
                existing = self._inspect(recipe.tag)
                if existing is not None and _made_by(existing, recipe):
                    log.debug("Function image is up to date", extra={"function": function.name, "image": recipe.tag})
                    return recipe.tag
                if dependencies is not None:
                    self._ensure_dependencies(function, dependencies)
                self._build_function(function, recipe)
                if existing is not None:
                    self._remove_replaced(function, existing)
        except BuildError as error:
            log.error("Image build failed", extra={"function": function.name, "image": function.image,
                                                   "error": str(error)})
            self._observer.build_failed(function.name)
            raise
        self._observer.image_built(function.name, time.monotonic() - started)
        return recipe.tag

    def architecture(self) -> str:
        """The engine's architecture (e.g. amd64), part of every dependency fingerprint."""
        if self._architecture is None:
            try:
                architecture: str = self._api.version()["Arch"]
            except (DockerException, RequestException, KeyError) as error:
                raise BuildError(f"cannot ask the Docker engine for its architecture: {error}") from None
            self._architecture = architecture
        return self._architecture

    def _ensure_dependencies(self, function: Function, recipe: DependencyRecipe) -> None:
        with self._locks.hold(recipe.tag):
            if self._inspect(recipe.tag) is not None:
                log.debug("Reusing dependency image", extra={"function": function.name, "image": recipe.tag})
                return
            log.info("Building dependency image", extra={
                "function": function.name, "image": recipe.tag, "installer": " ".join(recipe.installer.command)})
            self._build(function, recipe.tag, self._offload(dependency_context, recipe))

    def _build_function(self, function: Function, recipe: FunctionRecipe) -> None:
        log.info("Building function image", extra={"function": function.name, "image": recipe.tag})
        context = self._offload(function_context, recipe)
        if self._offload(fingerprint_directory, function.directory) != function.fingerprint:
            context.close()
            raise BuildError(f"{function.directory} changed while its image was being prepared; "
                             f"the new version will be built on the next reconcile")
        self._build(function, recipe.tag, context)

    def _build(self, function: Function, tag: str, context: IO[bytes]) -> None:
        started = time.monotonic()
        tail = Tail(TAIL_BYTES)
        cutoff = None
        progress = Progress(self._progress_interval, lambda step, elapsed: log.info(
            "Image build still running", extra={"function": function.name, "image": tag, "step": step or "starting",
                                                "elapsed": f"{elapsed:.0f}s"}))
        try:
            with context:
                stream = self._api.build(fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True,
                                         decode=True, timeout=self._deadline,
                                         container_limits={"memory": BUILD_MEMORY_BYTES,
                                                           "memswap": BUILD_MEMORY_BYTES})
                cutoff = Cutoff(stream, started + self._deadline)
                for chunk in stream:
                    self._record(function, tag, chunk, tail, progress)
                    if "error" in chunk:
                        raise BuildError(_failure(tag, function, str(chunk["error"]), tail))
                if cutoff.fired:
                    raise BuildError(_failure(tag, function, self._past_deadline(), tail))
        except (DockerException, RequestException, TransportError, OSError) as error:
            why = self._past_deadline() if cutoff is not None and cutoff.fired else reason(error, strerror=False)
            raise BuildError(_failure(tag, function, why, tail)) from None
        finally:
            progress.cancel()
            if cutoff is not None:
                cutoff.cancel()
        log.info("Built image", extra={"function": function.name, "image": tag,
                                       "duration": round(time.monotonic() - started, 3)})

    def _past_deadline(self) -> str:
        return f"it ran past its deadline of {format_duration(int(self._deadline * 1e9))} and was stopped"

    @staticmethod
    def _record(function: Function, tag: str, chunk: dict[str, Any], tail: Tail, progress: Progress) -> None:
        text = chunk.get("stream")
        if text is None and "status" in chunk and "progressDetail" not in chunk:
            text = " ".join(str(chunk[key]) for key in ("id", "status") if chunk.get(key))
        for raw in (text or "").splitlines():
            line = _ANSI.sub("", raw).rstrip()
            if line:
                tail.add(line)
                progress.note(line)
                log.debug(line, extra={"function": function.name, "image": tag})

    def _inspect(self, tag: str) -> dict[str, Any] | None:
        try:
            image: dict[str, Any] = self._api.inspect_image(tag)
        except NotFound:
            return None
        except (DockerException, RequestException) as error:
            raise BuildError(f"cannot inspect image {tag}: {reason(error, strerror=False)}") from None
        return image

    def _remove_replaced(self, function: Function, existing: dict[str, Any]) -> None:
        """Drop the image a rebuild with a new recipe left untagged; in use, it stays."""
        try:
            if not self._api.inspect_image(existing["Id"]).get("RepoTags"):
                self._api.remove_image(existing["Id"])
        except (DockerException, RequestException) as error:
            log.debug("Replaced image kept", extra={"function": function.name, "image": existing["Id"],
                                                    "reason": reason(error, strerror=False)})


def _made_by(image: dict[str, Any], recipe: FunctionRecipe) -> bool:
    """Whether *image* is *recipe*'s function image: the whole fingerprint and the recipe match."""
    labels = (image.get("Config") or {}).get("Labels") or {}
    return (labels.get(FINGERPRINT_LABEL) == recipe.function.fingerprint
            and labels.get(RECIPE_LABEL) == recipe.digest)


def _failure(tag: str, function: Function, reason: str, tail: Tail) -> str:
    reason = " ".join(reason.split())
    if len(reason) > REASON_CHARACTERS:
        reason = reason[:REASON_CHARACTERS] + "..."
    output = tail.text()
    lines = "\n".join(f"  {line}" for line in output.splitlines()) if output else "  (no output)"
    return f'building image {tag} for function "{function.name}" failed: {reason}\nlast build output:\n{lines}'


class _KeyedLocks:
    """One lock per key, alive while someone holds or waits for it: the same
    image is never built twice at once, different images build in parallel."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, list[Any]] = {}   # key → [its lock, how many hold or wait for it]

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._guard:
            entry = self._locks.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._guard:
                entry[1] -= 1
                if not entry[1]:
                    del self._locks[key]
