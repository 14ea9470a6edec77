"""``relay git`` as an operator runs it, against a real OpenSSH server on a loopback port.

Every command is a real process in a private mount namespace where temporary
directories are /functions and /var/lib/relay.
"""

import fcntl
import json
import os
import secrets
import stat
import subprocess
import sys

import pytest

from tests.support.gitserver import Symlink, git, relay_git, relay_git_command
from tests.support.relay_process import ROOT, base_env
from tests.support.workers import with_private_paths

TEMPLATE = "runtime: python3.14\nevents:\n  - handler: app.handle\n    pattern: {kind: [%s]}\n"


def function(name):
    return {f"{name}/template.yaml": TEMPLATE % name, f"{name}/app.py": f"def handle(event):\n    return {name!r}\n"}


class Host:
    """A private /functions and /var/lib/relay, and the commands run against them."""

    def __init__(self, tmp_path, server):
        self.functions = tmp_path / "functions"
        self.state = tmp_path / "state"
        self.functions.mkdir()
        self.state.mkdir()
        self.server = server

    def git(self, *args):
        return relay_git(self.functions, self.state, *args)

    def ok(self, *args):
        result = self.git(*args)
        assert result.returncode == 0, f"relay git {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        return result

    def failing(self, *args):
        result = self.git(*args)
        assert result.returncode == 1, f"relay git {' '.join(args)} did not fail:\n{result.stdout}\n{result.stderr}"
        assert result.stderr.startswith(f"relay git {args[0]}: ")
        return result

    def keygen_and_authorize(self):
        self.ok("keygen")
        self.server.authorize((self.state / "ssh/id_ed25519.pub").read_text())

    def listing(self):
        return sorted(path.relative_to(self.functions).as_posix() for path in self.functions.rglob("*"))

    @property
    def known_hosts(self):
        return self.state / "ssh/known_hosts"


@pytest.fixture
def host(tmp_path, git_server):
    return Host(tmp_path, git_server)


@pytest.fixture
def repo(git_server):
    return git_server.repository()


@pytest.fixture
def ready(host, repo, git_server):
    """A key registered with the server and a source set to *repo* (main)."""
    host.keygen_and_authorize()
    host.ok("set", git_server.url(repo))
    return host


# --- keygen ----------------------------------------------------------------------------

def test_keygen_writes_an_openssh_ed25519_key_and_prints_only_its_public_half(host):
    result = host.ok("keygen")
    key, public = host.state / "ssh/id_ed25519", host.state / "ssh/id_ed25519.pub"
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert key.read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True, check=True)
    line = public.read_text().strip()
    assert line.split()[:2] == derived.stdout.split()[:2] and line.startswith("ssh-ed25519 ")
    assert f"\n{line}\n" in result.stdout and "deploy key" in result.stdout
    assert "PRIVATE" not in result.stdout + result.stderr
    assert sorted(os.listdir(key.parent)) == ["id_ed25519", "id_ed25519.pub"]  # no temporary file left


def test_keygen_keeps_an_existing_key_unless_forced(host):
    host.ok("keygen")
    key = host.state / "ssh/id_ed25519"
    before = key.read_bytes()
    result = host.failing("keygen")
    assert "a deploy key already exists at /var/lib/relay/ssh/id_ed25519" in result.stderr
    assert "--force" in result.stderr and key.read_bytes() == before
    host.ok("keygen", "--force")
    assert key.read_bytes() != before and stat.S_IMODE(key.stat().st_mode) == 0o600


# --- set -------------------------------------------------------------------------------

def test_set_accepts_ssh_urls_only(host):
    result = host.failing("set", "https://github.com/acme/repo.git")
    assert result.stderr == ("relay git set: 'https://github.com/acme/repo.git' is an HTTPS URL; Relay syncs over "
                             "SSH only: use git@github.com:acme/repo.git\n")
    assert not (host.state / "git/source.json").exists()


def test_set_stores_the_source_and_a_second_set_overwrites_it(host):
    result = host.ok("set", "git@github.com:acme/repo.git", "--ref", "v2", "--path", "apps/relay/",
                     "--webhook-secret", "github-webhook")
    assert "Git source set: git@github.com:acme/repo.git, ref v2, path apps/relay, webhook secret " \
           "github-webhook." in result.stdout
    assert "relay git keygen" in result.stdout  # no key yet
    assert "secret 'github-webhook' is not in the secret store yet" in result.stderr
    source = host.state / "git/source.json"
    assert stat.S_IMODE(source.stat().st_mode) == 0o600
    assert json.loads(source.read_text()) == {"repository": "git@github.com:acme/repo.git", "ref": "v2",
                                              "path": "apps/relay", "webhook_secret": "github-webhook"}
    host.ok("set", "ssh://git@git.example.com:2222/acme/other.git")
    assert json.loads(source.read_text()) == {"repository": "ssh://git@git.example.com:2222/acme/other.git",
                                              "ref": "main", "path": "", "webhook_secret": None}


@pytest.mark.parametrize(("args", "message"), [
    (("--path", "../elsewhere"), "relay git set: --path '../elsewhere' must stay inside the repository"),
    (("--ref", "bad..ref"), "relay git set: --ref: 'bad..ref' is not a valid branch, tag or commit name"),
    (("--webhook-secret", "Not Valid"), "relay git set: --webhook-secret: 'Not Valid' is not a valid secret name"),
])
def test_set_rejects_bad_options(host, args, message):
    assert host.failing("set", "git@github.com:acme/repo.git", *args).stderr.startswith(message)


# --- sync: host keys ---------------------------------------------------------------------

def test_first_sync_trusts_the_host_and_pins_it_later_syncs_verify_quietly(ready, repo, git_server):
    repo.commit(function("hello"))
    first = ready.ok("sync")
    trusted = f"Trusted new host {git_server.known_hosts_name} (fingerprint {git_server.host_fingerprint()})"
    assert first.stdout.splitlines()[0] == trusted
    assert stat.S_IMODE(ready.known_hosts.stat().st_mode) == 0o600
    pinned = ready.known_hosts.read_text().splitlines()
    host_key = (git_server.host_key.parent / f"{git_server.host_key.name}.pub").read_text().split()
    assert pinned == [f"{git_server.known_hosts_name} {host_key[0]} {host_key[1]}"]
    second = ready.ok("sync")
    assert "Trusted" not in second.stdout and ready.known_hosts.read_text().splitlines() == pinned
    assert ready.listing() == ["hello", "hello/app.py", "hello/template.yaml"]


def test_a_replaced_host_key_fails_the_sync_safely_and_the_pin_is_kept(ready, repo, git_server):
    repo.commit(function("hello"))
    ready.ok("sync")
    pinned = ready.known_hosts.read_bytes()
    repo.commit({**function("intruder"), "hello": None})
    git_server.replace_host_key()
    result = ready.failing("sync")
    assert f"the host key of {git_server.known_hosts_name} has changed" in result.stderr
    assert "man-in-the-middle" in result.stderr and git_server.host_fingerprint() in result.stderr
    assert "remove the" in result.stderr and "/var/lib/relay/ssh/known_hosts" in result.stderr
    assert ready.known_hosts.read_bytes() == pinned
    assert ready.listing() == ["hello", "hello/app.py", "hello/template.yaml"]
    assert ready.failing("sync").stderr == result.stderr  # still refused: never replaced automatically


def test_git_uses_relay_key_only_and_says_when_the_server_refuses_it(host, repo, git_server):
    repo.commit(function("hello"))
    host.ok("keygen")  # not registered with the server
    host.ok("set", git_server.url(repo))
    result = host.failing("sync")
    assert "Permission denied (publickey" in result.stderr and "deploy key" in result.stderr
    assert host.listing() == []


# --- sync: refs, paths, exact replace --------------------------------------------------------

def test_branch_tag_and_commit_refs(ready, repo, git_server):
    first = repo.commit(function("one"))
    repo.tag("v1")
    repo.commit({**function("two"), "one": None})
    repo.commit(function("feature"), branch="feature")
    url = git_server.url(repo)

    ready.ok("sync")  # main
    assert ready.listing() == ["two", "two/app.py", "two/template.yaml"]
    for ref, expected in [("v1", ["one"]), ("feature", ["feature", "two"]), (first, ["one"]), (first[:10], ["one"])]:
        ready.ok("set", url, "--ref", ref)
        result = ready.ok("sync")
        assert sorted(os.listdir(ready.functions)) == expected, ref
        assert f"({ref} at " in result.stdout
    ready.ok("set", url, "--ref", "v1")
    repo.tag("v1", "main")  # a moved tag is followed: the remote is the source of truth
    ready.ok("sync")
    assert os.listdir(ready.functions) == ["two"]
    ready.ok("set", url, "--ref", "nope")
    result = ready.failing("sync")
    assert result.stderr == f"relay git sync: --ref 'nope' is neither a branch, a tag nor a commit of {url}\n"
    assert os.listdir(ready.functions) == ["two"]


def test_a_commit_no_branch_or_tag_reaches_is_fetched_by_id(ready, repo, git_server):
    repo.commit(function("on-main"))
    orphan = repo.commit(function("dangling"), branch="short-lived")
    repo.delete_branch("short-lived")
    git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=repo.path)
    ready.ok("set", git_server.url(repo), "--ref", orphan)
    ready.ok("sync")
    assert sorted(os.listdir(ready.functions)) == ["dangling", "on-main"]


def test_path_selects_a_subdirectory_of_a_monorepo(ready, repo, git_server):
    repo.commit({**{f"apps/relay/{k}": v for k, v in function("inside").items()}, **function("at-root"),
                 "escape": Symlink("/etc")})
    url = git_server.url(repo)
    ready.ok("set", url, "--path", "apps/relay")
    ready.ok("sync")
    assert ready.listing() == ["inside", "inside/app.py", "inside/template.yaml"]
    ready.ok("set", url, "--path", "apps/missing")
    assert "--path 'apps/missing' does not exist at ref 'main'" in ready.failing("sync").stderr
    ready.ok("set", url, "--path", "escape")
    assert "--path 'escape' leads out of the repository" in ready.failing("sync").stderr
    assert os.listdir(ready.functions) == ["inside"]


def test_sync_replaces_functions_exactly_and_zero_functions_is_fine(ready, repo):
    repo.commit({**function("keep"), **function("dropped"), **function("linked"), "Not_A_Name/template.yaml": "x",
                 "linked/passwd": Symlink("/etc/passwd"), "docs/readme.md": "not a function"})
    (ready.functions / "placed-by-hand").mkdir()
    (ready.functions / "placed-by-hand/template.yaml").write_text(TEMPLATE % "hand")
    result = ready.ok("sync")
    assert ready.listing() == ["dropped", "dropped/app.py", "dropped/template.yaml",
                               "keep", "keep/app.py", "keep/template.yaml"]
    assert "  removed  placed-by-hand" in result.stdout.splitlines()
    assert "  rejected linked" in result.stdout.splitlines()
    assert "Synced 2 functions from" in result.stdout
    assert "'Not_A_Name' is not a valid function name" in result.stderr
    assert ("linked/passwd: symbolic link leads outside the function; function 'linked' not synced"
            in result.stderr)

    repo.commit({"dropped": None})
    result = ready.ok("sync")
    assert "  removed  dropped" in result.stdout.splitlines() and os.listdir(ready.functions) == ["keep"]

    repo.commit({"README.md": "no functions here"}, replace=True)
    result = ready.ok("sync")
    assert os.listdir(ready.functions) == [] and "Synced 0 functions from" in result.stdout


def test_a_chain_of_links_out_is_rejected_and_the_synced_version_stays(ready, repo):
    """``a -> .``, ``b -> a/..``, ``c -> b/..`` each look inside as text; in /functions, c would be /."""
    canary = secrets.token_hex(20)
    (ready.state / "secrets").mkdir()
    (ready.state / "secrets/db-password").write_text(canary)
    repo.commit(function("chained"))
    ready.ok("sync")
    before = ready.listing()
    repo.commit({"chained/a": Symlink("."), "chained/b": Symlink("a/.."), "chained/c": Symlink("b/.."),
                 "chained/requirements.txt": Symlink("c/var/lib/relay/secrets/db-password")})
    result = ready.ok("sync")
    assert ("chained/b, chained/c, chained/requirements.txt: symbolic links lead outside the function; "
            "function 'chained' not synced") in result.stderr
    assert "  rejected chained" in result.stdout.splitlines() and "Synced 0 functions from" in result.stdout
    assert ready.listing() == before == ["chained", "chained/app.py", "chained/template.yaml"]
    assert canary not in result.stdout + result.stderr


def test_a_new_repository_is_cloned_afresh(ready, repo, git_server):
    repo.commit(function("first"))
    ready.ok("sync")
    other = git_server.repository("other.git")
    other.commit(function("second"))
    ready.ok("set", git_server.url(other))
    result = ready.ok("sync")
    assert f"The checkout is of {git_server.url(repo)}; cloning {git_server.url(other)}" in result.stdout
    assert os.listdir(ready.functions) == ["second"]


def test_a_sync_waits_for_the_one_running(ready, repo):
    repo.commit(function("hello"))
    with open(ready.state / "git/sync.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a running sync holds it
        waiting = subprocess.Popen(relay_git_command(ready.functions, ready.state, "sync"), cwd=ROOT,
                                   env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first_line = waiting.stdout.readline()
        assert first_line == "Another sync is running; waiting for it to finish\n"
        assert waiting.poll() is None and ready.listing() == []
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert ready.listing() == ["hello", "hello/app.py", "hello/template.yaml"]


def test_sync_needs_a_source_and_a_key(host, git_server, repo):
    assert host.failing("sync").stderr == ("relay git sync: no git source is configured; "
                                           "run 'relay git set <repository>' first\n")
    host.ok("set", git_server.url(repo))
    assert "there is no deploy key at /var/lib/relay/ssh/id_ed25519; run 'relay git keygen'" in \
           host.failing("sync").stderr


# --- status and remove ---------------------------------------------------------------------

def test_status_and_remove(host, repo, git_server):
    assert (host.ok("status").stdout, host.ok("remove").stdout) == ("No git source configured.\n",) * 2
    host.keygen_and_authorize()
    url = git_server.url(repo)
    host.ok("set", url, "--webhook-secret", "hook")
    lines = host.ok("status").stdout.splitlines()
    public = (host.state / "ssh/id_ed25519.pub").read_text().split()[1]
    assert lines[:4] == [f"Repository:     {url}", "Ref:            main", "Path:           (repository root)",
                         "Webhook secret: hook"]
    assert lines[4].startswith("Deploy key:     /var/lib/relay/ssh/id_ed25519 (present, SHA256:")
    assert lines[5:] == ["Checkout:       /var/lib/relay/git/checkout (absent)", "Commit:         (none)",
                         "Last sync:      never"]

    commit = repo.commit(function("hello"))
    host.ok("sync")
    status = host.ok("status").stdout
    lines = status.splitlines()
    assert lines[5:7] == ["Checkout:       /var/lib/relay/git/checkout (present)", f"Commit:         {commit}"]
    assert lines[7].startswith("Last sync:      ") and lines[7].endswith(f", 1 function from commit {commit[:12]}")
    assert public not in status and "PRIVATE" not in status  # never any key material

    document = json.loads(host.ok("status", "--json").stdout)
    assert {key: document[key] for key in ("configured", "repository", "ref", "path", "webhook_secret", "commit")} \
        == {"configured": True, "repository": url, "ref": "main", "path": None, "webhook_secret": "hook",
            "commit": commit}
    assert document["deploy_key"]["present"] and document["deploy_key"]["fingerprint"].startswith("SHA256:")
    assert document["checkout"] == {"path": "/var/lib/relay/git/checkout", "present": True}
    assert document["last_sync"]["commit"] == commit and document["last_sync"]["functions"] == ["hello"]

    result = host.ok("remove")
    assert result.stdout == f"Removed the git source {url} and its checkout; /functions and the deploy key were kept.\n"
    assert not (host.state / "git/source.json").exists() and not (host.state / "git/checkout").exists()
    assert (host.state / "ssh/id_ed25519").exists() and os.listdir(host.functions) == ["hello"]
    assert host.ok("remove").stdout == "No git source configured.\n"
    assert host.ok("status").stdout == "No git source configured.\n"
    assert json.loads(host.ok("status", "--json").stdout)["configured"] is False


def test_a_corrupt_source_fails_status_and_remove_and_is_kept(host):
    (host.state / "git").mkdir()
    (host.state / "git/source.json").write_text("{oops")
    for command in ("status", "remove", "sync"):
        assert "/var/lib/relay/git/source.json is corrupt (" in host.failing(command).stderr
    assert (host.state / "git/source.json").read_text() == "{oops"


# --- weight --------------------------------------------------------------------------------

HEAVY = ("gevent", "docker", "redis", "requests", "urllib3", "yaml", "git", "paramiko")


@pytest.mark.parametrize("args", [("keygen",), ("set", "git@github.com:acme/repo.git"), ("status",), ("remove",)])
def test_admin_git_commands_import_nothing_heavy(host, args):
    probe = (
        "import sys\n"
        "from relay.entry import main\n"
        f"code = main(['git', *{list(args)!r}])\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print('EXIT', code, 'HEAVY', heavy, file=sys.stderr)\n"
    )
    command = with_private_paths([sys.executable, "-c", probe], host.functions, host.state)
    result = subprocess.run(command, cwd=ROOT, env=base_env(), capture_output=True, text=True, timeout=60)
    assert "EXIT 0 HEAVY []" in result.stderr, result.stderr
