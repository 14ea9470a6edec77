"""Private directories and atomic writes for keys, pins and config.

A reader sees the old file or the new one, never half of either: the data
goes to a temporary file in the same directory, is flushed to disk and is
renamed over the target with its final mode already set.
"""

import os
from contextlib import suppress
from pathlib import Path


def private_directory(path):
    """Make *path* (and its parents) exist, with mode 0700 on *path* itself."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
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
    """Make a rename or unlink in *directory* durable."""
    with suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
