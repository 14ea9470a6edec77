"""Build contexts: tar archives in temporary files, never anything in /functions.

The function context holds the Dockerfile, the bootstrap, and the function's
files under ``function/``: every regular file and directory below the
function directory, except its top-level template.yaml (env values stay out
of images; the file still counts in the fingerprint). Symbolic links are
never followed: a link whose real path stays inside the function directory
is archived as a link, any other is left out with a warning (the loader has
already refused such a function; this is the backstop). A FIFO, socket or
device is never opened: it is left out with a warning (the loader refuses
one where Relay reads a file: the template, a handler module, a manifest). Modes are
normalised (0644, or 0755 when executable) and owners are root, so the
non-root execution user can read everything and change nothing.

Tarring reads files and blocks; under gevent it yields to the hub between
files (``time.sleep(0)`` is the cooperative yield when patched and costs
nothing when not), so a large function never stalls running invocations.
"""

from __future__ import annotations

import io
import logging
import os
import stat
import tarfile
import tempfile
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from relay.errors import BuildError
from relay.functions.function import TEMPLATE_FILE
from relay.functions.regular import kind_of
from relay.links import leads_outside

if TYPE_CHECKING:
    from relay.runtime.recipes import DependencyRecipe, FunctionRecipe

log = logging.getLogger("relay.runtime.build")

_YIELD_EVERY_BYTES = 256 * 1024
_YIELD_EVERY_ENTRIES = 64


def dependency_context(recipe: DependencyRecipe) -> IO[bytes]:
    """A temporary file holding the dependency image's context: the Dockerfile and the manifests."""
    archive = _Archive()
    try:
        archive.add_bytes("Dockerfile", recipe.dockerfile().encode())
        for name, data in recipe.manifests:
            archive.add_bytes(name, data)
        return archive.finish()
    except BaseException:
        archive.discard()
        raise


def function_context(recipe: FunctionRecipe) -> IO[bytes]:
    """A temporary file holding the function image's context (see the module docstring)."""
    archive = _Archive()
    try:
        archive.add_bytes("Dockerfile", recipe.dockerfile().encode())
        archive.add_directory("bootstrap")
        archive.add_bytes(f"bootstrap/{recipe.runtime.bootstrap}", recipe.bootstrap)
        archive.add_directory("function")
        _add_source(archive, Path(recipe.function.directory), recipe.function.name)
        for name, data in recipe.injected:
            archive.add_bytes(f"function/{name}", data)
        return archive.finish()
    except BaseException:
        archive.discard()
        raise


def _add_source(archive: _Archive, root: Path, function_name: str) -> None:
    for current, directories, files in os.walk(root, followlinks=False):
        directories.sort()
        base = Path(current)
        relative_base = base.relative_to(root)
        for name in sorted(directories):
            path = base / name
            if not path.is_symlink():
                archive.add_directory(_member(relative_base, name))
        for name in sorted(files) + sorted(name for name in directories if (base / name).is_symlink()):
            if current == str(root) and name == TEMPLATE_FILE:
                continue
            path = base / name
            member = _member(relative_base, name)
            try:
                info = path.lstat()
                if stat.S_ISLNK(info.st_mode):
                    _add_link(archive, root, path, member, function_name)
                elif stat.S_ISREG(info.st_mode):
                    archive.add_file(member, path, info)
                else:  # never opened: a FIFO would wait for a writer
                    log.warning("File is not a regular file; it is left out of the image",
                                extra={"function": function_name, "path": path.relative_to(root).as_posix(),
                                       "kind": kind_of(info.st_mode)})
            except OSError as error:
                raise BuildError(f"cannot read {path}: {error.strerror or error}") from None


def _add_link(archive: _Archive, root: Path, path: Path, member: str, function_name: str) -> None:
    target = os.readlink(path)
    relative = path.relative_to(root)
    if leads_outside(root, path):
        log.warning("Symbolic link points outside the function; it is left out of the image",
                    extra={"function": function_name, "path": relative.as_posix(), "target": target})
        return
    archive.add_link(member, target)


def _member(relative_base: Path, name: str) -> str:
    parts = ["function", *([] if str(relative_base) == "." else [relative_base.as_posix()]), name]
    return "/".join(parts)


class _Archive:
    """A tar stream into an anonymous temporary file."""

    def __init__(self) -> None:
        self.file: IO[bytes] = tempfile.TemporaryFile(prefix="relay-build-")
        self.tar = tarfile.open(fileobj=self.file, mode="w", format=tarfile.PAX_FORMAT)
        self._bytes_since_yield = 0
        self._entries_since_yield = 0

    def add_bytes(self, name: str, data: bytes) -> None:
        info = self._info(name, tarfile.REGTYPE, 0o644)
        info.size = len(data)
        self.tar.addfile(info, io.BytesIO(data))

    def add_directory(self, name: str) -> None:
        self.tar.addfile(self._info(name, tarfile.DIRTYPE, 0o755))
        self._maybe_yield(0)

    def add_link(self, name: str, target: str) -> None:
        info = self._info(name, tarfile.SYMTYPE, 0o777)
        info.linkname = target
        self.tar.addfile(info)
        self._maybe_yield(0)

    def add_file(self, name: str, path: Path, status: os.stat_result) -> None:
        executable = status.st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        info = self._info(name, tarfile.REGTYPE, 0o755 if executable else 0o644)
        info.mtime = int(status.st_mtime)
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as handle:
            opened = os.fstat(handle.fileno())
            if not stat.S_ISREG(opened.st_mode):
                raise BuildError(f"{path} changed while it was being archived; the build will be retried")
            size = opened.st_size
            info.size = size
            try:
                self.tar.addfile(info, handle)
            except OSError:
                raise BuildError(f"{path} changed while it was being archived; the build will be retried") from None
        self._maybe_yield(size)

    def finish(self) -> IO[bytes]:
        self.tar.close()
        self.file.seek(0)
        return self.file

    def discard(self) -> None:
        try:
            self.tar.close()
        finally:
            self.file.close()

    @staticmethod
    def _info(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.mode = mode
        info.mtime = 0
        return info

    def _maybe_yield(self, size: int) -> None:
        self._bytes_since_yield += size
        self._entries_since_yield += 1
        if self._bytes_since_yield >= _YIELD_EVERY_BYTES or self._entries_since_yield >= _YIELD_EVERY_ENTRIES:
            self._bytes_since_yield = self._entries_since_yield = 0
            time.sleep(0)
