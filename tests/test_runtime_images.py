"""Building function and dependency images on the real engine."""

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from relay.errors import BuildError
from relay.functions import load_function
from relay.functions.runtimes import RUNTIMES
from relay.runtime import images as images_module
from relay.runtime.images import ImageBuilder
from relay.runtime.recipes import RECIPE_LABEL, dependency_recipe
from tests.support.runtime import BuildSpy, Pins, RuntimeEvents, image_exists, token, write_function

PYTHON = RUNTIMES["python3.14"]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def pins(docker_engine):
    """Protects images a test builds and uses again from other processes' garbage collection."""
    holder = Pins(docker_engine)
    yield holder
    holder.release()


@pytest.fixture
def spy(docker_engine):
    watcher = BuildSpy(docker_engine)
    yield watcher
    watcher.restore()


def python_function(directory, requirements=None, source="def handler(event):\n    print('v1')\n"):
    files = {"handler.py": source}
    if requirements is not None:
        files["requirements.txt"] = requirements
    return write_function(directory, "python3.14", files)


def snapshot(directory):
    return sorted((str(path), path.stat().st_mtime_ns) for path in directory.rglob("*"))


def test_an_existing_tag_is_reused_without_building(docker_engine, tmp_path, created, spy, pins):
    function = python_function(tmp_path / f"img-reuse-{token()}")
    created.append(function.image)
    before = snapshot(function.directory)
    builder = ImageBuilder(docker_engine)
    assert builder.prepare(function) == function.image
    pins.add(function.image)
    assert spy.function_builds() == [function.image]
    labels = docker_engine.api.inspect_image(function.image)["Config"]["Labels"]
    assert labels["relay.build.function"] == function.name
    assert labels["relay.build.fingerprint"] == function.fingerprint
    assert ImageBuilder(docker_engine).prepare(load_function(function.directory)) == function.image
    assert spy.function_builds() == [function.image]  # a new builder (a restart) reuses it too
    assert snapshot(function.directory) == before  # nothing was written into the function


def test_a_tag_built_from_another_recipe_is_rebuilt(docker_engine, tmp_path, created, spy):
    function = python_function(tmp_path / f"img-recipe-{token()}")
    created.append(function.image)
    repository, tag = function.image.split(":")
    docker_engine.api.tag("python:3.14-slim", repository, tag)  # an image with no recipe label under the tag
    assert ImageBuilder(docker_engine).prepare(function) == function.image
    assert spy.function_builds() == [function.image]
    assert RECIPE_LABEL in docker_engine.api.inspect_image(function.image)["Config"]["Labels"]
    assert image_exists(docker_engine, "python:3.14-slim")


def test_dependency_image_is_shared_and_reused_after_a_source_change(docker_engine, tmp_path, created, spy, pins):
    marker = token()
    requirements = f"# dependencies of the shared-layer test {marker}\n"
    one = python_function(tmp_path / f"img-dep-one-{marker}", requirements)
    two = python_function(tmp_path / f"img-dep-two-{marker}", requirements, source="def handler(event):\n    pass\n")
    builder = ImageBuilder(docker_engine)
    dependency = dependency_recipe(one.directory, PYTHON, builder.architecture()).tag
    created.extend([one.image, two.image, dependency])

    builder.prepare(one)
    builder.prepare(two)
    pins.add(one.image, two.image)
    assert spy.dependency_builds() == [dependency]
    assert spy.function_builds() == [one.image, two.image]
    dependency_layers = docker_engine.api.inspect_image(dependency)["RootFS"]["Layers"]
    for image in (one.image, two.image):
        layers = docker_engine.api.inspect_image(image)["RootFS"]["Layers"]
        assert layers[:len(dependency_layers)] == dependency_layers  # built FROM the dependency image
    assert docker_engine.api.inspect_image(dependency)["Config"]["Labels"]["relay.build.kind"] == "dependencies"

    (one.directory / "handler.py").write_text("def handler(event):\n    print('v2')\n")
    changed = load_function(one.directory)
    created.append(changed.image)
    assert changed.image != one.image
    assert ImageBuilder(docker_engine).prepare(changed) == changed.image
    assert spy.dependency_builds() == [dependency]  # reused, not rebuilt
    assert spy.function_builds()[-1] == changed.image


def test_a_changed_manifest_gets_a_new_dependency_image(docker_engine, tmp_path, created, spy):
    marker = token()
    function = python_function(tmp_path / f"img-manifest-{marker}", f"# v1 {marker}\n")
    builder = ImageBuilder(docker_engine)
    first = dependency_recipe(function.directory, PYTHON, builder.architecture()).tag
    created.extend([function.image, first])
    builder.prepare(function)
    (function.directory / "requirements.txt").write_text(f"# v2 {marker}\n")
    changed = load_function(function.directory)
    second = dependency_recipe(changed.directory, PYTHON, builder.architecture()).tag
    created.extend([changed.image, second])
    builder.prepare(changed)
    assert second != first and spy.dependency_builds() == [first, second]
    assert image_exists(docker_engine, first)  # dependency images are never pruned automatically


def test_a_failed_build_reports_its_output_and_keeps_the_previous_version(docker_engine, tmp_path, created, caplog,
                                                                         pins):
    events = RuntimeEvents()
    builder = ImageBuilder(docker_engine, observer=events)
    marker = token()
    function = python_function(tmp_path / f"img-fail-{marker}")
    created.append(builder.prepare(function))
    pins.add(function.image)
    (function.directory / "requirements.txt").write_text(f"# {marker}\n-r does-not-exist.txt\n")
    broken = load_function(function.directory)
    dependency = dependency_recipe(broken.directory, PYTHON, builder.architecture()).tag
    created.extend([broken.image, dependency])
    with caplog.at_level(logging.ERROR, logger="relay.runtime"), pytest.raises(BuildError) as raised:
        builder.prepare(broken)
    message = str(raised.value)
    assert message.startswith(f'building image {dependency} for function "{function.name}" failed: ')
    assert "does-not-exist.txt" in message and "last build output:" in message
    assert events.failed_builds == [function.name]
    [record] = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert record.function == function.name and "does-not-exist.txt" in record.error
    assert image_exists(docker_engine, function.image)  # the previous version is still there to run
    assert not image_exists(docker_engine, broken.image) and not image_exists(docker_engine, dependency)


def test_build_output_goes_to_debug_logs_and_build_time_is_reported(docker_engine, tmp_path, created, caplog):
    events = RuntimeEvents()
    function = python_function(tmp_path / f"img-log-{token()}")
    created.append(function.image)
    with caplog.at_level(logging.DEBUG, logger="relay.runtime"):
        ImageBuilder(docker_engine, observer=events).prepare(function)
    debug = [record.getMessage() for record in caplog.records if record.levelno == logging.DEBUG]
    assert any(message.startswith("Step 1/") for message in debug)
    assert any(message == f"Successfully tagged {function.image}" for message in debug)
    assert [name for name, _ in events.built] == [function.name] and events.built[0][1] > 0


def test_a_base_image_that_cannot_be_pulled_fails_cleanly(docker_engine, tmp_path, created, monkeypatch):
    function = python_function(tmp_path / f"img-base-{token()}")
    created.append(function.image)
    missing = PYTHON.__class__(**{**PYTHON.__dict__, "base_image": f"relay-test-missing-{token()}:none"})
    monkeypatch.setattr(images_module, "runtime_for", lambda name: missing)
    with pytest.raises(BuildError, match="relay-test-missing-"):
        ImageBuilder(docker_engine).prepare(function)


def test_a_function_changed_during_the_build_is_not_tagged_with_the_old_fingerprint(docker_engine, tmp_path, created):
    function = python_function(tmp_path / f"img-race-{token()}")
    created.append(function.image)
    (function.directory / "handler.py").write_text("def handler(event):\n    print('edited')\n")
    with pytest.raises(BuildError, match="changed while its image was being prepared"):
        ImageBuilder(docker_engine).prepare(function)  # loaded before the edit
    assert not image_exists(docker_engine, function.image)


def test_concurrent_prepares_of_one_function_build_once(docker_engine, tmp_path, created, spy):
    function = python_function(tmp_path / f"img-once-{token()}")
    created.append(function.image)
    builder = ImageBuilder(docker_engine)
    results = []
    workers = [threading.Thread(target=lambda: results.append(builder.prepare(function))) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert results == [function.image] * 3
    assert spy.function_builds() == [function.image]


GEVENT_BUILD_SCRIPT = r"""
from gevent import monkey
monkey.patch_all()

import json, sys, time
import docker
import gevent
from relay.functions import load_function
from relay.runtime.images import ImageBuilder

gaps = []
def ticker():
    last = time.monotonic()
    while True:
        gevent.sleep(0.01)
        now = time.monotonic()
        gaps.append(now - last)
        last = now

tick = gevent.spawn(ticker)
started = time.monotonic()
tag = gevent.spawn(ImageBuilder(docker.from_env()).prepare, load_function(sys.argv[1])).get(timeout=120)
tick.kill()
print(json.dumps({"tag": tag, "seconds": time.monotonic() - started, "max_gap": max(gaps), "ticks": len(gaps)}))
"""


def test_building_under_gevent_does_not_stall_the_hub(docker_engine, tmp_path, created):
    files = {f"data/part{index:03d}.py": f"# {index}\n" + "x = 1\n" * 4000 for index in range(300)}  # ~7 MB
    function = write_function(tmp_path / f"img-gevent-{token()}", "python3.14", {"handler.py": "", **files})
    created.append(function.image)
    result = subprocess.run([sys.executable, "-c", GEVENT_BUILD_SCRIPT, str(function.directory)],
                            capture_output=True, text=True, cwd=ROOT, timeout=180,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["tag"] == function.image
    assert report["max_gap"] < 0.25, report  # tarring and streaming the context yield to other greenlets
