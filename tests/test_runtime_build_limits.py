"""What a build may cost and what a failed one says, on the real engine: a tag is reused only
for the whole fingerprint; builds have a wall-clock deadline and a memory limit; a failed
build quotes at most the last 2 KiB of its output."""

import dataclasses
import io
import json
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest
from docker.errors import NotFound

from relay.errors import BuildError
from relay.functions import load_function
from relay.functions.runtimes import RUNTIMES, Installer
from relay.runtime import images as images_module
from relay.runtime.build_limits import Tail
from relay.runtime.images import BUILD_MEMORY_BYTES, TAIL_BYTES, ImageBuilder
from relay.runtime.recipes import FINGERPRINT_LABEL, RECIPE_LABEL, dependency_recipe, function_recipe
from tests.support.runtime import BuildSpy, image_exists, token, wait_until, write_function

PYTHON = RUNTIMES["python3.14"]


@pytest.fixture
def spy(docker_engine):
    watcher = BuildSpy(docker_engine)
    yield watcher
    watcher.restore()


def python_function(directory, requirements=None):
    files = {"handler.py": "def handler(event):\n    print('v1')\n"}
    if requirements is not None:
        files["requirements.txt"] = requirements
    return write_function(directory, "python3.14", files)


def impostor(docker_engine, tag, labels):
    """An image under *tag* built from the base image with *labels* and nothing of the function."""
    dockerfile = (f"FROM {PYTHON.base_image}\nLABEL "
                  + " ".join(f"{key}={json.dumps(value)}" for key, value in labels.items()) + "\n").encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    context.seek(0)
    for chunk in docker_engine.api.build(fileobj=context, custom_context=True, tag=tag, rm=True, decode=True):
        assert "error" not in chunk, chunk


def test_a_tag_with_the_same_recipe_but_another_fingerprint_is_rebuilt(docker_engine, tmp_path, created, spy):
    """The tag holds 16 hex of the fingerprint; an image whose label names another fingerprint
    (a collision, or an image someone put there) is not this function's."""
    function = python_function(tmp_path / f"limits-reuse-{token()}")
    created.append(function.image)
    recipe = function_recipe(function, PYTHON, None)
    other = function.fingerprint[:16] + "0" * 48
    assert other != function.fingerprint
    impostor(docker_engine, function.image, {RECIPE_LABEL: recipe.digest, FINGERPRINT_LABEL: other})
    spy.tags.clear()
    assert ImageBuilder(docker_engine).prepare(function) == function.image
    assert spy.function_builds() == [function.image]
    labels = docker_engine.api.inspect_image(function.image)["Config"]["Labels"]
    assert labels[FINGERPRINT_LABEL] == function.fingerprint
    assert ImageBuilder(docker_engine).prepare(load_function(function.directory)) == function.image
    assert spy.function_builds() == [function.image]  # its own image is reused as before


def test_a_failed_build_quotes_at_most_the_last_2_kib_of_its_output(docker_engine, tmp_path, created):
    marker = token()
    huge = "x" * 60_000
    requirements = "".join(f"# line {number} of a long manifest {marker}\n" for number in range(2000))
    function = python_function(tmp_path / f"limits-tail-{marker}", requirements + f"bad-requirement{huge}!!!\n")
    builder = ImageBuilder(docker_engine)
    created.extend([function.image, dependency_recipe(function.directory, PYTHON, builder.architecture()).tag])
    with pytest.raises(BuildError) as raised:
        builder.prepare(function)
    message = str(raised.value)
    head, output = message.split("\nlast build output:\n", 1)
    quoted = "\n".join(line[2:] for line in output.splitlines())  # each line is indented by two spaces
    assert "returned a non-zero code" in head and len(head) < 800
    assert 0 < len(quoted.encode()) <= TAIL_BYTES
    assert "x" * 100 in quoted  # the end of pip's complaint about the enormous requirement
    assert len(message) < TAIL_BYTES + 1200


def test_the_tail_is_the_last_2_kib_of_the_output():
    tail = Tail(2048)
    for number in range(1000):
        tail.add(f"line {number:04d} " + "." * 40)
    text = tail.text()
    assert len(text.encode()) <= 2048 and text.startswith("...") and text.endswith("line 0999 " + "." * 40)
    assert text.splitlines()[-40].startswith("line 0960")
    tail.add("é" * 5000 + "THE END")
    assert len(tail.text().encode()) <= 2048 and tail.text().endswith("é" * 5 + "THE END")
    assert not Tail(2048) and "(no output)" in images_module._failure("t", load_stub(), "r", Tail(2048))


def load_stub():
    return type("Stub", (), {"name": "stub"})()


def test_a_build_past_its_deadline_is_stopped_and_its_container_goes(docker_engine, tmp_path, created, monkeypatch):
    """The install step prints a line a second forever, past the (test's short) deadline: the build fails
    naming the deadline, and the engine abandons it, build container included. While it runs,
    the build container has the build memory limit."""
    marker = token()
    sleeper = Installer("requirements.txt", (  # never silent for long, so only the total deadline can stop it
        "sh", "-c", f"echo install-{marker} started; while true; do echo still installing; sleep 1; done"))
    runtime = dataclasses.replace(PYTHON, installers=(sleeper,))
    monkeypatch.setattr(images_module, "runtime_for", lambda name: runtime)
    function = python_function(tmp_path / f"limits-deadline-{marker}", f"# {marker}\n")
    builder = ImageBuilder(docker_engine, deadline=20)
    dependency = dependency_recipe(function.directory, runtime, builder.architecture()).tag
    created.extend([function.image, dependency])

    def build_containers():
        return [container for container in docker_engine.api.containers(all=True)
                if f"install-{marker}" in container.get("Command", "")]

    seen = {}

    def watch():
        """The first build container inspected; one removed between the listing and the inspection
        (the engine removes each step's container as the step ends) is looked for again."""
        for container in build_containers():
            try:
                seen.update(docker_engine.api.inspect_container(container["Id"]))
            except NotFound:
                continue
            return True
        return False

    failure = []
    worker = threading.Thread(target=lambda: failure.append(_build_error(builder, function)))
    worker.start()
    assert wait_until(watch, timeout=60), "the build container never showed up"
    worker.join(120)
    assert not worker.is_alive()
    [message] = failure
    assert "it ran past its deadline of 20s and was stopped" in message, message
    assert message.rstrip().endswith("still installing")  # the tail so far is quoted
    assert seen["HostConfig"]["Memory"] == BUILD_MEMORY_BYTES
    assert seen["HostConfig"]["MemorySwap"] == BUILD_MEMORY_BYTES
    assert wait_until(lambda: not build_containers(), timeout=60), build_containers()
    assert not image_exists(docker_engine, dependency)


def _build_error(builder, function):
    try:
        builder.prepare(function)
    except BuildError as error:
        return str(error)
    return "built"


GEVENT_DEADLINE_SCRIPT = r"""
from gevent import monkey
monkey.patch_all()
import dataclasses, sys
import docker, gevent
from relay.errors import BuildError
from relay.functions import load_function
from relay.runtime import images
from relay.functions.runtimes import RUNTIMES, Installer

ticker = Installer("requirements.txt", ("sh", "-c", "while true; do echo tick " + sys.argv[2] + "; sleep 1; done"))
runtime = dataclasses.replace(RUNTIMES["python3.14"], installers=(ticker,))
images.runtime_for = lambda name: runtime
builder = images.ImageBuilder(docker.from_env(), deadline=6)
try:
    gevent.spawn(builder.prepare, load_function(sys.argv[1])).get(timeout=120)
except BuildError as error:
    print(str(error).splitlines()[0])
"""


def test_the_deadline_holds_under_gevent(docker_engine, tmp_path, created):
    """Relay builds in greenlets: the cutoff's timer is a greenlet there, and still wakes the read."""
    marker = token()
    function = python_function(tmp_path / f"limits-gevent-{marker}", f"# {marker}\n")
    created.append(function.image)
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run([sys.executable, "-c", GEVENT_DEADLINE_SCRIPT, str(function.directory), marker],
                            cwd=root, capture_output=True, text=True, timeout=180)
    assert "it ran past its deadline of 6s and was stopped" in result.stdout, result.stdout + result.stderr
    assert wait_until(lambda: not [container for container in docker_engine.api.containers(all=True)
                                   if f"tick {marker}" in container.get("Command", "")], timeout=60)


def test_a_long_build_reports_its_step_and_time_at_info(docker_engine, tmp_path, created, monkeypatch, caplog):
    """A silent install of a few seconds: progress lines at INFO, each naming the step it is on."""
    import logging

    marker = token()
    quiet = Installer("requirements.txt", ("sh", "-c", f"sleep 4 # {marker}"))
    runtime = dataclasses.replace(PYTHON, installers=(quiet,))
    monkeypatch.setattr(images_module, "runtime_for", lambda name: runtime)
    function = python_function(tmp_path / f"limits-progress-{marker}", f"# {marker}\n")
    builder = ImageBuilder(docker_engine, progress_interval=1)
    created.extend([function.image, dependency_recipe(function.directory, runtime, builder.architecture()).tag])
    with caplog.at_level(logging.INFO, logger="relay.runtime.images"):
        builder.prepare(function)
    progress = [record for record in caplog.records if record.getMessage() == "Image build still running"]
    assert len(progress) >= 2 and all(record.levelno == logging.INFO for record in progress)
    assert any(record.step.startswith("Step ") and "sleep 4" in record.step for record in progress)
    assert max(int(record.elapsed.removesuffix("s")) for record in progress) >= 3
