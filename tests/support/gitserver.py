"""A real OpenSSH server on a free loopback port, serving real bare repositories.

    server = GitServer(tmp_path / "sshd").start()
    repo = server.repository("functions.git")
    repo.commit({"hello/template.yaml": "...", "hello/app.py": "..."})
    server.authorize(public_key_line)
    server.url(repo)   # ssh://root@127.0.0.1:<port>/…/functions.git

sshd listens on 127.0.0.1 only, with its own host key, authorized_keys and
pid file in the test's directory, and ignores /etc/ssh entirely. The fixture
starts and stops it (no systemd); ``replace_host_key`` restarts it on the
same port with a new key, as a man in the middle would appear.
"""

import getpass
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.redis_server import free_port
from tests.support.relay_process import ROOT, base_env
from tests.support.workers import with_private_paths

SSHD = "/usr/sbin/sshd"
GIT_ENV = {
    "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Relay Tests", "GIT_AUTHOR_EMAIL": "tests@relay.invalid",
    "GIT_COMMITTER_NAME": "Relay Tests", "GIT_COMMITTER_EMAIL": "tests@relay.invalid",
}


def relay_git_command(functions_dir, state_dir, *args):
    """``relay git *args*`` with *functions_dir* and *state_dir* as /functions and /var/lib/relay."""
    return with_private_paths([sys.executable, "-m", "relay", "git", *args], functions_dir, state_dir)


def relay_git(functions_dir, state_dir, *args, timeout=120):
    return subprocess.run(relay_git_command(functions_dir, state_dir, *args), cwd=ROOT, env=base_env(),
                          capture_output=True, text=True, timeout=timeout)


def git(*args, cwd=None):
    result = subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"
    return result.stdout.strip()


class Symlink(str):
    """A file content that is a symbolic link to this text instead."""


class BareRepository:
    """A bare repository and a work tree that commits and pushes to it."""

    def __init__(self, path):
        self.path = Path(path)
        self.work = self.path.with_name(self.path.name + ".work")
        git("init", "--quiet", "--bare", "--initial-branch=main", str(self.path))
        git("init", "--quiet", "--initial-branch=main", str(self.work))
        git("remote", "add", "origin", str(self.path), cwd=self.work)

    def commit(self, files, message="change", branch="main", replace=False):
        """Write *files* ({relative path: text, Symlink(target) or None to delete}) on *branch*,
        commit and push; *replace* first empties the tree. Returns the commit id."""
        if git("symbolic-ref", "--short", "HEAD", cwd=self.work) != branch:
            exists = git("branch", "--list", branch, cwd=self.work)
            git("checkout", "--quiet", *(() if exists else ("-b",)), branch, cwd=self.work)
        if replace:
            for entry in self.work.iterdir():
                if entry.name != ".git":
                    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        for relative, content in files.items():
            path = self.work / relative
            if content is None:
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink() or path.exists():
                path.unlink()
            if isinstance(content, Symlink):
                os.symlink(str(content), path)
            else:
                path.write_text(content)
        git("add", "--all", cwd=self.work)
        git("commit", "--quiet", "--allow-empty", "-m", message, cwd=self.work)
        git("push", "--quiet", "--force", "origin", f"HEAD:refs/heads/{branch}", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)

    def tag(self, name, commit="HEAD"):
        git("tag", "--force", name, commit, cwd=self.work)
        git("push", "--quiet", "--force", "origin", f"refs/tags/{name}", cwd=self.work)

    def delete_branch(self, branch):
        git("push", "--quiet", "origin", f":refs/heads/{branch}", cwd=self.work)


class GitServer:
    def __init__(self, directory):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.user = getpass.getuser()
        self.host_key = self.directory / "ssh_host_ed25519_key"
        self.authorized_keys = self.directory / "authorized_keys"
        self.config = self.directory / "sshd_config"
        self.log = self.directory / "sshd.log"
        self.process = None

    def url(self, repository):
        return f"ssh://{self.user}@127.0.0.1:{self.port}{repository.path}"

    @property
    def known_hosts_name(self):
        return f"[127.0.0.1]:{self.port}"

    def repository(self, name="functions.git"):
        return BareRepository(self.directory / name)

    def authorize(self, public_key_line):
        with open(self.authorized_keys, "a") as file:
            file.write(public_key_line.strip() + "\n")
        os.chmod(self.authorized_keys, 0o600)

    def host_fingerprint(self):
        output = subprocess.run(["ssh-keygen", "-l", "-f", f"{self.host_key}.pub"], capture_output=True,
                                text=True, check=True).stdout
        return output.split()[1]

    def start(self):
        if not os.path.exists(SSHD):
            pytest.fail(f"{SSHD} is missing: run scripts/setup (it installs openssh-server)")
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        if not self.host_key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_key)], check=True)
        self.authorized_keys.touch(mode=0o600)
        self.config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.host_key}\n"
            f"AuthorizedKeysFile {self.authorized_keys}\nPidFile {self.directory / 'sshd.pid'}\n"
            "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\nPrintMotd no\n"
            "AllowTcpForwarding no\nX11Forwarding no\nLogLevel VERBOSE\n")
        self.process = subprocess.Popen([SSHD, "-D", "-f", str(self.config), "-E", str(self.log)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    if sock.recv(64).startswith(b"SSH-"):
                        return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        pytest.fail(f"sshd did not start on port {self.port}:\n{self.log.read_text() if self.log.exists() else ''}")

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    def replace_host_key(self):
        """Restart on the same port with a new host key: what a man in the middle looks like."""
        self.stop()
        for path in (self.host_key, Path(f"{self.host_key}.pub")):
            path.unlink()
        return self.start()


@pytest.fixture
def git_server(tmp_path):
    server = GitServer(tmp_path / "sshd").start()
    yield server
    server.stop()
