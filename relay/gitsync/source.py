"""The git source: an SSH repository URL, a ref and an optional monorepo path.

``relay git set`` validates and stores it in /var/lib/relay/git/source.json
(0600); every reader validates it again, so a hand-edited file that no
longer makes sense is reported as corrupt instead of half-used. Only SSH
URLs are accepted, in git's two spellings:

    git@github.com:acme/repo.git                 scp-like (port 22)
    ssh://git@git.example.com:2222/acme/repo.git URL form, any port
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from relay.errors import SourceError, reason
from relay.files import private_directory, write_atomically
from relay.names import secret_name_problem

if TYPE_CHECKING:
    from relay.gitsync.layout import Layout

DEFAULT_REF = "main"
DEFAULT_SSH_PORT = 22
SSH_FORMS = "git@host:org/repo.git or ssh://git@host[:port]/org/repo.git"

_USER = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]*", re.ASCII)
_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?", re.ASCII)
_IPV6 = re.compile(r"[0-9A-Fa-f:.]+", re.ASCII)
_SCP_LIKE = re.compile(r"(?:(?P<user>[^@/:]+)@)?(?P<host>\[[^\]/]*\]|[^@/:\[\]]+):(?P<path>.*)", re.DOTALL)
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


@dataclass(frozen=True)
class SshUrl:
    user: str | None
    host: str           # lowercase, without IPv6 brackets
    port: int | None    # None: the default, 22
    path: str           # as the server is asked for it

    @property
    def known_hosts_name(self) -> str:
        """How OpenSSH names this host in known_hosts: host, or [host]:port off port 22."""
        if self.port in (None, DEFAULT_SSH_PORT):
            return self.host
        return f"[{self.host}]:{self.port}"

    @property
    def connect_port(self) -> int:
        return self.port or DEFAULT_SSH_PORT

    @property
    def repository_key(self) -> tuple[str, str]:
        """(host, path) compared case-insensitively, without '.git' or slashes: what a
        webhook payload's repository URLs are matched against."""
        return self.host, normalize_repository_path(self.path)


def normalize_repository_path(path: str) -> str:
    path = path.strip("/").lower()
    path = path[1:] if path.startswith("~") else path
    return path[:-4] if path.endswith(".git") else path


def parse_ssh_url(text: object) -> SshUrl:
    """The SshUrl of *text*, or SourceError saying what is wrong and which forms work."""
    if not isinstance(text, str) or not text.strip():
        raise SourceError(f"the repository is empty; use {SSH_FORMS}")
    if "://" in text:
        scheme = text.split("://", 1)[0].lower()
        if scheme == "ssh":
            return _parse_url_form(text)
        if scheme in ("https", "http"):
            raise SourceError(f"{text!r} is an {scheme.upper()} URL; Relay syncs over SSH only: "
                              f"use {_ssh_suggestion(text) or SSH_FORMS}")
        raise SourceError(f"{text!r} uses the {scheme}:// protocol; Relay syncs over SSH only: use {SSH_FORMS}")
    match = _SCP_LIKE.fullmatch(text)
    if not match:
        raise SourceError(f"{text!r} is not an SSH repository URL (it looks like a local path); use {SSH_FORMS}")
    host = match["host"]
    if host.startswith("["):
        host = host[1:-1]
    return _checked(text, match["user"], host, None, match["path"])


def _parse_url_form(text: str) -> SshUrl:
    parts = urlsplit(text)
    if parts.query or parts.fragment:
        raise SourceError(f"{text!r} has a query or fragment, which an SSH URL cannot have; use {SSH_FORMS}")
    if parts.password is not None:
        raise SourceError(f"{text!r} contains a password; SSH sync authenticates with the deploy key only")
    try:
        port = parts.port
    except ValueError:
        raise SourceError(f"{text!r} has an invalid port; use a number from 1 to 65535") from None
    if port == 0:
        raise SourceError(f"{text!r} has an invalid port; use a number from 1 to 65535")
    return _checked(text, parts.username, parts.hostname or "", port, parts.path)


def _checked(text: str, user: str | None, host: str, port: int | None, path: str) -> SshUrl:
    if user is not None and not _USER.fullmatch(user):
        raise SourceError(f"{text!r} has an invalid user name {user!r}")
    if not (_HOSTNAME.fullmatch(host) or (":" in host and _IPV6.fullmatch(host))):
        raise SourceError(f"{text!r} has an invalid host {host!r}; use {SSH_FORMS}")
    if not path.strip("/"):
        raise SourceError(f"{text!r} names no repository path; use {SSH_FORMS}")
    if path.startswith("-"):
        raise SourceError(f"{text!r} has a repository path starting with '-', which git refuses")
    if _UNSAFE.search(path):
        raise SourceError(f"{text!r} has spaces or control characters in its repository path")
    return SshUrl(user=user, host=host.lower(), port=port, path=path)


def _ssh_suggestion(text: str) -> str | None:
    """git@host:org/repo.git for an https://host/org/repo URL, when that is what it names."""
    parts = urlsplit(text)
    path = parts.path.strip("/")
    if not parts.hostname or not path or _UNSAFE.search(path):
        return None
    return f"git@{parts.hostname}:{path if path.endswith('.git') else path + '.git'}"


def ref_problem(ref: str) -> str | None:
    """Why *ref* cannot name a branch, tag or commit (git's ref-name rules), or None."""
    if not ref:
        return "the ref is empty"
    if (_REF_FORBIDDEN.search(ref) or ref.startswith(("-", "/")) or ref.endswith(("/", ".", ".lock"))
            or ".." in ref or "@{" in ref or "//" in ref or ref == "@" or "/." in ref or ref.startswith(".")):
        return f"{ref!r} is not a valid branch, tag or commit name"
    return None


def remote_refs(ref: str) -> list[str]:
    """The remote refs a push to *ref* updates: both the branch and the tag of that name,
    or just the one a fully qualified refs/heads/… or refs/tags/… names."""
    if ref.startswith(("refs/heads/", "refs/tags/")):
        return [ref]
    return [f"refs/heads/{ref}", f"refs/tags/{ref}"]


def normalize_path(path: str | None) -> str:
    """The --path as a clean relative path ('' for the repository root), or SourceError."""
    if path is None:
        return ""
    if _CONTROL.search(path):
        raise SourceError(f"--path {path!r} contains control characters")
    if path.startswith("/"):
        raise SourceError(f"--path {path!r} must be relative to the repository root, e.g. functions or apps/relay")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise SourceError(f"--path {path!r} must stay inside the repository: '..' is not allowed")
    return "/".join(parts)


@dataclass(frozen=True)
class Source:
    repository: str
    ref: str = DEFAULT_REF
    path: str = ""                      # "" is the repository root
    webhook_secret: str | None = None   # a secret *name* in the local store, never a value

    @property
    def url(self) -> SshUrl:
        return parse_ssh_url(self.repository)


def make_source(repository: str, ref: str | None = None, path: str | None = None,
                webhook_secret: str | None = None) -> Source:
    """A validated Source from ``relay git set``'s arguments."""
    parse_ssh_url(repository)
    ref = DEFAULT_REF if ref is None else ref
    problem = ref_problem(ref)
    if problem:
        raise SourceError(f"--ref: {problem}")
    if webhook_secret is not None and secret_name_problem(webhook_secret):
        raise SourceError(f"--webhook-secret: {secret_name_problem(webhook_secret)}")
    return Source(repository=repository, ref=ref, path=normalize_path(path), webhook_secret=webhook_secret)


def save_source(layout: Layout, source: Source) -> None:
    data = json.dumps(asdict(source), indent=2, sort_keys=True) + "\n"
    try:
        owner = layout.owner
        private_directory(layout.git_dir, owner)
        write_atomically(layout.source, data.encode(), mode=0o600, owner=owner)
    except OSError as error:
        raise SourceError(f"cannot write {layout.source}: {reason(error)}") from None


def load_source(layout: Layout) -> Source | None:
    """The stored Source, None when none is configured, SourceError when the file is corrupt."""
    try:
        text = layout.source.read_text()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise SourceError(f"cannot read {layout.source}: {reason(error)}") from None
    except UnicodeDecodeError:
        raise SourceError(f"{layout.source} is corrupt (not UTF-8 text); run 'relay git set' to replace it "
                          f"or delete the file") from None
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("repository"), str):
            raise ValueError("it has no repository")
        unknown = set(data) - {"repository", "ref", "path", "webhook_secret"}
        if unknown:
            raise ValueError(f"unknown keys {', '.join(sorted(unknown))}")
        if not all(isinstance(data.get(key), (str, type(None))) for key in ("ref", "path", "webhook_secret")):
            raise ValueError("ref, path and webhook_secret must be strings")
        return make_source(data["repository"], data.get("ref"), data.get("path"), data.get("webhook_secret"))
    except (ValueError, SourceError) as error:
        raise SourceError(f"{layout.source} is corrupt ({error}); run 'relay git set' to replace it "
                          f"or delete the file") from None
