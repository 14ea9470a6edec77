"""Symbolic links in a function directory: where they really lead.

A link's text says little: ``a -> .``, ``b -> a/..``, ``c -> b/..`` each look
harmless when normalised as text, yet ``c`` is the directory above the
function's parent. Containment is therefore decided on real paths: a link
stays inside when ``os.path.realpath`` of it lies in the real path of the
function directory. Every place that copies, archives or reads function files
asks here, and a link that leads outside is named, never followed.

Plain standard library and relay.errors: the loader, the runtime and git
sync all use it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from relay.errors import LinkOutside


def leads_outside(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> bool:
    """Whether *path*, a path below the function directory *root*, really resolves outside it."""
    return not _within(os.path.realpath(path), os.path.realpath(root))


def links_outside(root: str | os.PathLike[str]) -> list[str]:
    """The relative posix paths of the links below *root* that lead outside it, sorted."""
    top = Path(root)
    real_root = os.path.realpath(top)
    found = []
    for current, directories, files in os.walk(top, followlinks=False):
        base = Path(current)
        for name in [*directories, *files]:
            path = base / name
            if path.is_symlink() and not _within(os.path.realpath(path), real_root):
                found.append(path.relative_to(top).as_posix())
    return sorted(found)


def read_inside(root: str | os.PathLike[str], relative: str) -> bytes:
    """The bytes of the regular file *relative* below *root*, read without leaving *root*.

    A link that stays inside is read at its real path; one that leads outside
    raises LinkOutside naming *relative* (nothing of the target is read), and
    anything but a regular file at the real path raises OSError.
    """
    path = Path(root) / relative
    real = os.path.realpath(path)
    if not _within(real, os.path.realpath(root)):
        raise LinkOutside(f"{relative} is a symbolic link that leads outside the function directory")
    descriptor = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    with open(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(f"{relative} is not a regular file")
        return handle.read()


def _within(real: str, real_root: str) -> bool:
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)
