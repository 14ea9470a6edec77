"""What a GitHub webhook delivery asks for: pure functions over its headers and body.

A delivery schedules a sync only when it is a push to the configured
repository and ref that did not delete the ref. The repository matches when
one of the payload's repository URLs (ssh_url, clone_url, git_url, url,
html_url) names the same host and path as the configured SSH URL, or when
its full_name (``acme/repo``) equals the configured path -- which also covers
GitHub reached through another SSH host name such as ssh.github.com:443.
Paths compare case-insensitively and without '.git', as GitHub treats them.
A ref matches when the push updates the branch or the tag of that name.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from relay.errors import MalformedDelivery, SourceError
from relay.gitsync.source import normalize_repository_path, parse_ssh_url, remote_refs

if TYPE_CHECKING:
    from relay.gitsync.source import Source, SshUrl

# A delivery's JSON payload: whatever GitHub (or anyone who reaches the address) sent, each value checked where used.
Payload = dict[str, Any]

SIGNATURE_HEADER = "X-Hub-Signature-256"
_URL_KEYS = ("ssh_url", "clone_url", "git_url", "url", "html_url")


def signature_valid(secret: str, body: bytes, header: str | None) -> bool:
    """Whether *header* is the HMAC-SHA256 of *body* under *secret*, compared in constant time."""
    if not header:
        return False
    expected = "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode("ascii"), header.strip().encode("latin-1", "replace"))


def parse_payload(body: bytes, content_type: str | None) -> Payload:
    """The JSON payload of a delivery sent as application/json or as a form with a payload field."""
    document: bytes | str = body
    try:
        if (content_type or "").split(";")[0].strip().lower() == "application/x-www-form-urlencoded":
            fields = parse_qs(body.decode("utf-8"), strict_parsing=False)
            document = (fields.get("payload") or [""])[0]
        payload = json.loads(document)
    except (UnicodeDecodeError, ValueError):
        raise MalformedDelivery("the body is not a JSON payload") from None
    if not isinstance(payload, dict):
        raise MalformedDelivery("the payload is not a JSON object")
    return payload


def push_mismatch(payload: Payload, source: Source) -> str | None:
    """Why a push *payload* does not concern *source*, or None when it should trigger a sync."""
    if payload.get("deleted") is True:
        return f"{payload.get('ref')} was deleted"
    ref = payload.get("ref")
    if ref not in remote_refs(source.ref):
        return f"push to {ref}, not to {source.ref}"
    repository = payload.get("repository")
    if not isinstance(repository, dict) or not same_repository(repository, source.url):
        name = repository.get("full_name") if isinstance(repository, dict) else None
        return f"push to another repository ({name or 'unnamed'})"
    return None


def same_repository(repository: Payload, url: SshUrl) -> bool:
    host, path = url.repository_key
    for key in _URL_KEYS:
        value = repository.get(key)
        if isinstance(value, str) and _repository_key(value) == (host, path):
            return True
    full_name = repository.get("full_name")
    return isinstance(full_name, str) and normalize_repository_path(full_name) == path


def _repository_key(text: str) -> tuple[str, str] | None:
    """(host, path) of any git URL GitHub puts in a payload; None if it is none."""
    try:
        if "://" not in text or text.lower().startswith("ssh://"):
            return parse_ssh_url(text).repository_key
        parts = urlsplit(text)
        return (parts.hostname or "").lower(), normalize_repository_path(parts.path)
    except (SourceError, ValueError):
        return None
