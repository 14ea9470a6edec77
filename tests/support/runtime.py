"""Helpers for the runtime integration tests (tests/test_runtime_*.py) against the real engine.

Every test session uses its own function names and dependency manifests (a
random token), so concurrent sessions on one engine never share, and never
remove, each other's images or containers.
"""

from __future__ import annotations

import secrets
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

from docker.errors import APIError, NotFound

from relay.functions import load_function
from relay.runtime.events import RuntimeObserver

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "functions"
TOKEN_FILES = ("package.json", "package-lock.json", "requirements.txt")


def token():
    return secrets.token_hex(4)


def copy_function(fixture, destination_root, name, marker):
    """Copy tests/fixtures/functions/<fixture> to <destination_root>/<name>, with
    @TOKEN@ in its manifests replaced by *marker*; return the loaded Function."""
    directory = Path(destination_root) / name
    shutil.copytree(FIXTURES / fixture, directory, symlinks=True)
    for file_name in TOKEN_FILES:
        path = directory / file_name
        if path.exists():
            path.write_text(path.read_text().replace("@TOKEN@", marker))
    return load_function(directory)


def write_function(directory, runtime, files, handler="handler.handler"):
    """A small function from a dict of file texts; returns the loaded Function."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "template.yaml").write_text(
        f"runtime: {runtime}\nevents:\n  - handler: {handler}\n    pattern:\n      kind: [any]\n")
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return load_function(directory)


class BuildSpy:
    """Wraps ``client.api.build`` to record the tag of every build that ran."""

    def __init__(self, client):
        self.tags = []
        self._api = client.api
        self._original = client.api.build

        def build(*args, **kwargs):
            self.tags.append(kwargs.get("tag"))
            return self._original(*args, **kwargs)

        client.api.build = build

    def restore(self):
        self._api.build = self._original

    def dependency_builds(self):
        return [tag for tag in self.tags if tag.startswith("relay-dep-")]

    def function_builds(self):
        return [tag for tag in self.tags if tag.startswith("relay-fn-")]


class RuntimeEvents(RuntimeObserver):
    """The runtime's events (relay.runtime.events) as they were emitted, one list per event."""

    def __init__(self):
        self.failed_builds = []   # function names
        self.built = []           # (function, seconds)
        self.warm_counts = []     # (function, containers)
        self.missing = []         # (function, image)

    def build_failed(self, function):
        self.failed_builds.append(function)

    def image_built(self, function, seconds):
        self.built.append((function, seconds))

    def warm_containers_changed(self, function, count):
        self.warm_counts.append((function, count))

    def image_missing(self, function, image):
        self.missing.append((function, image))


def remove_images(client, tags):
    """Remove the given tags (function images before dependency images); missing ones are fine."""
    for tag in sorted(set(tags), key=lambda tag: tag.startswith("relay-dep-")):
        try:
            client.api.remove_image(tag, force=True)
        except NotFound:
            pass


class Pins:
    """Keeps images on the engine until ``release``.

    Other Relay processes on this engine (end-to-end tests running at the same
    time, say) garbage-collect every relay-fn-* image they do not know. The
    engine refuses to remove an image a container refers to, so one never
    started container per image protects it. Pins carry no relay.function
    label, so no orphan sweep takes them for Relay's.
    """

    def __init__(self, client):
        self._client = client
        self._containers = {}  # tag -> [container id, ...]

    def add(self, *tags):
        for tag in tags:
            created = self._client.api.create_container(tag, command=["true"], labels={"relay.test.pin": "1"})
            self._containers.setdefault(tag, []).append(created["Id"])

    def release(self, *tags):
        """Unpin *tags*, or every pinned tag when none are named."""
        for tag in tags or list(self._containers):
            for container in self._containers.pop(tag, ()):
                try:
                    self._client.api.remove_container(container, force=True)
                except NotFound:
                    pass


def function_tags(client, name):
    return [tag for image in client.api.images(name=f"relay-fn-{name}") for tag in image.get("RepoTags") or ()]


def image_exists(client, tag):
    try:
        client.api.inspect_image(tag)
        return True
    except NotFound:
        return False


def containers_of(client, hostname):
    return client.api.containers(all=True, filters={"label": f"relay.hostname={hostname}"})


def remove_containers(client, hostname):
    for container in containers_of(client, hostname):
        try:
            client.api.remove_container(container["Id"], force=True)
        except (NotFound, APIError):
            pass


def wait_until(predicate, timeout=10.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


@contextmanager
def built_fixtures(client, root, fixtures):
    """Build tests/fixtures/functions/<fixture> for each of *fixtures* under per-session names in
    *root*; yield {fixture: (Function, tag)}; remove their images (and dependency images) after."""
    from relay.functions.runtimes import RUNTIMES
    from relay.runtime.images import ImageBuilder
    from relay.runtime.recipes import dependency_recipe

    marker = token()
    builder = ImageBuilder(client)
    pins = Pins(client)
    created, built = [], {}
    try:
        for fixture in fixtures:
            function = copy_function(fixture, root, f"{fixture}-{marker}", marker)
            dependencies = dependency_recipe(function.directory, RUNTIMES[function.template.runtime],
                                             builder.architecture())
            created += [function.image] + ([dependencies.tag] if dependencies else [])
            built[fixture] = (function, builder.prepare(function))
            pins.add(function.image)
        yield built
    finally:
        pins.release()
        remove_images(client, created)


@contextmanager
def clean_hostname(client, prefix):
    """A fresh worker hostname; afterwards, assert none of its containers were left (and remove them)."""
    name = f"{prefix}-{token()}"
    yield name
    clean = wait_until(lambda: not containers_of(client, name), timeout=10)
    remove_containers(client, name)
    assert clean, f"containers of {name} were left behind"
