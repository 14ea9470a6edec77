"""What the last sync left behind, read without git: the checked-out commit and the record.

Light on purpose (``relay git status`` reads it): HEAD is read from the
file, which sync always leaves detached at a full commit id.
"""

import json
import re
from datetime import UTC, datetime
from pathlib import Path

from relay.files import write_atomically

_FULL_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def head_commit(checkout):
    """The commit checked out in *checkout*; None if there is none."""
    try:
        head = (Path(checkout) / ".git" / "HEAD").read_text().strip()
    except OSError:
        return None
    return head if _FULL_COMMIT.fullmatch(head) else None


def record_last_sync(layout, source, commit, functions):
    record = {"time": datetime.now(UTC).astimezone().isoformat(timespec="seconds"), "commit": commit,
              "repository": source.repository, "ref": source.ref, "path": source.path, "functions": functions}
    write_atomically(layout.last_sync, (json.dumps(record, indent=2) + "\n").encode(), mode=0o600,
                     owner=layout.owner)


def last_sync(layout):
    """The record of the last successful sync, or None (also when it cannot be read)."""
    try:
        record = json.loads(layout.last_sync.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
