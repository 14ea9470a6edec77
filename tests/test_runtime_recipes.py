"""The runtime registry and build recipes: plain data, no Docker."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from relay.errors import BuildError
from relay.functions import load_function
from relay.functions.runtimes import RUNTIMES, runtime_for
from relay.functions.template import RUNTIMES as TEMPLATE_RUNTIMES
from relay.runtime.recipes import dependency_recipe, function_recipe

ROOT = Path(__file__).resolve().parent.parent
PYTHON = RUNTIMES["python3.14"]
NODE = RUNTIMES["node24"]


def make_function(directory, runtime="python3.14", files=None):
    directory.mkdir(parents=True)
    (directory / "template.yaml").write_text(
        f"runtime: {runtime}\nevents:\n  - handler: handler.handler\n    pattern:\n      event_name: [INSERT]\n")
    for name, text in (files or {}).items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return load_function(directory)


def test_every_template_runtime_has_a_registry_entry():
    assert set(TEMPLATE_RUNTIMES) <= set(RUNTIMES)


def test_registry_entries():
    assert PYTHON.base_image == "python:3.14-slim"
    assert NODE.base_image == "node:24-alpine"
    assert PYTHON.command == ("python", "-u", "-B", "/opt/relay/relay_bootstrap.py")
    assert NODE.command == ("node", "/opt/relay/relay_bootstrap.mjs")
    assert [installer.command for installer in NODE.installers] == [
        ("npm", "ci", "--omit=dev"), ("npm", "install", "--omit=dev")]
    assert PYTHON.installers[0].command == ("pip", "install", "--no-cache-dir", "-r", "requirements.txt")


def test_unknown_runtime_is_a_build_error():
    with pytest.raises(BuildError, match="python2.7.*python3.14, node24"):
        runtime_for("python2.7")


def test_bootstraps_are_package_data():
    assert b"RELAY_HANDLER" in PYTHON.bootstrap_source()
    assert b"RELAY_HANDLER" in NODE.bootstrap_source()


def test_bootstraps_are_readable_when_relay_is_imported_from_a_zip(tmp_path):
    archive = tmp_path / "relay.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for path in (ROOT / "relay").rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                bundle.write(path, path.relative_to(ROOT).as_posix())
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from relay.functions.runtimes import RUNTIMES; "
            "import relay; assert relay.__file__.startswith(sys.argv[1]), relay.__file__; "
            "print(sum(len(r.bootstrap_source()) for r in RUNTIMES.values()))")
    result = subprocess.run([sys.executable, "-c", code, str(archive)], capture_output=True, text=True,
                            cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 1000


@pytest.mark.parametrize("files, expected", [
    ({}, None),
    ({"requirements.txt": "# none\n"}, ("pip", "install", "--no-cache-dir", "-r", "requirements.txt")),
])
def test_python_installer_selection(tmp_path, files, expected):
    function = make_function(tmp_path / "fn", files=files)
    recipe = dependency_recipe(function.directory, PYTHON, "amd64")
    assert (recipe.installer.command if recipe else None) == expected


@pytest.mark.parametrize("files, expected, manifests", [
    ({"handler.js": ""}, None, None),
    ({"package.json": "{}"}, ("npm", "install", "--omit=dev"), ["package.json"]),
    ({"package.json": "{}", "package-lock.json": "{}"}, ("npm", "ci", "--omit=dev"),
     ["package-lock.json", "package.json"]),
])
def test_node_installer_selection(tmp_path, files, expected, manifests):
    function = make_function(tmp_path / "fn", "node24", files)
    recipe = dependency_recipe(function.directory, NODE, "amd64")
    assert (recipe.installer.command if recipe else None) == expected
    assert ([name for name, _ in recipe.manifests] if recipe else None) == manifests


def test_lockfile_without_package_json_says_so(tmp_path):
    function = make_function(tmp_path / "fn", "node24", {"package-lock.json": "{}"})
    with pytest.raises(BuildError, match="package-lock.json needs package.json"):
        dependency_recipe(function.directory, NODE, "amd64")


def test_dependency_fingerprint_keys_on_manifests_runtime_base_and_architecture(tmp_path):
    one = make_function(tmp_path / "one", files={"requirements.txt": "requests==2.0\n", "handler.py": "a"})
    two = make_function(tmp_path / "two", files={"requirements.txt": "requests==2.0\n", "handler.py": "b"})
    other = make_function(tmp_path / "other", files={"requirements.txt": "requests==2.1\n"})
    first = dependency_recipe(one.directory, PYTHON, "amd64")
    assert first.tag == f"relay-dep-{first.fingerprint}" and len(first.fingerprint) == 64
    assert dependency_recipe(two.directory, PYTHON, "amd64").tag == first.tag  # shared across functions
    assert dependency_recipe(other.directory, PYTHON, "amd64").tag != first.tag
    assert dependency_recipe(one.directory, PYTHON, "arm64").tag != first.tag
    rebased = PYTHON.__class__(**{**PYTHON.__dict__, "base_image": "python:3.14-bookworm"})
    assert dependency_recipe(one.directory, rebased, "amd64").tag != first.tag
    renamed = PYTHON.__class__(**{**PYTHON.__dict__, "name": "python3.15"})
    assert dependency_recipe(one.directory, renamed, "amd64").tag != first.tag


def test_dependency_fingerprint_ignores_source_changes(tmp_path):
    function = make_function(tmp_path / "fn", files={"requirements.txt": "x\n", "handler.py": "v1"})
    before = dependency_recipe(function.directory, PYTHON, "amd64").tag
    (function.directory / "handler.py").write_text("v2")
    (function.directory / "template.yaml").write_text((function.directory / "template.yaml").read_text() + "\n")
    assert dependency_recipe(function.directory, PYTHON, "amd64").tag == before


def test_dependency_dockerfile_runs_the_installer_on_the_manifests_only(tmp_path):
    function = make_function(tmp_path / "fn", "node24", {"package.json": "{}", "package-lock.json": "{}"})
    dockerfile = dependency_recipe(function.directory, NODE, "amd64").dockerfile()
    assert dockerfile.startswith("FROM node:24-alpine\nWORKDIR /function\n")
    assert "COPY package-lock.json package.json /function/\n" in dockerfile
    assert 'RUN ["npm", "ci", "--omit=dev"]\n' in dockerfile
    assert 'relay.build.kind="dependencies"' in dockerfile


def test_function_dockerfile(tmp_path):
    function = make_function(tmp_path / "fn", files={"handler.py": ""})
    recipe = function_recipe(function, PYTHON, None)
    dockerfile = recipe.dockerfile()
    assert dockerfile.startswith("FROM python:3.14-slim\n")
    assert "USER 10001:10001\n" in dockerfile
    assert 'ENTRYPOINT ["python", "-u", "-B", "/opt/relay/relay_bootstrap.py"]\n' in dockerfile
    assert f'relay.build.recipe="{recipe.digest}"' in dockerfile
    assert recipe.tag == function.image


def test_function_image_builds_from_the_dependency_image(tmp_path):
    function = make_function(tmp_path / "fn", files={"requirements.txt": "x\n"})
    dependencies = dependency_recipe(function.directory, PYTHON, "amd64")
    assert function_recipe(function, PYTHON, dependencies).dockerfile().startswith(f"FROM {dependencies.tag}\n")


def test_package_json_is_injected_only_when_missing(tmp_path):
    bare = make_function(tmp_path / "bare", "node24", {"handler.js": ""})
    assert function_recipe(bare, NODE, None).injected == (("package.json", b'{"type":"module"}\n'),)
    assert json.loads(dict(function_recipe(bare, NODE, None).injected)["package.json"]) == {"type": "module"}
    own = make_function(tmp_path / "own", "node24", {"handler.js": "", "package.json": '{"type":"commonjs"}'})
    assert function_recipe(own, NODE, None).injected == ()
    assert function_recipe(make_function(tmp_path / "py", files={}), PYTHON, None).injected == ()


def test_recipe_digest_changes_with_the_bootstrap_not_the_source(tmp_path):
    function = make_function(tmp_path / "fn", files={"handler.py": "v1"})
    recipe = function_recipe(function, PYTHON, None)
    (function.directory / "handler.py").write_text("v2")
    assert function_recipe(load_function(function.directory), PYTHON, None).digest == recipe.digest
    changed = recipe.__class__(**{**recipe.__dict__, "bootstrap": recipe.bootstrap + b"\n"})
    assert changed.digest != recipe.digest
