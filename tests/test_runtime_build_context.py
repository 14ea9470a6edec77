"""Build contexts: what goes into the tar, and that nothing is written into the function."""

import io
import logging
import os
import tarfile

import pytest

from relay.functions import load_function
from relay.functions.runtimes import RUNTIMES
from relay.runtime.build_context import dependency_context, function_context
from relay.runtime.recipes import dependency_recipe, function_recipe

PYTHON = RUNTIMES["python3.14"]
NODE = RUNTIMES["node24"]
TEMPLATE = "runtime: {runtime}\nevents:\n  - handler: handler.handler\n    pattern:\n      event_name: [INSERT]\n"


@pytest.fixture
def function_dir(tmp_path):
    directory = tmp_path / "functions" / "ctx"
    (directory / "pkg" / "inner").mkdir(parents=True)
    (directory / "template.yaml").write_text(TEMPLATE.format(runtime="python3.14"))
    (directory / "handler.py").write_text("def handler(event):\n    pass\n")
    (directory / "pkg" / "inner" / "jobs.py").write_text("def run(event):\n    pass\n")
    (directory / "pkg" / "template.yaml").write_text("nested: not the template\n")
    (directory / "run.sh").write_text("#!/bin/sh\n")
    (directory / "run.sh").chmod(0o700)
    (directory / "private.txt").write_text("only the owner could read this\n")
    (directory / "private.txt").chmod(0o600)
    (directory / "empty").mkdir()
    return directory


def members(context):
    with context, tarfile.open(fileobj=context) as tar:
        return {member.name: member for member in tar.getmembers()}, {
            member.name: tar.extractfile(member).read() for member in tar.getmembers() if member.isfile()}


def snapshot(directory):
    return sorted((str(path), path.lstat().st_mtime_ns, path.lstat().st_mode) for path in directory.rglob("*"))


def test_function_context_layout(function_dir):
    function = load_function(function_dir)
    entries, contents = members(function_context(function_recipe(function, PYTHON, None)))
    assert set(entries) == {
        "Dockerfile", "bootstrap", "bootstrap/relay_bootstrap.py", "function", "function/handler.py",
        "function/pkg", "function/pkg/inner", "function/pkg/inner/jobs.py", "function/pkg/template.yaml",
        "function/run.sh", "function/private.txt", "function/empty"}
    assert "function/template.yaml" not in entries  # env values never reach the image
    assert contents["Dockerfile"].startswith(b"FROM python:3.14-slim\n")
    assert contents["bootstrap/relay_bootstrap.py"] == PYTHON.bootstrap_source()
    assert contents["function/pkg/inner/jobs.py"] == b"def run(event):\n    pass\n"


def test_modes_are_normalised_and_owned_by_root(function_dir):
    entries, _ = members(function_context(function_recipe(load_function(function_dir), PYTHON, None)))
    assert entries["function/private.txt"].mode == 0o644  # readable by uid 10001
    assert entries["function/run.sh"].mode == 0o755
    assert entries["function/pkg"].mode == 0o755
    assert {(member.uid, member.gid) for member in entries.values()} == {(0, 0)}


def test_nothing_is_written_into_the_function_directory(function_dir):
    before = snapshot(function_dir.parent)
    members(function_context(function_recipe(load_function(function_dir), PYTHON, None)))
    assert snapshot(function_dir.parent) == before


def test_symlinks_inside_are_kept_as_links_and_outside_ones_left_out(function_dir, tmp_path, caplog):
    """The loader refuses a function with a link out (tests/test_function_links.py); links that
    appear after the load are the context's to leave out, judged on their real paths."""
    (tmp_path / "secret.txt").write_text("host secret\n")
    os.symlink("handler.py", function_dir / "alias.py")
    os.symlink("pkg/inner", function_dir / "inner")
    os.symlink(".", function_dir / "here")
    function = load_function(function_dir)
    os.symlink("../../../secret.txt", function_dir / "pkg" / "escape.txt")
    os.symlink(str(tmp_path / "secret.txt"), function_dir / "absolute.txt")
    os.symlink(str(tmp_path), function_dir / "outside-dir")
    os.symlink("here/..", function_dir / "up")  # text that normalises to "." but is the parent
    os.symlink("up/../secret.txt", function_dir / "chained.txt")
    with caplog.at_level(logging.WARNING, logger="relay.runtime.build"):
        entries, contents = members(function_context(function_recipe(function, PYTHON, None)))
    assert entries["function/alias.py"].issym() and entries["function/alias.py"].linkname == "handler.py"
    assert entries["function/inner"].issym() and entries["function/inner"].linkname == "pkg/inner"
    assert entries["function/here"].issym() and entries["function/here"].linkname == "."
    left_out = ("pkg/escape.txt", "absolute.txt", "outside-dir", "up", "chained.txt")
    for path in left_out:
        assert f"function/{path}" not in entries
    assert not any(b"host secret" in data for data in contents.values())
    warned = {record.path for record in caplog.records}
    assert warned == set(left_out)


def test_a_fifo_among_the_handler_files_is_left_out_with_a_warning_never_opened(function_dir, caplog):
    """A FIFO beside the handler modules (one the loader does not refuse: no handler names it)
    carries no source; the context leaves it out and says so, instead of skipping it silently."""
    os.mkfifo(function_dir / "pkg" / "inner" / "pipe")
    function = load_function(function_dir)
    with caplog.at_level(logging.WARNING, logger="relay.runtime.build"):
        entries, _ = members(function_context(function_recipe(function, PYTHON, None)))
    assert "function/pkg/inner/pipe" not in entries and "function/pkg/inner/jobs.py" in entries
    [record] = caplog.records
    assert record.getMessage() == "File is not a regular file; it is left out of the image"
    assert (record.function, record.path, record.kind) == ("ctx", "pkg/inner/pipe", "a FIFO (named pipe)")


def test_package_json_is_injected_when_missing(tmp_path):
    directory = tmp_path / "node-fn"
    directory.mkdir()
    (directory / "template.yaml").write_text(TEMPLATE.format(runtime="node24"))
    (directory / "handler.js").write_text("export function handler() {}\n")
    _, contents = members(function_context(function_recipe(load_function(directory), NODE, None)))
    assert contents["function/package.json"] == b'{"type":"module"}\n'
    assert contents["bootstrap/relay_bootstrap.mjs"] == NODE.bootstrap_source()


def test_users_package_json_is_kept(tmp_path):
    directory = tmp_path / "node-fn"
    directory.mkdir()
    (directory / "template.yaml").write_text(TEMPLATE.format(runtime="node24"))
    (directory / "package.json").write_text('{"type": "commonjs"}')
    _, contents = members(function_context(function_recipe(load_function(directory), NODE, None)))
    assert contents["function/package.json"] == b'{"type": "commonjs"}'


def test_dependency_context_holds_only_the_manifests(tmp_path):
    directory = tmp_path / "deps"
    directory.mkdir()
    (directory / "template.yaml").write_text(TEMPLATE.format(runtime="python3.14"))
    (directory / "requirements.txt").write_text("# nothing\n")
    (directory / "handler.py").write_text("")
    recipe = dependency_recipe(directory, PYTHON, "amd64")
    entries, contents = members(dependency_context(recipe))
    assert set(entries) == {"Dockerfile", "requirements.txt"}
    assert contents["requirements.txt"] == b"# nothing\n"
    assert b'RUN ["pip", "install", "--no-cache-dir", "-r", "requirements.txt"]' in contents["Dockerfile"]


def test_context_is_a_rewound_temporary_file(function_dir):
    context = function_context(function_recipe(load_function(function_dir), PYTHON, None))
    with context:
        assert context.tell() == 0
        assert isinstance(context.read(1), bytes)
        assert not isinstance(context, io.BytesIO)
