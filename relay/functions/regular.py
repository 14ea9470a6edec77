"""Function files are regular files: anything else is named, never opened.

Opening a FIFO for reading waits for a writer that may never come, and a
device or a socket is no source either. So a template is opened without
blocking and refused unless the opened file is a regular file (the check is
on the opened descriptor, so a file swapped for a FIFO between a look and
the open is caught too), and the files Relay reads by name -- handler
modules, dependency manifests -- are refused when they are anything but a
regular file. Other such files in a function directory carry no source:
the fingerprint skips them and they never reach an image.

Standard library only: ``relay validate`` uses it.
"""

import os
import stat
from pathlib import Path

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def kind_of(mode: int) -> str:
    """What a file of st_mode *mode* is, in words: "a FIFO (named pipe)", "a directory", ... ("a regular file")."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "not a regular file"


def special_kind(path: str | os.PathLike) -> str | None:
    """The kind of *path* (links followed) when it is a FIFO, socket or device; None otherwise or when absent."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else kind_of(mode)


def read_regular(path: str | os.PathLike, limit: int) -> tuple[bytes | None, str | None]:
    """(at most *limit* bytes, None) of the regular file *path* (links followed), opened without
    blocking; (None, its kind) when it is anything but a regular file.

    Raises FileNotFoundError when it does not exist, OSError when it cannot be read.
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):  # never opened: opening a device may act on it, a socket cannot be opened
        return None, kind_of(mode)
    descriptor = os.open(path, _OPEN_FLAGS)
    with open(descriptor, "rb") as handle:  # it may have been swapped since: ask the opened file
        mode = os.fstat(handle.fileno()).st_mode
        if not stat.S_ISREG(mode):
            return None, kind_of(mode)
        return handle.read(limit), None


def special_files(root: str | os.PathLike) -> list[tuple[str, str]]:
    """(relative posix path, kind) of every FIFO, socket or device below *root*, and of every
    link to one, sorted; links to directories are not followed into."""
    root = Path(root)
    found = []
    for current, directories, files in os.walk(root, followlinks=False):
        base = Path(current)
        for name in [*files, *(name for name in directories if (base / name).is_symlink())]:
            kind = special_kind(base / name)
            if kind is not None:
                found.append(((base / name).relative_to(root).as_posix(), kind))
    return sorted(found)


def not_regular_message(kind: str) -> str:
    return f"is {kind}, not a regular file; Relay reads only regular files"
