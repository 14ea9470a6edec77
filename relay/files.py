"""Private directories and atomic writes: secrets, deploy keys, host-key pins, git config.

A reader sees the old file or the new one, never half of either: the data
goes to a temporary file in the same directory (named ``.<name>.<random>.tmp``,
so a listing can skip it), is flushed to disk with its final mode already
set, and is renamed over the target; the directory is then synced, so the
rename itself survives a crash.

Standard library only, and ``tempfile`` only when something is written: the
admin commands import this module.
"""

import os
from contextlib import suppress
from pathlib import Path


def private_directory(path):
    """Make *path* (and its parents) exist, with mode 0700 on *path* itself.

    A new directory is made 0700 from the start, never readable by others for
    a moment; an existing one is narrowed to 0700. Something else at *path*
    is an error (FileExistsError).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        if not path.is_dir():
            raise
    os.chmod(path, 0o700)  # mkdir's mode is narrowed by the umask, and an old directory may be wider
    return path


def write_atomically(path, data, mode=0o600):
    """Replace *path* with *data* (bytes) and *mode*, atomically and durably."""
    import tempfile  # only writers pay for it

    path = Path(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), mode)
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(temporary)
        raise
    sync_directory(path.parent)


def sync_directory(directory):
    """Make a rename or unlink in *directory* durable; a directory that cannot be synced is left as it is."""
    with suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
