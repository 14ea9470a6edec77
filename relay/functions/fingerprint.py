"""A function's source fingerprint: SHA-256 over its relative paths and bytes.

Every file below the function directory counts, nested ones included, in a
stable order; the absolute location and modification times do not. A
symbolic link counts as its target text and is never followed, so nothing
outside the directory can change the fingerprint. FIFOs, sockets and devices
carry no source and are never opened: a file is opened without waiting and
read only when the opened file is a regular one.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from io import BufferedReader
from pathlib import Path

TAG_LENGTH = 16
_CHUNK = 1 << 20


def fingerprint_directory(directory: str | os.PathLike[str]) -> str:
    """The 64-hex SHA-256 fingerprint of *directory*'s content."""
    root = Path(directory)
    digest = hashlib.sha256()
    for relative, path in sorted(_entries(root)):
        name = relative.encode("utf-8", "surrogateescape")
        if path.is_symlink():
            target = os.readlink(path).encode("utf-8", "surrogateescape")
            digest.update(b"L\0%d\0%s\0%d\0%s" % (len(name), name, len(target), target))
            continue
        if not path.is_file():
            continue  # sockets, FIFOs and devices carry no source, and are never opened
        with _open_regular(path) as handle:
            if handle is None:
                continue  # swapped for one of those since the look
            size = os.fstat(handle.fileno()).st_size
            digest.update(b"F\0%d\0%s\0%d\0" % (len(name), name, size))
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


@contextmanager
def _open_regular(path: Path) -> Iterator[BufferedReader | None]:
    """*path* opened for reading, never following a link and never waiting (a FIFO would);
    None when what was opened is no regular file."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(descriptor, "rb") as handle:
        yield handle if stat.S_ISREG(os.fstat(descriptor).st_mode) else None


def _entries(root: Path) -> Iterator[tuple[str, Path]]:
    """(relative posix path, path) of every file and symlink below *root*."""
    for current, directories, files in os.walk(root, followlinks=False):
        base = Path(current)
        linked = [name for name in directories if (base / name).is_symlink()]
        for name in [*files, *linked]:
            path = base / name
            yield path.relative_to(root).as_posix(), path
