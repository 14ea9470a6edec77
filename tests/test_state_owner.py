"""What root writes under the state directory belongs to that directory's owner.

The shipped unit runs Relay as a DynamicUser that owns /var/lib/relay, and an
operator runs the admin commands with sudo. These tests run the real commands
as root (as the test suite runs) in a private mount namespace where a
temporary directory owned by another uid is /var/lib/relay, then read what
they wrote as that uid, with setpriv.
"""

import os
import stat
import subprocess
import sys

import pytest

from tests.support.commands import relay_secret
from tests.support.gitserver import relay_git
from tests.support.relay_process import ROOT, base_env
from tests.support.workers import with_private_paths

# Every test runs Relay as a process in a private mount namespace: no fixture says so for the first ones.
pytestmark = pytest.mark.integration

OWNER = 4242  # a uid no account has, as a DynamicUser's is while the service is stopped
NOBODY = 65534  # git sync runs ssh, which needs an account: the sync test's owner is nobody
TEMPLATE = "runtime: python3.14\nevents:\n  - handler: app.handle\n    pattern: {kind: [%s]}\n"


def owned_directory(path, uid):
    path.mkdir()
    os.chown(path, uid, uid)
    os.chmod(path, 0o700)
    return path


def run_as(uid, functions, state, *command, env=None):
    """*command* as *uid* (no groups), with *functions* at /functions and *state* at /var/lib/relay."""
    setpriv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *command]
    return subprocess.run(with_private_paths(setpriv, functions, state), cwd=ROOT, env=env or base_env(),
                          capture_output=True, timeout=120)


def everything_under(path):
    found = [path]
    for directory, names, files in os.walk(path):
        found += [os.path.join(directory, name) for name in names + files]
    return found


def test_a_secret_and_a_deploy_key_set_by_root_are_read_by_the_state_directory_owner(tmp_path):
    functions, state = tmp_path / "functions", owned_directory(tmp_path / "state", OWNER)
    functions.mkdir()
    assert relay_secret(state, "set", "api-token", input=b"v4lue").returncode == 0
    keygen = relay_git(functions, state, "keygen")
    assert keygen.returncode == 0, keygen.stderr

    secret = run_as(OWNER, functions, state, "cat", "/var/lib/relay/secrets/api-token")
    assert (secret.returncode, secret.stdout, secret.stderr) == (0, b"v4lue", b"")
    key = run_as(OWNER, functions, state, "cat", "/var/lib/relay/ssh/id_ed25519")
    assert key.returncode == 0, key.stderr
    assert key.stdout.startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----")
    modes = {os.path.relpath(path, state): (os.lstat(path).st_uid, os.lstat(path).st_gid,
                                            stat.S_IMODE(os.lstat(path).st_mode)) for path in everything_under(state)}
    assert modes == {".": (OWNER, OWNER, 0o700), "secrets": (OWNER, OWNER, 0o700),
                     "secrets/api-token": (OWNER, OWNER, 0o600), "ssh": (OWNER, OWNER, 0o700),
                     "ssh/id_ed25519": (OWNER, OWNER, 0o600), "ssh/id_ed25519.pub": (OWNER, OWNER, 0o644)}


def test_a_secrets_directory_an_older_relay_made_as_root_is_given_to_the_owner(tmp_path):
    functions, state = tmp_path / "functions", owned_directory(tmp_path / "state", OWNER)
    functions.mkdir()
    (state / "secrets").mkdir(mode=0o700)  # root:root, as a root `relay secret set` left it before
    assert relay_secret(state, "set", "api-token", input=b"v4lue").returncode == 0
    assert run_as(OWNER, functions, state, "cat", "/var/lib/relay/secrets/api-token").stdout == b"v4lue"


def test_a_state_directory_root_owns_stays_roots(tmp_path):
    functions, state = tmp_path / "functions", owned_directory(tmp_path / "state", 0)
    functions.mkdir()
    assert relay_secret(state, "set", "api-token", input=b"v4lue").returncode == 0
    assert {os.lstat(path).st_uid for path in everything_under(state)} == {0}


def test_what_a_root_sync_writes_belongs_to_the_owner_and_the_owner_syncs_after_it(tmp_path, git_server):
    """Root makes the key, sets the source and syncs; the owner (the service) then syncs by itself
    (its lock, known_hosts, checkout and /functions are its own), and root syncs again after it."""
    functions, state = owned_directory(tmp_path / "functions", NOBODY), owned_directory(tmp_path / "state", NOBODY)
    os.chmod(functions, 0o755)
    repo = git_server.repository()
    repo.commit({"first/template.yaml": TEMPLATE % "first", "first/app.py": "def handle(event):\n    pass\n"})
    assert relay_git(functions, state, "keygen").returncode == 0
    git_server.authorize((state / "ssh/id_ed25519.pub").read_text())
    assert relay_git(functions, state, "set", git_server.url(repo)).returncode == 0
    first = relay_git(functions, state, "sync")
    assert first.returncode == 0, first.stderr

    repo.commit({"second/template.yaml": TEMPLATE % "second", "second/app.py": "def handle(event):\n    pass\n",
                 "first/app.py": "def handle(event):\n    return 1\n"})
    service = run_as(NOBODY, functions, state, sys.executable, "-m", "relay", "git", "sync",
                     env=base_env(HOME="/nonexistent"))
    assert service.returncode == 0, service.stderr.decode()
    assert sorted(os.listdir(functions)) == ["first", "second"]

    repo.commit({"first": None})
    again = relay_git(functions, state, "sync")
    assert again.returncode == 0, again.stderr
    assert sorted(os.listdir(functions)) == ["second"]
    strangers = [path for path in everything_under(state) + everything_under(functions)
                 if (os.lstat(path).st_uid, os.lstat(path).st_gid) != (NOBODY, NOBODY)]
    assert strangers == []
    read = run_as(NOBODY, functions, state, "sh", "-c", "find /var/lib/relay -type f -exec cat {} + >/dev/null")
    assert (read.returncode, read.stderr) == (0, b"")
