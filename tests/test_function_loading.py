"""Fingerprints and loading a function directory into a checked unit."""

import os
import shutil
import threading
from pathlib import Path

import pytest

from relay.errors import MissingTemplate, TemplateError
from relay.functions import fingerprint_directory, load_function

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "functions"


@pytest.fixture
def function_dir(tmp_path):
    directory = tmp_path / "user-events-python"
    shutil.copytree(EXAMPLES / "user-events-python", directory)
    return directory


def test_fingerprint_is_sha256_hex(function_dir):
    value = fingerprint_directory(function_dir)
    assert len(value) == 64 and int(value, 16) >= 0


def test_fingerprint_ignores_location_and_mtimes(function_dir, tmp_path):
    before = fingerprint_directory(function_dir)
    moved = tmp_path / "elsewhere" / "deeper" / "user-events-python"
    shutil.copytree(function_dir, moved)
    for path in moved.rglob("*"):
        os.utime(path, (1, 1))
    assert fingerprint_directory(moved) == before


@pytest.mark.parametrize("change", ["edit", "add nested", "rename", "remove", "template"])
def test_fingerprint_sees_every_file(function_dir, change):
    before = fingerprint_directory(function_dir)
    if change == "edit":
        (function_dir / "events" / "created.py").write_text("def handler(event):\n    pass\n")
    elif change == "add nested":
        (function_dir / "events" / "lib").mkdir()
        (function_dir / "events" / "lib" / "util.py").write_text("")
    elif change == "rename":
        (function_dir / "events" / "deleted.py").rename(function_dir / "events" / "removed.py")
    elif change == "remove":
        (function_dir / "events" / "deleted.py").unlink()
    else:
        with open(function_dir / "template.yaml", "a") as handle:
            handle.write("\n")
    assert fingerprint_directory(function_dir) != before


def test_fingerprint_tells_path_from_content(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (one / "ab").write_text("c")
    (two / "a").write_text("bc")
    assert fingerprint_directory(one) != fingerprint_directory(two)


def test_fingerprint_does_not_follow_symlinks(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("one")
    function = tmp_path / "fn"
    function.mkdir()
    (function / "link").symlink_to(outside)
    before = fingerprint_directory(function)
    outside.write_text("two")
    assert fingerprint_directory(function) == before
    (function / "link").unlink()
    (function / "link").symlink_to(tmp_path / "other.txt")
    assert fingerprint_directory(function) != before


def test_load_the_examples():
    python = load_function(EXAMPLES / "user-events-python")
    assert python.name == "user-events-python" and python.template.runtime == "python3.14"
    assert [rule.handler for rule in python.template.rules] == [
        "events.created.handler", "events.updated.handler", "events.deleted.handler"]
    assert python.image == f"relay-fn-user-events-python:{python.fingerprint[:16]}"
    node = load_function(EXAMPLES / "welcome-email-node")
    assert node.template.runtime == "node24" and [r.handler for r in node.template.rules] == ["handler.handler"]
    event = {"event_id": "evt_123", "event_name": "INSERT", "table_name": "users",
             "new_image": {"id": "user_123", "name": "John Doe", "email": "john@example.com"}}
    assert [rule.handler for rule in python.template.rules if rule.pattern.matches(event)] == ["events.created.handler"]
    assert node.template.rules[0].pattern.matches(event)


@pytest.mark.parametrize("name", ["User Events", ".hidden", "jobs.", "a" * 64])
def test_invalid_directory_names(tmp_path, name):
    directory = tmp_path / name
    shutil.copytree(EXAMPLES / "welcome-email-node", directory)
    with pytest.raises(TemplateError, match="is not a valid function name"):
        load_function(directory)


def test_missing_template(tmp_path):
    (tmp_path / "not-ready").mkdir()
    with pytest.raises(MissingTemplate, match="no template.yaml"):
        load_function(tmp_path / "not-ready")


def test_invalid_template_names_the_file(function_dir):
    (function_dir / "template.yaml").write_text("runtime: python3.14\nevents: []\n")
    with pytest.raises(TemplateError) as caught:
        load_function(function_dir)
    assert str(caught.value).startswith(f"{function_dir / 'template.yaml'}: 1 problem")


def test_a_file_swapped_for_a_fifo_after_the_look_is_never_waited_on(tmp_path, monkeypatch):
    """The fingerprint looks (is it a regular file?) and then opens; a file replaced by a FIFO in
    between once blocked the open for good, waiting for a writer. It is skipped now."""
    directory = tmp_path / "fn"
    directory.mkdir()
    (directory / "app.py").write_text("def handler(event):\n    pass\n")
    before = fingerprint_directory(directory)
    os.mkfifo(directory / "swapped.py")
    real_is_file = Path.is_file
    monkeypatch.setattr(Path, "is_file", lambda path: path.name == "swapped.py" or real_is_file(path))
    result = []
    worker = threading.Thread(target=lambda: result.append(fingerprint_directory(directory)), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # release the blocked open before failing
        os.close(os.open(directory / "swapped.py", os.O_WRONLY | os.O_NONBLOCK))
        worker.join(10)
        pytest.fail("the fingerprint waited on a FIFO")
    assert result == [before]
