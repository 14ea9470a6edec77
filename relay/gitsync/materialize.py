"""The checkout's functions, copied into /functions so that it matches them exactly.

A function is a direct subdirectory of the functions root holding a regular
template.yaml file; other directories are not functions and are ignored.
One whose name is not a valid function name is skipped with a warning.

Copying never follows a symbolic link. A link whose real path (resolved in
the checkout, through any other links) stays inside its function directory
is copied as a link. A function with any other link -- absolute, climbing
out, or a chain such as ``a -> .``, ``b -> a/..`` whose text looks harmless
-- is rejected with a warning naming the link: it is not copied, and
whatever /functions held under its name stays as it was, so nothing from
outside the checkout (a host file, say) can ever land in /functions or be
reached from it. Files get mode 0644, or 0755 when executable, as git
records them.

Each changed function is written to a hidden staging directory in
/functions and swapped in with one rename (``renameat2`` RENAME_EXCHANGE
where the kernel has it, else two renames), so the reconciler never reads
a half-written function. A function whose files are already identical is
left alone. Everything else in /functions -- functions gone from the
repository, directories an operator put there, stray files -- is removed.

What a sync run as root writes belongs to the owner of /functions (see
relay.files), so that the service, when it owns /functions, can replace it
on its next (webhook) sync.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from relay.files import give_tree, owner_of
from relay.links import leads_outside, links_outside
from relay.names import function_name_problem

TEMPLATE_FILE = "template.yaml"
STAGING_PREFIX = ".relay-sync-"


Warn = Callable[[str], None]   # takes one line for the operator


@dataclass
class Changes:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)   # a link leads outside: /functions keeps what it had


def find_functions(root: str | os.PathLike[str], warn: Warn) -> dict[str, Path]:
    """{name: directory} of the functions directly under *root*."""
    found = {}
    for entry in sorted(os.scandir(root), key=lambda entry: entry.name):
        if entry.is_symlink():
            if os.path.lexists(Path(entry.path) / TEMPLATE_FILE):  # only a link that looks like a function
                warn(f"{entry.name!r} is a symbolic link, which sync never follows; skipped")
            continue
        if not entry.is_dir(follow_symlinks=False):
            continue
        template = Path(entry.path) / TEMPLATE_FILE
        if not os.path.lexists(template):
            continue
        if not template.is_file() or template.is_symlink():
            warn(f"{entry.name}/{TEMPLATE_FILE} is not a regular file; function {entry.name!r} skipped")
            continue
        problem = function_name_problem(entry.name)
        if problem:
            warn(f"directory skipped: {problem}")
            continue
        found[entry.name] = Path(entry.path)
    return found


def replace_functions(functions_dir: str | os.PathLike[str], found: Mapping[str, Path], warn: Warn) -> Changes:
    """Make *functions_dir* hold exactly the functions *found* ({name: source directory})."""
    functions_dir = Path(functions_dir)
    functions_dir.mkdir(parents=True, exist_ok=True)
    owner = owner_of(functions_dir)
    changes = Changes()
    for name, source in sorted(found.items()):
        outside = links_outside(source)
        if outside:
            warn(f"{', '.join(f'{name}/{link}' for link in outside)}: symbolic "
                 f"{'link leads' if len(outside) == 1 else 'links lead'} outside the function; "
                 f"function {name!r} not synced")
            changes.rejected.append(name)
            continue
        plan = plan_copy(source, name, warn)
        target = functions_dir / name
        if _is_real_directory(target) and matches(plan, target):
            changes.unchanged.append(name)
            continue
        (changes.updated if os.path.lexists(target) else changes.added).append(name)
        staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{name}-", dir=functions_dir))
        try:
            write(plan, staging)
            give_tree(staging, owner)
            _swap_in(staging, target)
        finally:
            _remove(staging)
    for entry in sorted(os.scandir(functions_dir), key=lambda entry: entry.name):
        if entry.name not in found:
            _remove(Path(entry.path))
            if not entry.name.startswith(STAGING_PREFIX):
                changes.removed.append(entry.name)
    return changes


# --- one function: what to copy, whether it is there already, and copying it ------------

@dataclass(frozen=True)
class Entry:
    relative: str
    kind: str                # "dir", "file" or "link"
    mode: int = 0            # files: 0o644 or 0o755
    target: str = ""         # links: the link text
    source: Path | None = None

    @property
    def file(self) -> Path:
        """The file a "file" entry copies (plan_copy gives every one its source)."""
        assert self.source is not None, f"{self.relative} is a {self.kind}, not a file"
        return self.source


def plan_copy(root: str | os.PathLike[str], name: str, warn: Warn) -> list[Entry]:
    """The entries of function directory *root* that are copied, in creation order."""
    root = Path(root)
    plan = []
    for current, directories, files in os.walk(root, followlinks=False):
        directories.sort()
        base = Path(current)
        for entry_name in sorted(files) + sorted(d for d in directories if (base / d).is_symlink()):
            path = base / entry_name
            relative = path.relative_to(root).as_posix()
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(path)
                if leads_outside(root, path):  # replace_functions has rejected such a function already
                    warn(f"{name}/{relative} is a symbolic link that leads outside the function; not copied")
                else:
                    plan.append(Entry(relative, "link", target=target))
            elif stat.S_ISREG(info.st_mode):
                plan.append(Entry(relative, "file", mode=0o755 if info.st_mode & 0o111 else 0o644, source=path))
        directories[:] = [d for d in directories if not (base / d).is_symlink()]
        for directory in directories:
            plan.append(Entry((base / directory).relative_to(root).as_posix(), "dir"))
    plan.sort(key=lambda entry: entry.relative.count("/"))  # parents before their contents
    return plan


def matches(plan: Sequence[Entry], target: Path) -> bool:
    """Whether directory *target* already holds exactly what *plan* would write."""
    wanted = {entry.relative: entry for entry in plan}
    actual: dict[str, tuple[str, int, str]] = {}
    for current, directories, files in os.walk(target, followlinks=False):
        base = Path(current)
        for entry_name in directories + files:
            path = base / entry_name
            info = path.lstat()
            relative = path.relative_to(target).as_posix()
            if stat.S_ISLNK(info.st_mode):
                actual[relative] = ("link", 0, os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                actual[relative] = ("dir", 0, "")
            elif stat.S_ISREG(info.st_mode):
                actual[relative] = ("file", stat.S_IMODE(info.st_mode), "")
            else:
                return False
    if actual != {relative: (entry.kind, entry.mode, entry.target) for relative, entry in wanted.items()}:
        return False
    return all(filecmp.cmp(entry.file, Path(target) / relative, shallow=False)
               for relative, entry in wanted.items() if entry.kind == "file")


def write(plan: Sequence[Entry], destination: str | os.PathLike[str]) -> None:
    os.chmod(destination, 0o755)  # mkdtemp made it 0700
    for entry in plan:
        path = Path(destination) / entry.relative
        if entry.kind == "dir":
            path.mkdir(mode=0o755)
            os.chmod(path, 0o755)
        elif entry.kind == "link":
            os.symlink(entry.target, path)
        else:
            shutil.copyfile(entry.file, path, follow_symlinks=False)
            os.chmod(path, entry.mode)


def _is_real_directory(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


# --- swapping a staged function in -------------------------------------------------------

def _swap_in(staging: Path, target: Path) -> None:
    """Put *staging* at *target* in one step; afterwards *staging* holds what was there, if anything."""
    if not os.path.lexists(target):
        os.rename(staging, target)
        return
    if _is_real_directory(target) and _exchange(staging, target):
        return
    aside = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}old-", dir=target.parent))
    os.rename(target, aside / "old")
    os.rename(staging, target)
    os.rename(aside, staging)  # the old version now sits at *staging*, which the caller removes


def _exchange(first: Path, second: Path) -> bool:
    """Atomically swap two paths with renameat2(RENAME_EXCHANGE); False when unsupported here."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (ImportError, OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange) == 0:
        return True
    error = ctypes.get_errno()
    if error in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: the filesystem or kernel cannot
        return False
    raise OSError(error, os.strerror(error), str(second))


def _remove(path: Path) -> None:
    """Remove a file, link or directory tree, never following a link."""
    if not os.path.lexists(path):
        return
    if _is_real_directory(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)
