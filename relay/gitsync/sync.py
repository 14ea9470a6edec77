"""One ``relay git sync``: source → host key → checkout → /functions.

    load the source (it must exist) and check the deploy key exists
    take the sync lock: a manual sync and a webhook sync never overlap
    pin or verify the host key (known_hosts), then fetch and check out the ref
    find the functions at the repository root or --path, make /functions match
    record the last sync (time, commit, functions) for ``relay git status``

Nothing in /functions changes unless every step before the copy succeeded.
A sync run while Relay runs only rewrites /functions; the running Relay's
reconciler notices the changes by itself.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from relay.errors import DeployKeyError, SourceError
from relay.files import open_lock_file, private_directory
from relay.gitsync.checkout import update_checkout
from relay.gitsync.history import record_last_sync
from relay.gitsync.known_hosts import verify_host
from relay.gitsync.materialize import Changes, find_functions, replace_functions
from relay.gitsync.source import Source, load_source

if TYPE_CHECKING:
    from relay.gitsync.layout import Layout

NO_SOURCE = "no git source is configured; run 'relay git set <repository>' first"


@dataclass(frozen=True)
class SyncResult:
    source: Source
    commit: str
    changes: Changes
    functions: list[str]


def sync(layout: Layout, report: Callable[[str], None], warn: Callable[[str], None]) -> SyncResult:
    """Run one sync; *report* and *warn* each take one line for the operator."""
    _configured_source(layout)
    if not layout.key.is_file():
        raise DeployKeyError(f"there is no deploy key at {layout.key}; run 'relay git keygen' and register "
                             f"its public key as a read-only deploy key of the repository")
    owner = layout.owner
    private_directory(layout.git_dir, owner)
    with open_lock_file(layout.lock, owner) as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report("Another sync is running; waiting for it to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        source = _configured_source(layout)  # again: it may have changed while this sync waited
        verify_host(source.url, layout, report)
        commit = update_checkout(layout, source, report)
        root = functions_root(layout.checkout, source)
        found = find_functions(root, warn)
        changes = replace_functions(layout.functions_dir, found, warn)
        record_last_sync(layout, source, commit, sorted(found))
    return SyncResult(source=source, commit=commit, changes=changes, functions=sorted(found))


def _configured_source(layout: Layout) -> Source:
    source = load_source(layout)
    if source is None:
        raise SourceError(NO_SOURCE)
    return source


def functions_root(checkout: str | os.PathLike[str], source: Source) -> Path:
    """The directory holding the functions: the checkout itself or its --path, never outside it."""
    checkout = Path(os.path.realpath(checkout))
    root = Path(os.path.realpath(checkout / source.path)) if source.path else checkout
    if root != checkout and checkout not in root.parents:
        raise SourceError(f"--path {source.path!r} leads out of the repository through a symbolic link; "
                          f"nothing was synced")
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise SourceError(f"--path {source.path!r} {what} at ref {source.ref!r}; nothing was synced")
    return root
