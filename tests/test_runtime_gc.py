"""Garbage collection of old function images, with pins protecting in-flight invocations."""

import io
import logging
import tarfile
import threading
import time

import pytest
from docker.errors import APIError, NotFound

from relay.durations import SECOND
from relay.functions import load_function
from relay.runtime.cold import ColdExecutor
from relay.runtime.image_gc import collect_garbage, retire_image
from relay.runtime.images import ImageBuilder
from relay.runtime.invocation import Invocation
from relay.runtime.pins import ImagePins
from tests.support.runtime import (
    Pins,
    containers_of,
    function_tags,
    image_exists,
    remove_images,
    token,
    wait_until,
    write_function,
)

A1, A2, A3 = "relay-fn-a:" + "1" * 16, "relay-fn-a:" + "2" * 16, "relay-fn-a:" + "3" * 16
B1 = "relay-fn-b:" + "4" * 16
FOREIGN = ["relay-fn-a:latest", "relay-fn-a:" + "5" * 15, "relay-dep-" + "6" * 64 + ":latest",
           "example/relay-fn-a:" + "7" * 16, "relay-fn-Upper:" + "8" * 16, "python:3.14-slim"]


class FakeAPI:
    """Just enough of docker-py's APIClient: a list of tags, some of them refusing removal."""

    def __init__(self, tags, refuse=()):
        self.tags = list(tags)
        self.refuse = set(refuse)
        self.removed = []

    def images(self, name=None, filters=None):
        if filters:  # untagged images: none here
            return []
        return [{"RepoTags": [tag]} for tag in self.tags]

    def remove_image(self, tag, force=False, noprune=False):
        assert not force
        if tag not in self.tags:
            raise NotFound("no such image")
        if tag in self.refuse:
            response = type("Response", (), {"status_code": 409, "reason": "Conflict"})()
            raise APIError("conflict", response, explanation="image is being used by running container")
        self.tags.remove(tag)
        self.removed.append(tag)


class FakeClient:
    def __init__(self, api):
        self.api = api


def test_removes_the_old_versions_of_loaded_functions_only():
    api = FakeAPI([A1, A2, A3, B1, *FOREIGN])
    removed = collect_garbage(FakeClient(api), {"a": A3}, ImagePins())
    assert sorted(removed) == [A1, A2]
    assert sorted(api.tags) == sorted([A3, B1, *FOREIGN])  # b may be another Relay's function


def test_a_removed_function_is_collected_when_named():
    api = FakeAPI([A1, A3, B1])
    assert collect_garbage(FakeClient(api), {"a": A3}, ImagePins(), functions=["b"]) == [B1]
    assert sorted(api.tags) == [A1, A3]
    assert sorted(collect_garbage(FakeClient(api), {}, ImagePins(), functions=["a", "b"])) == [A1, A3]


def test_a_pinned_tag_waits_for_its_last_unpin():
    api, image_pins = FakeAPI([A1, A2]), ImagePins()
    image_pins.pin(A1)
    assert collect_garbage(FakeClient(api), {"a": A2}, image_pins) == []
    assert A1 in api.tags
    image_pins.unpin(A1)
    assert api.removed == [A1]


def test_a_pinned_tag_that_became_active_again_is_kept():
    api, image_pins = FakeAPI([A1, A2]), ImagePins()
    active = {"a": A2}
    image_pins.pin(A1)
    collect_garbage(FakeClient(api), active, image_pins)
    active["a"] = A1  # the function was reverted to the old source while A1 was still running
    image_pins.unpin(A1)
    assert api.removed == []


def test_an_image_a_container_still_uses_is_kept(caplog):
    api = FakeAPI([A1, A2], refuse=[A1])
    with caplog.at_level(logging.INFO, logger="relay.runtime"):
        assert collect_garbage(FakeClient(api), {"a": A2}, ImagePins()) == []
    assert A1 in api.tags and "Old function image kept" in caplog.text


def test_retire_image():
    api, image_pins = FakeAPI([A1, A2]), ImagePins()
    assert retire_image(FakeClient(api), A1, image_pins, {"a": A2}) is True
    assert api.removed == [A1]
    image_pins.pin(A2)
    assert retire_image(FakeClient(api), A2, image_pins, {}) is False
    image_pins.unpin(A2)
    assert api.removed == [A1, A2]
    assert retire_image(FakeClient(api), "python:3.14-slim", image_pins, {}) is False


@pytest.fixture
def versions(docker_engine, tmp_path):
    """Two built versions of one function whose handler sleeps: (name, old tag, new tag)."""
    directory = tmp_path / f"gc-inflight-{token()}"
    source = "import time\n\ndef handler(event):\n    print('{version}', flush=True)\n    time.sleep(event['s'])\n"
    builder = ImageBuilder(docker_engine)
    pins = Pins(docker_engine)
    old = write_function(directory, "python3.14", {"handler.py": source.format(version="v1")})
    builder.prepare(old)
    pins.add(old.image)
    (directory / "handler.py").write_text(source.format(version="v2"))
    new = load_function(directory)
    builder.prepare(new)
    pins.add(new.image)
    yield old.name, old.image, new.image, pins
    pins.release()
    remove_images(docker_engine, [old.image, new.image])


def test_gc_never_removes_an_image_an_in_flight_invocation_uses(docker_engine, versions, capsys, monkeypatch):
    name, old, new, pins = versions
    attempts = []
    remove_image = docker_engine.api.remove_image
    monkeypatch.setattr(docker_engine.api, "remove_image",
                        lambda tag, **options: (attempts.append(tag), remove_image(tag, **options))[1])
    hostname = f"rt-gc-{token()}"
    image_pins = ImagePins()
    executor = ColdExecutor(docker_engine, hostname, pins=image_pins)
    result = {}
    worker = threading.Thread(target=lambda: result.update(outcome=executor.run(Invocation(
        function=name, handler="handler.handler", image=old, payload=b'{"s": 3}', timeout=30 * SECOND, env={}))))
    worker.start()
    try:
        assert wait_until(lambda: [c for c in containers_of(docker_engine, hostname) if c["State"] == "running"],
                          timeout=15), result
        pins.release(old)  # from here on only the pin (and the engine's own check) protect it
        assert image_pins.in_use(old)
        assert collect_garbage(docker_engine, {name: new}, image_pins, functions=[name]) == []
        time.sleep(0.5)
        assert attempts == [], "garbage collection tried to remove an image in use"
        assert image_exists(docker_engine, old)
    finally:
        worker.join(30)
    assert result["outcome"].ok
    assert attempts == [old]  # removed when the last invocation using it ended
    assert function_tags(docker_engine, name) == [new]
    assert "v1" in capsys.readouterr().out


def test_gc_at_startup_removes_a_removed_functions_images(docker_engine, versions):
    name, old, new, pins = versions
    pins.release()
    removed = collect_garbage(docker_engine, {}, ImagePins(), functions=[name])
    assert set(removed) <= {old, new}  # a concurrent Relay on this engine may have removed some first
    assert function_tags(docker_engine, name) == []
    assert image_exists(docker_engine, "python:3.14-slim")


def test_untagged_images_of_collected_functions_are_removed(docker_engine):
    name = f"gc-untagged-{token()}"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for index, other in enumerate((name, f"{name}-other")):
            dockerfile = (f'FROM python:3.14-slim\nLABEL relay.build.kind="function" '
                          f'relay.build.function="{other}"\n').encode()
            info = tarfile.TarInfo(f"Dockerfile.{index}")
            info.size = len(dockerfile)
            tar.addfile(info, io.BytesIO(dockerfile))
    built = []
    for index in range(2):
        context.seek(0)
        tag = f"relay-fn-{name}:{'0' * 15}{index}"
        list(docker_engine.api.build(fileobj=context, custom_context=True, dockerfile=f"Dockerfile.{index}",
                                     tag=tag, rm=True))
        built.append(docker_engine.api.inspect_image(tag)["Id"])
        docker_engine.api.tag("python:3.14-slim", *tag.split(":"))  # the build loses its tag
    try:
        collect_garbage(docker_engine, {name: f"relay-fn-{name}:{'0' * 15}0"}, ImagePins())
        assert not image_exists(docker_engine, built[0])  # untagged, of a function in the pass
        assert image_exists(docker_engine, built[1])  # untagged, of a function the pass is not about
    finally:
        remove_images(docker_engine, [*built, f"relay-fn-{name}:{'0' * 15}0", f"relay-fn-{name}:{'0' * 15}1"])


def test_an_untagged_image_that_gained_a_tag_since_it_was_listed_is_kept():
    """A build that hit the cache tags the image the others left untagged; removing it by id would take the tag."""

    class API:
        removed = []

        def images(self, name=None, filters=None):
            if filters:
                return [{"Id": "sha256:" + "a" * 64, "Labels": {"relay.build.function": "a"}},
                        {"Id": "sha256:" + "b" * 64, "Labels": {"relay.build.function": "a"}}]
            return []

        def inspect_image(self, image_id):
            return {"RepoTags": [A1] if image_id.endswith("a") else []}

        def remove_image(self, image_id, force=False, noprune=False):
            self.removed.append(image_id)

    api = API()
    collect_garbage(FakeClient(api), {"a": A1}, ImagePins())
    assert api.removed == ["sha256:" + "b" * 64]
