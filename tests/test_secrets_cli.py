"""``relay secret`` as an operator runs it: a real process whose /var/lib/relay is
a temporary directory, bind-mounted in a private mount namespace."""

import os
import pty
import select
import stat
import subprocess
import time

import pytest

from relay.secrets.store import FileSecretStore
from tests.support.commands import relay_secret, secret_command
from tests.support.relay_process import ROOT, base_env

# Every test runs relay secret as a process in a private mount namespace: no fixture says so, hence the mark.
pytestmark = pytest.mark.integration

VALUE = "s3cr3t-v4lue-\u00e9\n"  # with a trailing newline, kept as given


@pytest.fixture
def state(tmp_path):
    directory = tmp_path / "state"
    directory.mkdir()
    return directory


def test_ls_before_any_secret_prints_the_header_and_creates_nothing(state):
    result = relay_secret(state, "ls")
    assert (result.returncode, result.stdout, result.stderr) == (0, "NAME\n", "")
    assert os.listdir(state) == []


def test_set_from_stdin_stores_the_bytes_as_given_and_prints_nothing(state):
    result = relay_secret(state, "set", "database-url", input=VALUE.encode())
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    secrets = state / "secrets"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    assert stat.S_IMODE((secrets / "database-url").stat().st_mode) == 0o600
    assert (secrets / "database-url").read_bytes() == VALUE.encode()
    assert os.listdir(secrets) == ["database-url"]


def test_ls_lists_names_sorted_and_never_values(state):
    for name in ["database-url", "api-key", "zz.last", "_first"]:
        assert relay_secret(state, "set", name, input=VALUE.encode()).returncode == 0
    result = relay_secret(state, "ls")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "NAME\n_first\napi-key\ndatabase-url\nzz.last\n"


def test_set_again_replaces_the_value(state):
    relay_secret(state, "set", "token", input=b"first")
    assert relay_secret(state, "set", "token", input=b"second").returncode == 0
    assert (state / "secrets" / "token").read_bytes() == b"second"


def test_rm(state):
    relay_secret(state, "set", "token", input=b"v")
    relay_secret(state, "set", "other", input=b"v")
    result = relay_secret(state, "rm", "token")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert relay_secret(state, "ls").stdout == "NAME\nother\n"


def test_rm_of_a_missing_secret_exits_1(state):
    result = relay_secret(state, "rm", "database-url")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == "relay secret rm: secret 'database-url' is not in the secret store\n"


@pytest.mark.parametrize("name", ["Database", ".hidden", "trailing.", "a" * 64, "a/b", ".."])
@pytest.mark.parametrize("command", ["set", "rm"])
def test_invalid_names_exit_1_and_touch_nothing(state, command, name):
    result = relay_secret(state, command, name, input=VALUE.encode())
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith(f"relay secret {command}: {name!r} is not a valid secret name: ")
    assert result.stderr.count("\n") == 1 and VALUE.strip() not in result.stderr
    assert os.listdir(state) == []


@pytest.mark.parametrize(("value", "problem"), [
    (b"", "the value is empty"),
    (b"a\0b", "the value contains a NUL byte, which an environment variable cannot hold"),
    (b"\xc3\x28", "the value is not UTF-8 text"),
    (b"x" * (64 * 1024 + 1), "the value is larger than 64 KiB"),
])
def test_unusable_input_is_refused_and_the_old_value_kept(state, value, problem):
    relay_secret(state, "set", "token", input=b"kept")
    result = relay_secret(state, "set", "token", input=value)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"relay secret set: {problem}; secret 'token' was not changed\n"
    assert (state / "secrets" / "token").read_bytes() == b"kept"


def test_no_stdin_at_all_is_an_empty_value(state):
    result = subprocess.run(secret_command(state, "set", "token"), cwd=ROOT, env=base_env(),
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr == "relay secret set: the value is empty; secret 'token' was not changed\n"
    assert os.listdir(state) == []


def test_an_unwritable_store_exits_1_with_the_reason(state):
    (state / "secrets").write_text("a file where the directory should be")
    result = relay_secret(state, "set", "token", input=b"value")
    assert result.returncode == 1
    assert result.stderr == ("relay secret set: cannot store secret 'token' in /var/lib/relay/secrets: "
                             "Not a directory\n")


# --- the terminal path ------------------------------------------------------------------


def run_on_a_terminal(command, typed, prompt=b"Value of secret "):
    """Run *command* on a new pseudo-terminal (its controlling terminal); type *typed*
    after the prompt. Returns (exit code, everything the terminal showed)."""
    pid, master = pty.fork()
    if pid == 0:  # the child: stdin, stdout and stderr are the terminal
        try:
            os.chdir(ROOT)
            os.execve(command[0], command, base_env())
        finally:
            os._exit(127)
    shown, typed_yet = b"", False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's last user closed it
                break
            if not chunk:
                break
            shown += chunk
            if not typed_yet and prompt in shown and shown.rstrip().endswith(b":"):
                os.write(master, typed)
                typed_yet = True
        else:
            os.kill(pid, 9)
            pytest.fail(f"the command did not finish; the terminal showed {shown!r}")
    finally:
        os.close(master)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), shown


def test_set_on_a_terminal_reads_the_value_hidden(state):
    code, shown = run_on_a_terminal(secret_command(state, "set", "tty-token"), b"typed-on-the-terminal\n")
    assert code == 0, shown
    assert b"Value of secret tty-token: " in shown
    assert b"typed-on-the-terminal" not in shown  # echo was off
    # The line ending that submits the value is not part of it.
    assert (state / "secrets" / "tty-token").read_bytes() == b"typed-on-the-terminal"
    assert stat.S_IMODE((state / "secrets" / "tty-token").stat().st_mode) == 0o600


def test_an_empty_line_on_a_terminal_stores_nothing(state):
    code, shown = run_on_a_terminal(secret_command(state, "set", "tty-token"), b"\n")
    assert code == 1
    assert b"relay secret set: the value is empty; secret 'tty-token' was not changed" in shown
    assert os.listdir(state) == []


def test_an_invalid_name_is_refused_before_the_prompt(state):
    code, shown = run_on_a_terminal(secret_command(state, "set", "Bad"), b"never-typed\n")
    assert code == 1
    assert b"Value of secret" not in shown and b"is not a valid secret name" in shown


# --- weight ------------------------------------------------------------------------------

HEAVY = ("gevent", "docker", "redis", "requests", "urllib3", "yaml")


@pytest.mark.parametrize("args", [("ls",), ("set", "token"), ("rm", "token")])
def test_secret_commands_import_nothing_heavy(state, args):
    FileSecretStore(state / "secrets").set("token", b"old")
    probe = (
        "import sys\n"
        "from relay.entry import main\n"
        f"code = main(['secret', *{list(args)!r}])\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print('EXIT', code, 'HEAVY', heavy, file=sys.stderr)\n"
    )
    result = subprocess.run(secret_command(state, program=("-c", probe)), cwd=ROOT, env=base_env(),
                            input=b"value", capture_output=True, timeout=60)
    assert b"EXIT 0 HEAVY []" in result.stderr, result.stderr
