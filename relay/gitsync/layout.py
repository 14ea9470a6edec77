"""Where git sync keeps its files: fixed paths under /var/lib/relay.

Tests build a Layout on a temporary directory; the commands use the default.
Every file and directory git sync writes there belongs to the state
directory's owner (``owner``; see relay.files).
"""

from dataclasses import dataclass
from pathlib import Path

from relay.config import FUNCTIONS_DIR, STATE_DIR
from relay.files import Owner, owner_of


@dataclass(frozen=True)
class Layout:
    state_dir: Path = Path(STATE_DIR)
    functions_dir: Path = Path(FUNCTIONS_DIR)

    @property
    def owner(self) -> Owner | None:
        """(uid, gid) for what this process writes under the state directory, or None: relay.files.owner_of."""
        return owner_of(self.state_dir)

    @property
    def ssh_dir(self) -> Path:
        return self.state_dir / "ssh"

    @property
    def key(self) -> Path:
        """The private deploy key; its public half is next to it as id_ed25519.pub."""
        return self.ssh_dir / "id_ed25519"

    @property
    def public_key(self) -> Path:
        return self.ssh_dir / "id_ed25519.pub"

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / "known_hosts"

    @property
    def git_dir(self) -> Path:
        return self.state_dir / "git"

    @property
    def source(self) -> Path:
        return self.git_dir / "source.json"

    @property
    def checkout(self) -> Path:
        return self.git_dir / "checkout"

    @property
    def last_sync(self) -> Path:
        """What the last successful sync brought: time, commit, functions."""
        return self.git_dir / "last-sync.json"

    @property
    def lock(self) -> Path:
        """Held by a running sync, so a manual sync and a webhook sync never overlap."""
        return self.git_dir / "sync.lock"
