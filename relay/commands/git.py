"""``relay git keygen | set | sync | status | remove``.

keygen, set, status and remove use the standard library only (keygen adds
``cryptography``); only sync loads GitPython and paramiko. Errors are one
line on stderr, prefixed with the command, and exit 1.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from relay.errors import GitSyncError, reason
from relay.gitsync.layout import Layout

if TYPE_CHECKING:
    from relay.commands import Arguments
    from relay.gitsync.history import SyncRecord
    from relay.gitsync.source import Source

NOTHING_CONFIGURED = "No git source configured."


def run(args: Arguments, layout: Layout | None = None) -> int:
    """Run one ``relay git`` command from docopt's *args*; return the exit code."""
    layout = Layout() if layout is None else layout
    command = next(word for word in _SUBCOMMANDS if args[word])
    try:
        return _SUBCOMMANDS[command](args, layout)
    except GitSyncError as error:
        print(f"relay git {command}: {error}", file=sys.stderr)
    except OSError as error:
        where = f"{error.filename}: " if error.filename else ""
        print(f"relay git {command}: {where}{reason(error)}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"\nrelay git {command}: interrupted", file=sys.stderr)
        return 130
    return 1


def _keygen(args: Arguments, layout: Layout) -> int:
    from relay.gitsync.keys import fingerprint, generate_key

    line = generate_key(layout, force=args["--force"])
    print(f"Generated an ed25519 deploy key in {layout.key} ({fingerprint(line)}).\n")
    print(line)
    print("\nRegister this public key with the repository as a read-only deploy key. On GitHub:\n"
          "Settings > Deploy keys > Add deploy key, and leave 'Allow write access' unchecked.\n"
          "Then run 'relay git set <repository>' and 'relay git sync'.")
    return 0


def _set(args: Arguments, layout: Layout) -> int:
    from relay.gitsync.source import make_source, save_source

    source = make_source(args["<repository>"], args["--ref"], args["--path"], args["--webhook-secret"])
    save_source(layout, source)
    print(f"Git source set: {source.repository}, ref {source.ref}, {_where(source)}"
          + (f", webhook secret {source.webhook_secret}" if source.webhook_secret else "") + ".")
    if not layout.key.exists():
        print("There is no deploy key yet: run 'relay git keygen' and register its public key first.")
    if source.webhook_secret:
        from relay.secrets.store import FileSecretStore

        if source.webhook_secret not in FileSecretStore(layout.state_dir / "secrets").names():
            print(f"relay git set: warning: secret {source.webhook_secret!r} is not in the secret store yet; "
                  f"store it with 'relay secret set {source.webhook_secret}'", file=sys.stderr)
    print("Run 'relay git sync' to bring its functions into /functions.")
    return 0


def _sync(args: Arguments, layout: Layout) -> int:
    from relay.gitsync.sync import sync

    result = sync(layout, report=lambda line: print(line, flush=True),
                  warn=lambda line: print(f"relay git sync: warning: {line}", file=sys.stderr, flush=True))
    changes = result.changes
    for label, names in (("added", changes.added), ("updated", changes.updated), ("removed", changes.removed),
                         ("rejected", changes.rejected)):
        for name in names:
            print(f"  {label:<8} {name}")
    count = len(result.functions) - len(changes.rejected)
    print(f"Synced {count} function{'' if count == 1 else 's'} from {result.source.repository} "
          f"({result.source.ref} at {result.commit[:12]}) into {layout.functions_dir}.")
    return 0


def _status(args: Arguments, layout: Layout) -> int:
    from relay.gitsync.history import head_commit, last_sync
    from relay.gitsync.keys import fingerprint, public_key_line
    from relay.gitsync.source import load_source

    source = load_source(layout)
    if args.get("--json"):
        return _status_json(source, layout)
    if source is None:
        print(NOTHING_CONFIGURED)
        return 0
    public = public_key_line(layout)
    if layout.key.exists():
        key = f"present, {fingerprint(public)}" if public else "present"
    else:
        key = "missing: run 'relay git keygen'"
    commit = head_commit(layout.checkout)
    rows = [
        ("Repository", source.repository),
        ("Ref", source.ref),
        ("Path", source.path or "(repository root)"),
        ("Webhook secret", source.webhook_secret or "(none)"),
        ("Deploy key", f"{layout.key} ({key})"),
        ("Checkout", f"{layout.checkout} ({'present' if layout.checkout.is_dir() else 'absent'})"),
        ("Commit", commit or "(none)"),
        ("Last sync", _last_sync_text(last_sync(layout), source)),
    ]
    width = max(len(label) for label, _ in rows) + 2
    for label, value in rows:
        print(f"{label + ':':<{width}}{value}")
    return 0


def _status_json(source: Source | None, layout: Layout) -> int:
    """``relay git status --json``: one object, its shape documented in docs/operations.md."""
    import json

    from relay.gitsync.history import head_commit, last_sync
    from relay.gitsync.keys import fingerprint, public_key_line

    public = public_key_line(layout) if layout.key.exists() else None
    document = {
        "configured": source is not None,
        "repository": source.repository if source else None,
        "ref": source.ref if source else None,
        "path": (source.path or None) if source else None,
        "webhook_secret": source.webhook_secret if source else None,
        "deploy_key": {"path": str(layout.key), "present": layout.key.exists(),
                       "fingerprint": fingerprint(public) if public else None},
        "checkout": {"path": str(layout.checkout), "present": layout.checkout.is_dir()},
        "commit": head_commit(layout.checkout) if source else None,
        "last_sync": (last_sync(layout) or None) if source else None,
    }
    print(json.dumps(document, indent=2))
    return 0


def _remove(args: Arguments, layout: Layout) -> int:
    import fcntl

    from relay.files import open_lock_file
    from relay.gitsync.source import load_source

    source = load_source(layout)  # a corrupt config is an error, and nothing is deleted
    if layout.git_dir.is_dir():
        with open_lock_file(layout.lock, layout.owner) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # never pull the checkout from under a running sync
            if layout.checkout.exists():
                shutil.rmtree(layout.checkout)
            for path in (layout.source, layout.last_sync):
                path.unlink(missing_ok=True)
    if source is None:
        print(NOTHING_CONFIGURED)
        return 0
    print(f"Removed the git source {source.repository} and its checkout; "
          f"/functions and the deploy key were kept.")
    return 0


def _where(source: Source) -> str:
    return f"path {source.path}" if source.path else "repository root"


def _last_sync_text(record: SyncRecord | None, source: Source) -> str:
    if not record:
        return "never"
    count = len(record.get("functions") or [])
    text = (f"{record.get('time')}, {count} function{'' if count == 1 else 's'} "
            f"from commit {str(record.get('commit'))[:12]}")
    synced = (record.get("repository"), record.get("ref"), record.get("path"))
    if synced != (source.repository, source.ref, source.path):
        text += " (before the source was last changed)"
    return text


_SUBCOMMANDS: dict[str, Callable[[Arguments, Layout], int]] = {
    "keygen": _keygen, "set": _set, "sync": _sync, "status": _status, "remove": _remove}
