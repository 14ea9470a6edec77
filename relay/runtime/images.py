"""Function images and their dependency images, built on the Docker engine.

``ImageBuilder.prepare(function)`` returns the tag of an image that runs
*function*: relay-fn-<name>:<first 16 hex of its fingerprint>, built FROM a
shared relay-dep-<fingerprint> image when the function has a dependency
manifest, else FROM the runtime's base image. A tag that already exists (and
was made from the same recipe) is reused without building. A base image
missing locally is pulled by the engine during the build.

Build output goes to DEBUG logs line by line; a failed build raises
BuildError carrying the tail of the output, logs it at ERROR, and calls the
``on_build_failure(function_name)`` hook (the build_failures_total metric).
Nothing is swapped here: whichever version the caller runs stays active
until it switches to the returned tag.
"""

import logging
import re
import threading
import time
from collections import deque
from contextlib import contextmanager

from docker.errors import DockerException, NotFound
from requests.exceptions import RequestException

from relay.errors import BuildError
from relay.functions.fingerprint import fingerprint_directory
from relay.runtime.build_context import dependency_context, function_context
from relay.runtime.image_gc import collect_garbage, retire_image  # noqa: F401  (the runtime's image API)
from relay.runtime.leases import ImageLeases  # noqa: F401
from relay.runtime.recipes import RECIPE_LABEL, dependency_recipe, function_recipe
from relay.runtime.registry import runtime_for
from relay.runtime.sweep import sweep_orphans  # noqa: F401

log = logging.getLogger("relay.runtime.images")

BUILD_READ_TIMEOUT = 600.0  # seconds a build may stay silent (a slow pip or npm install) before it fails
TAIL_LINES = 30
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ImageBuilder:
    def __init__(self, docker_client, *, on_build_failure=None, on_build_seconds=None,
                 read_timeout=BUILD_READ_TIMEOUT):
        """*on_build_failure(function_name)* counts failed builds;
        *on_build_seconds(function_name, seconds)* times the builds that ran."""
        self._api = docker_client.api
        self._on_build_failure = on_build_failure
        self._on_build_seconds = on_build_seconds
        self._read_timeout = read_timeout
        self._architecture = None
        self._locks = _KeyedLocks()

    def prepare(self, function):
        """Make sure *function*'s image exists; return its tag, or raise BuildError."""
        started = time.monotonic()
        try:
            runtime = runtime_for(function.template.runtime)
            dependencies = dependency_recipe(function.directory, runtime, self.architecture())
            recipe = function_recipe(function, runtime, dependencies)
            with self._locks.hold(recipe.tag):
                existing = self._inspect(recipe.tag)
                if existing is not None and _labels(existing).get(RECIPE_LABEL) == recipe.digest:
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
            if self._on_build_failure is not None:
                self._on_build_failure(function.name)
            raise
        seconds = time.monotonic() - started
        if self._on_build_seconds is not None:
            self._on_build_seconds(function.name, seconds)
        return recipe.tag

    def architecture(self):
        """The engine's architecture (e.g. amd64), part of every dependency fingerprint."""
        if self._architecture is None:
            try:
                self._architecture = self._api.version()["Arch"]
            except (DockerException, RequestException, KeyError) as error:
                raise BuildError(f"cannot ask the Docker engine for its architecture: {error}") from None
        return self._architecture

    def _ensure_dependencies(self, function, recipe):
        with self._locks.hold(recipe.tag):
            if self._inspect(recipe.tag) is not None:
                log.debug("Reusing dependency image", extra={"function": function.name, "image": recipe.tag})
                return
            log.info("Building dependency image", extra={
                "function": function.name, "image": recipe.tag, "installer": " ".join(recipe.installer.command)})
            self._build(function, recipe.tag, dependency_context(recipe))

    def _build_function(self, function, recipe):
        log.info("Building function image", extra={"function": function.name, "image": recipe.tag})
        context = function_context(recipe)
        if fingerprint_directory(function.directory) != function.fingerprint:
            context.close()
            raise BuildError(f"{function.directory} changed while its image was being prepared; "
                             f"the new version will be built on the next reconcile")
        self._build(function, recipe.tag, context)

    def _build(self, function, tag, context):
        started = time.monotonic()
        tail = deque(maxlen=TAIL_LINES)
        try:
            with context:
                stream = self._api.build(fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True,
                                         decode=True, timeout=self._read_timeout)
                for chunk in stream:
                    self._record(function, tag, chunk, tail)
                    if "error" in chunk:
                        raise BuildError(_failure(tag, function, str(chunk["error"]).strip(), tail))
        except (DockerException, RequestException) as error:
            raise BuildError(_failure(tag, function, _reason(error), tail)) from None
        log.info("Built image", extra={"function": function.name, "image": tag,
                                       "duration": round(time.monotonic() - started, 3)})

    @staticmethod
    def _record(function, tag, chunk, tail):
        text = chunk.get("stream")
        if text is None and "status" in chunk and "progressDetail" not in chunk:
            text = " ".join(str(chunk[key]) for key in ("id", "status") if chunk.get(key))
        for line in (text or "").splitlines():
            line = _ANSI.sub("", line).rstrip()
            if line:
                tail.append(line)
                log.debug(line, extra={"function": function.name, "image": tag})

    def _inspect(self, tag):
        try:
            return self._api.inspect_image(tag)
        except NotFound:
            return None
        except (DockerException, RequestException) as error:
            raise BuildError(f"cannot inspect image {tag}: {_reason(error)}") from None

    def _remove_replaced(self, function, existing):
        """Drop the image a rebuild with a new recipe left untagged; in use, it stays."""
        try:
            if not self._api.inspect_image(existing["Id"]).get("RepoTags"):
                self._api.remove_image(existing["Id"])
        except (DockerException, RequestException) as error:
            log.debug("Replaced image kept", extra={"function": function.name, "image": existing["Id"],
                                                    "reason": _reason(error)})


def _labels(image):
    return (image.get("Config") or {}).get("Labels") or {}


def _failure(tag, function, reason, tail):
    lines = "\n".join(f"  {line}" for line in tail) if tail else "  (no output)"
    return f'building image {tag} for function "{function.name}" failed: {reason}\nlast build output:\n{lines}'


def _reason(error):
    explanation = getattr(error, "explanation", None)
    return str(explanation or error).strip()


class _KeyedLocks:
    """One lock per key, alive while someone holds or waits for it: the same
    image is never built twice at once, different images build in parallel."""

    def __init__(self):
        self._guard = threading.Lock()
        self._locks = {}

    @contextmanager
    def hold(self, key):
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
