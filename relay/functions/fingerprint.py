"""A function's source fingerprint: SHA-256 over its relative paths and bytes.

Every file below the function directory counts, nested ones included, in a
stable order; the absolute location and modification times do not. A
symbolic link counts as its target text and is never followed, so nothing
outside the directory can change the fingerprint.
"""

import hashlib
import os
from pathlib import Path

TAG_LENGTH = 16
_CHUNK = 1 << 20


def fingerprint_directory(directory):
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
            continue  # sockets and FIFOs carry no source
        size = path.stat().st_size
        digest.update(b"F\0%d\0%s\0%d\0" % (len(name), name, size))
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def _entries(root):
    """(relative posix path, path) of every file and symlink below *root*."""
    for current, directories, files in os.walk(root, followlinks=False):
        base = Path(current)
        linked = [name for name in directories if (base / name).is_symlink()]
        for name in [*files, *linked]:
            path = base / name
            yield path.relative_to(root).as_posix(), path
