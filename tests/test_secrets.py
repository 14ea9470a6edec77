"""The file secret store and a function's run-time environment, on a real filesystem."""

import os
import stat
import threading
from pathlib import Path

import pytest

from relay.errors import SecretError
from relay.functions import load_function
from relay.secrets.store import (
    MAX_VALUE_BYTES,
    SECRETS_DIR,
    FileSecretStore,
    environment,
)


@pytest.fixture
def store(tmp_path):
    return FileSecretStore(tmp_path / "state" / "secrets")


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_store_lives_at_the_fixed_path():
    assert SECRETS_DIR == Path("/var/lib/relay/secrets")
    assert FileSecretStore().directory == SECRETS_DIR


def test_first_write_makes_the_directory_0700_and_files_0600_whatever_the_umask(store):
    previous = os.umask(0)
    try:
        store.set("database-url", b"postgres://u:p@db/app")
        store.set("api-key", b"k")
    finally:
        os.umask(previous)
    assert mode(store.directory) == 0o700
    assert mode(store.directory / "database-url") == 0o600
    assert mode(store.directory / "api-key") == 0o600
    assert sorted(os.listdir(store.directory)) == ["api-key", "database-url"]  # no temporary files left


def test_values_are_stored_byte_for_byte(store):
    value = "line one\r\nlíne two with ünïcode and trailing space \n".encode()
    store.set("multi", value)
    assert (store.directory / "multi").read_bytes() == value
    assert store.get("multi") == value.decode()


def test_an_overwrite_keeps_mode_0600_even_if_the_file_was_loosened(store):
    store.set("token", b"one")
    os.chmod(store.directory / "token", 0o644)
    store.set("token", b"two")
    assert mode(store.directory / "token") == 0o600
    assert store.get("token") == "two"


def test_a_reader_never_sees_a_partial_write(store):
    """Writes replace the file by rename, so a concurrent reader sees the old or the new value, whole."""
    values = [b"a" * MAX_VALUE_BYTES, b"b" * 7]
    store.set("rotating", values[0])
    seen, stop = set(), threading.Event()

    def read():
        while not stop.is_set():
            try:
                seen.add(store.get("rotating"))
            except SecretError as error:  # e.g. an empty file caught between truncate and write
                seen.add(str(error))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for round_ in range(200):
            store.set("rotating", values[round_ % 2])
    finally:
        stop.set()
        reader.join()
    assert seen <= {value.decode() for value in values}, [text[:80] for text in seen]
    assert os.listdir(store.directory) == ["rotating"]


def test_a_failed_write_leaves_the_old_value_and_no_temporary_file(store, monkeypatch):
    store.set("token", b"old")

    def failing_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(SecretError) as raised:
        store.set("token", b"new-value")
    monkeypatch.undo()
    assert str(raised.value) == f"cannot store secret 'token' in {store.directory}: Input/output error"
    assert store.get("token") == "old"
    assert os.listdir(store.directory) == ["token"]


def test_an_unwritable_store_is_a_clear_error(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    with pytest.raises(SecretError, match=r"^cannot store secret 'x' in .*not-a-directory/secrets: "):
        FileSecretStore(blocker / "secrets").set("x", b"value")


def test_names_are_sorted_and_skip_temporary_and_foreign_entries(store):
    for name in ["zeta", "api-key", "database-url", "_internal", "0day"]:
        store.set(name, b"v")
    (store.directory / ".zeta.abc123.tmp").write_bytes(b"half")   # a write in progress
    (store.directory / "README.txt~").write_bytes(b"")              # not a secret name
    (store.directory / "Upper").write_bytes(b"v")
    (store.directory / "subdir").mkdir()
    assert store.names() == ["0day", "_internal", "api-key", "database-url", "zeta"]


def test_a_store_that_does_not_exist_yet_is_empty_and_is_not_created_by_reading(store):
    assert store.names() == []
    with pytest.raises(SecretError, match="^secret 'database-url' is not in the secret store$"):
        store.get("database-url")
    assert not store.directory.exists()


def test_remove(store):
    store.set("a", b"1")
    store.set("b", b"2")
    store.remove("a")
    assert store.names() == ["b"]
    with pytest.raises(SecretError, match="^secret 'a' is not in the secret store$"):
        store.remove("a")


@pytest.mark.parametrize("name", [".hidden", "trailing.", "Upper", "a/b", "../etc/passwd", "..", "", "a b",
                                  "a" * 64, "caf\u00e9"])
def test_invalid_names_are_refused_everywhere(store, name):
    for call in (lambda: store.set(name, b"v"), lambda: store.get(name), lambda: store.remove(name)):
        with pytest.raises(SecretError, match="is not a valid secret name"):
            call()
    assert not store.directory.exists()


@pytest.mark.parametrize(("value", "problem"), [
    (b"", "the value is empty"),
    (b"abc\0def", "the value contains a NUL byte, which an environment variable cannot hold"),
    (b"\xff\xfe", "the value is not UTF-8 text"),
    (b"x" * (MAX_VALUE_BYTES + 1), "the value is larger than 64 KiB"),
])
def test_unusable_values_are_refused_without_quoting_them(store, value, problem):
    store.set("kept", b"previous")
    with pytest.raises(SecretError) as raised:
        store.set("kept", value)
    assert str(raised.value) == f"{problem}; secret 'kept' was not changed"
    assert store.get("kept") == "previous"
    # A file put there by hand is refused when it is read, again without its content.
    (store.directory / "by-hand").write_bytes(value)
    with pytest.raises(SecretError) as raised:
        store.get("by-hand")
    assert str(raised.value) == f"secret 'by-hand' cannot be used: {problem}"


def test_the_largest_value_is_accepted(store):
    store.set("big", b"y" * MAX_VALUE_BYTES)
    assert len(store.get("big")) == MAX_VALUE_BYTES


def test_an_unreadable_secret_names_the_reason_not_the_value(store):
    (store.directory).mkdir(parents=True)
    (store.directory / "a-directory").mkdir()
    with pytest.raises(SecretError, match="^secret 'a-directory' cannot be read: Is a directory$"):
        store.get("a-directory")


# --- the run-time environment --------------------------------------------------------


def make_function(root, env_block):
    directory = Path(root) / "functions" / "api-client"
    directory.mkdir(parents=True)
    (directory / "template.yaml").write_text(f"""
runtime: python3.14
events:
  - handler: app.handler
    pattern: {{kind: [call]}}
{env_block}""")
    (directory / "app.py").write_text("def handler(event):\n    pass\n")
    return load_function(directory)


def test_env_is_literal_and_secrets_are_resolved_on_every_call(tmp_path, store):
    function = make_function(tmp_path, """
env:
  API_URL: https://api.example.com
  DEBUG_FLAG: ""
  LOOKS_SECRET: "${DATABASE_URL}"
secrets:
  DATABASE_URL: database-url
""")
    store.set("database-url", b"postgres://first")
    assert environment(function, store) == {
        "API_URL": "https://api.example.com", "DEBUG_FLAG": "", "LOOKS_SECRET": "${DATABASE_URL}",
        "DATABASE_URL": "postgres://first"}
    store.set("database-url", b"postgres://rotated")
    assert environment(function, store)["DATABASE_URL"] == "postgres://rotated"


def test_a_missing_secret_names_the_variable_and_the_reference(tmp_path, store):
    function = make_function(tmp_path, "secrets:\n  DATABASE_URL: database-url\n  API_KEY: api-key\n")
    store.set("database-url", b"the-value-must-not-show")
    with pytest.raises(SecretError) as raised:
        environment(function, store)
    assert str(raised.value) == "cannot set API_KEY: secret 'api-key' is not in the secret store"


def test_any_provider_with_get_plugs_in(tmp_path):
    """The runner's whole contract with a backend is ``get(name) -> str``, e.g. a Vault client."""

    class Vault:
        def __init__(self, values):
            self.values, self.asked = values, []

        def get(self, name):
            self.asked.append(name)
            if name not in self.values:
                raise SecretError(f"secret {name!r} is not in Vault")
            return self.values[name]

    function = make_function(tmp_path, "secrets:\n  TOKEN: api-token\n")
    vault = Vault({"api-token": "from-vault"})
    assert environment(function, vault) == {"TOKEN": "from-vault"}
    assert environment(function, vault) == {"TOKEN": "from-vault"}
    assert vault.asked == ["api-token", "api-token"]
    with pytest.raises(SecretError, match="^cannot set TOKEN: secret 'api-token' is not in Vault$"):
        environment(function, Vault({}))
