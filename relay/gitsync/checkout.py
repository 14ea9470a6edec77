"""The managed clone in /var/lib/relay/git/checkout, driven with GitPython.

A sync fetches every branch and tag (forced and pruned: the remote is the
source of truth), resolves the ref as a branch, then a tag, then a commit,
and checks that commit out detached with a hard reset and a clean. It never
pulls or merges, so no merge state can ever appear. A checkout of another
repository, or one that is not a git repository any more, is deleted and
cloned again; a clone is made next to the checkout and renamed into place,
so a failed clone leaves nothing half-made behind.

git runs with Relay's key and known_hosts only: ``-F /dev/null`` drops every
ssh config, ``IdentitiesOnly`` and ``IdentityAgent=none`` keep other keys
out, ``StrictHostKeyChecking=yes`` with Relay's own known_hosts (pinned
before git runs) and no global file. The system's and the user's git config
are not read either, so no ``insteadOf`` or hook setting can redirect it.

The checkout belongs to the state directory's owner (relay.files), whoever
runs the sync: after a sync run as root, everything git wrote is given to
that owner, and git is told that this one checkout is safe
(``safe.directory``), since git refuses to work in a repository another user
owns. The owner is the service's user, which the shipped unit already lets
use the Docker socket: root trusting its checkout gives it nothing new.
"""

from __future__ import annotations

import re
import shlex
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import git

from relay.errors import GitSyncError, SourceError, reason
from relay.files import Owner, give_tree, private_directory
from relay.gitsync.source import remote_refs

if TYPE_CHECKING:
    from relay.gitsync.layout import Layout
    from relay.gitsync.source import Source

_COMMIT = re.compile(r"[0-9a-f]{4,64}")
_FULL_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # only a full id may be fetched by id
FETCH_REFSPECS = ("+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")


def git_environment(layout: Layout) -> dict[str, str]:
    """The variables every git command of a sync runs with: Relay's ssh, no system or user git config,
    and the checkout (wherever it is) marked safe for a root that does not own it."""
    ssh = ["ssh", "-F", "/dev/null", "-i", str(layout.key),
           "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "BatchMode=yes",
           "-o", f"UserKnownHostsFile={layout.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
           "-o", "StrictHostKeyChecking=yes", "-o", "UpdateHostKeys=no", "-o", "CheckHostIP=no",
           "-o", "ConnectTimeout=15", "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4"]
    return {
        "GIT_SSH_COMMAND": " ".join(shlex.quote(word) for word in ssh),
        "GIT_SSH_VARIANT": "ssh",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "safe.directory",
        "GIT_CONFIG_VALUE_0": str(layout.checkout),
        "LC_ALL": "C",
    }


def update_checkout(layout: Layout, source: Source, report: Callable[[str], None]) -> str:
    """Bring the checkout to the commit *source*'s ref names now; return that commit's id."""
    environment = git_environment(layout)
    owner = layout.owner
    repo = _open(layout.checkout, source.repository, report, environment)
    try:
        if repo is None:
            repo = _clone(layout, source.repository, environment, owner)
        _git(repo, "fetch", "--force", "--prune", "--no-write-fetch-head", "origin", *FETCH_REFSPECS)
        commit = _resolve(repo, source)
        _git(repo, "checkout", "--quiet", "--detach", "--force", commit)
        _git(repo, "reset", "--quiet", "--hard", commit)
        _git(repo, "clean", "-ffdxq")
        return commit
    finally:
        if repo is not None:
            repo.close()
        if owner is not None and layout.checkout.exists():
            give_tree(layout.checkout, owner)


def _open(path: Path, url: str, report: Callable[[str], None], environment: Mapping[str, str]) -> git.Repo | None:
    """The existing checkout of *url*, or None after deleting anything else found at *path*."""
    if not path.exists():
        return None
    try:
        repo = git.Repo(path)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        report(f"{path} is not a git checkout; cloning again")
        shutil.rmtree(path)
        return None
    repo.git.update_environment(**environment)
    try:
        current = repo.git.config("--get", "remote.origin.url")
    except git.GitCommandError:
        current = None
    if current == url:
        return repo
    repo.close()
    report(f"The checkout is of {current or 'an unknown repository'}; cloning {url}")
    shutil.rmtree(path)
    return None


def _clone(layout: Layout, url: str, environment: Mapping[str, str], owner: Owner | None) -> git.Repo:
    private_directory(layout.git_dir, owner)
    for leftover in layout.git_dir.glob(".checkout-*"):  # of a clone that was killed; sync holds the lock
        shutil.rmtree(leftover, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=".checkout-", dir=layout.git_dir))
    try:
        try:
            repo = git.Repo.clone_from(url, staging, env=environment, no_checkout=True, origin="origin")
        except git.GitCommandError as error:
            raise GitSyncError(f"cannot clone {url}: {_stderr(error)}") from None
        repo.close()
        give_tree(staging, owner)
        staging.rename(layout.checkout)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    repo = git.Repo(layout.checkout)
    repo.git.update_environment(**environment)
    return repo


def _resolve(repo: git.Repo, source: Source) -> str:
    """The commit of *source*'s ref: a branch first, then a tag, then a commit id."""
    ref = source.ref
    for remote_ref in remote_refs(ref):
        local = remote_ref.replace("refs/heads/", "refs/remotes/origin/", 1)
        commit = _commit(repo, local)
        if commit:
            return commit
    if _COMMIT.fullmatch(ref):
        commit = _commit(repo, ref)
        if commit is None and _FULL_COMMIT.fullmatch(ref):
            # A commit no branch or tag reaches: servers that allow it send it when asked by id.
            try:
                repo.git.fetch("--quiet", "--no-write-fetch-head", "origin", ref)
            except git.GitCommandError:
                pass
            commit = _commit(repo, ref)
        if commit:
            return commit
    raise SourceError(f"--ref {ref!r} is neither a branch, a tag nor a commit of {source.repository}")


def _commit(repo: git.Repo, name: str) -> str | None:
    try:
        return repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{name}^{{commit}}") or None
    except git.GitCommandError:
        return None


def _git(repo: git.Repo, command: str, *args: str) -> str:
    try:
        return getattr(repo.git, command)(*args)
    except git.GitCommandError as error:
        raise GitSyncError(f"git {command} failed: {_stderr(error)}") from None
    except OSError as error:
        raise GitSyncError(f"cannot run git {command}: {reason(error)}") from None


def _stderr(error: git.GitCommandError) -> str:
    text = " ".join(line.strip() for line in str(error.stderr or "").splitlines() if line.strip())
    text = text.removeprefix("stderr:").strip().strip("'").strip() or f"exit status {error.status}"
    if "Permission denied (publickey" in text:
        text += (" -- is the public key in /var/lib/relay/ssh/id_ed25519.pub registered as a deploy key "
                 "of this repository?")
    return text
