"""What the last sync left behind, read without git: the checked-out commit and the record.

Light on purpose (``relay git status`` reads it): HEAD is read from the
file, which sync always leaves detached at a full commit id.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

from relay.files import write_atomically

if TYPE_CHECKING:
    from relay.gitsync.layout import Layout
    from relay.gitsync.source import Source

_FULL_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


class SyncRecord(TypedDict, total=False):
    """What the last sync brought, as last-sync.json holds it (read back as any JSON object)."""

    time: str               # RFC 3339 with the local offset
    commit: str
    repository: str
    ref: str
    path: str
    functions: list[str]


def head_commit(checkout: str | os.PathLike[str]) -> str | None:
    """The commit checked out in *checkout*; None if there is none."""
    try:
        head = (Path(checkout) / ".git" / "HEAD").read_text().strip()
    except OSError:
        return None
    return head if _FULL_COMMIT.fullmatch(head) else None


def record_last_sync(layout: Layout, source: Source, commit: str, functions: list[str]) -> None:
    record: SyncRecord = {
        "time": datetime.now(UTC).astimezone().isoformat(timespec="seconds"), "commit": commit,
        "repository": source.repository, "ref": source.ref, "path": source.path, "functions": functions}
    write_atomically(layout.last_sync, (json.dumps(record, indent=2) + "\n").encode(), mode=0o600,
                     owner=layout.owner)


def last_sync(layout: Layout) -> SyncRecord | None:
    """The record of the last successful sync, or None (also when it cannot be read)."""
    try:
        record = json.loads(layout.last_sync.read_text())
    except (OSError, ValueError):
        return None
    # Any JSON object: a hand-edited file may hold other keys or types, and its readers cope.
    return cast(SyncRecord, record) if isinstance(record, dict) else None
