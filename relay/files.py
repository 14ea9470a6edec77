"""Private directories and atomic writes: secrets, deploy keys, host-key pins, git config.

A reader sees the old file or the new one, never half of either: the data
goes to a temporary file in the same directory (named ``.<name>.<random>.tmp``,
so a listing can skip it), is flushed to disk with its final mode and owner
already set, and is renamed over the target; the directory is then synced,
so the rename itself survives a crash.

Whatever Relay writes under its state directory belongs to that
directory's owner (``owner_of``), and so does what git sync writes in
/functions. The service runs as that owner (systemd's DynamicUser owns
/var/lib/relay), while an operator runs ``sudo relay secret set`` or ``sudo
relay git keygen`` as root: root's files would be root:root 0600,
unreadable by the service, and systemd re-owns the directory's contents
only when the directory itself has the wrong owner. So a process running as
root gives every file and directory it makes there to the directory's
owner, before the file appears under its name.

Standard library only, and ``tempfile`` only when something is written: the
admin commands import this module.
"""

import os
from contextlib import suppress
from pathlib import Path
from typing import TextIO, TypeAlias

Owner: TypeAlias = tuple[int, int]   # (uid, gid)
StrPath: TypeAlias = str | os.PathLike[str]


def owner_of(directory: StrPath) -> Owner | None:
    """The (uid, gid) that what this process writes under *directory* (the state directory, /functions)
    must get, or None.

    None unless this process runs as root and *directory* exists and belongs
    to someone else: any other process can only make files of its own, and a
    directory root owns (or none yet: the first write makes it, and systemd
    re-owns the state directory at the service's first start) needs nothing
    changed.
    """
    if os.geteuid() != 0:
        return None
    try:
        status = os.stat(directory)
    except OSError:
        return None
    owner = (status.st_uid, status.st_gid)
    return None if owner == (os.geteuid(), os.getegid()) else owner


def private_directory(path: StrPath, owner: Owner | None = None) -> Path:
    """Make *path* (and its parents) exist, with mode 0700 on *path* itself, and *owner* (uid, gid) when given.

    A new directory is made 0700 from the start, never readable by others for
    a moment; an existing one is narrowed to 0700, and given to *owner* (one
    an older Relay made as root is repaired so). Something else at *path* is
    an error (FileExistsError).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        if not path.is_dir():
            raise
    os.chmod(path, 0o700)  # mkdir's mode is narrowed by the umask, and an old directory may be wider
    if owner is not None:
        os.chown(path, *owner)
    return path


def write_atomically(path: StrPath, data: bytes, mode: int = 0o600, owner: Owner | None = None) -> None:
    """Replace *path* with *data* (bytes), *mode* and *owner* (uid, gid; None keeps this process's), atomically
    and durably."""
    import tempfile  # only writers pay for it

    path = Path(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), mode)
            if owner is not None:
                os.fchown(file.fileno(), *owner)
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(temporary)
        raise
    sync_directory(path.parent)


def open_lock_file(path: StrPath, owner: Owner | None = None) -> TextIO:
    """*path* opened for appending (made when missing, never truncated), given to *owner* when not None:
    a file to flock."""
    lock = open(path, "a")
    if owner is not None:
        os.fchown(lock.fileno(), *owner)
    return lock


def give_tree(path: StrPath, owner: Owner | None) -> None:
    """Give *path* and everything under it to *owner* (uid, gid), never following a symbolic link.

    For what another program wrote there as root (git's clone and fetches).
    """
    if owner is None:
        return
    os.lchown(path, *owner)
    for directory, names, files in os.walk(path):
        for name in names + files:
            os.lchown(os.path.join(directory, name), *owner)


def sync_directory(directory: StrPath) -> None:
    """Make a rename or unlink in *directory* durable; a directory that cannot be synced is left as it is."""
    with suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
