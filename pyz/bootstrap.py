"""relay.pyz bootstrap: unpack Relay once into a cache directory, then run it.

zipimport cannot load C extensions (gevent, greenlet, PyYAML's _yaml), so the
first run of a given relay.pyz extracts its payload to a directory keyed by the
build's content hash and the interpreter; every later run only checks that the
directory exists, puts it first on sys.path and calls ``relay.entry.main()``.
build_zipapp.py stores this file as the archive's ``__main__.py`` and fills in
BUILD_ID and TARGETS. It uses the standard library only, and its syntax still
parses on Python 3.6 so that an old interpreter gets a one-line message.

Cache location -- the first candidate that exists or can be created, and is
writable, wins:

1. ``$RELAY_PYZ_CACHE``
2. ``$CACHE_DIRECTORY``, set by systemd's ``CacheDirectory=`` (the first entry
   if it is a colon-separated list)
3. ``$XDG_CACHE_HOME/relay`` (an absolute XDG_CACHE_HOME only)
4. ``$HOME/.cache/relay`` (only when HOME is set)
5. ``/tmp/relay-pyz-<uid>``, created with mode 0700; relay.pyz refuses to run
   if it is not a directory owned by this user or is group/world-writable.

Inside the cache root:

``relay-<id>-cpXY-<arch>/``
    one extraction (``<id>`` is the first 16 hex digits of BUILD_ID). It only
    ever appears complete: it is unpacked and byte-compiled in
    ``.tmp-<id>-cpXY-<arch>-*/`` and then renamed into place.
``relay-<id>-cpXY-<arch>.lock``
    flock(2) lock file. Every running process holds it shared for as long as
    it lives; a first run holds it exclusive while extracting, so concurrent
    first runs wait for one another instead of racing.

After it extracts a new build, a process removes the extractions of other
builds whose lock it can take exclusively, that is, which no running process
uses. Extractions of the same build for other interpreters are kept.
"""

import fcntl
import os
import stat
import sys
import time

BUILD_ID = ""
TARGETS = {}

PROGRAM = "relay.pyz"
EXTRACTION_POLL = 0.05  # seconds between looks while another process extracts
ARCH_ALIASES = {"arm64": "aarch64", "amd64": "x86_64"}
IMPLEMENTATION_NAMES = {"cpython": "Python", "pypy": "PyPy"}


def main():
    target = check_supported()
    key = "%s-%s" % (BUILD_ID[:16], target)
    path = enter_extraction(cache_root(), key, target)
    sys.path.insert(0, path)
    from relay.entry import main as relay_main

    sys.exit(relay_main())


def fail(message):
    sys.stderr.write("%s: %s\n" % (PROGRAM, message))
    sys.exit(1)


# -- which interpreter is this ------------------------------------------------


def machine():
    arch = os.uname().machine
    return ARCH_ALIASES.get(arch, arch)


def check_supported():
    """Return this interpreter's target ("cp311-x86_64"), or exit with one line."""
    major, minor = sys.version_info[:2]
    arch = machine()
    target = "cp%d%d-%s" % (major, minor, arch)
    linux = sys.platform.startswith("linux")
    if sys.implementation.name != "cpython" or not linux or target not in TARGETS:
        name = IMPLEMENTATION_NAMES.get(sys.implementation.name, sys.implementation.name)
        where = arch if linux else "%s %s" % (sys.platform, arch)
        fail("unsupported %s %d.%d (%s); %s runs on %s"
             % (name, major, minor, where, PROGRAM, describe_targets(TARGETS)))
    check_glibc(TARGETS[target])
    return target


def describe_targets(targets):
    """'CPython 3.11 or 3.12 on Linux x86_64 or aarch64', grouped by version set."""
    versions_by_arch = {}
    for target in targets:
        python, arch = target.split("-", 1)
        versions_by_arch.setdefault(arch, []).append("%s.%s" % (python[2], python[3:]))
    arches_by_versions = {}
    for arch, versions in versions_by_arch.items():
        arches_by_versions.setdefault(tuple(versions), []).append(arch)
    return ", or ".join(
        "CPython %s on Linux %s" % (or_list(versions), or_list(arches))
        for versions, arches in arches_by_versions.items()
    )


def or_list(words):
    words = list(words)
    return words[0] if len(words) == 1 else "%s or %s" % (", ".join(words[:-1]), words[-1])


def check_glibc(required):
    """Exit with one line if the bundled manylinux wheels need a newer glibc."""
    if not required:
        return
    found = glibc_version()
    if found is None or found < tuple(required):
        has = "glibc %d.%d" % found if found else "no glibc"
        fail("needs glibc %d.%d or newer; this system has %s" % (required[0], required[1], has))


def glibc_version():
    try:
        _, version = os.confstr("CS_GNU_LIBC_VERSION").split()
        return tuple(int(part) for part in version.split(".")[:2])
    except (AttributeError, ValueError, OSError):
        return None


# -- where the cache lives ----------------------------------------------------


def cache_root():
    for candidate in cache_candidates(os.environ):
        if usable_directory(candidate):
            return candidate
    return private_tmp_directory()


def cache_candidates(environ):
    if environ.get("RELAY_PYZ_CACHE"):
        yield os.path.abspath(environ["RELAY_PYZ_CACHE"])
    first_systemd_cache = environ.get("CACHE_DIRECTORY", "").split(":")[0]
    if first_systemd_cache:
        yield first_systemd_cache
    if os.path.isabs(environ.get("XDG_CACHE_HOME", "")):
        yield os.path.join(environ["XDG_CACHE_HOME"], "relay")
    if environ.get("HOME"):
        yield os.path.join(environ["HOME"], ".cache", "relay")


def usable_directory(path):
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK)


def private_tmp_directory():
    """/tmp/relay-pyz-<uid>, refused if someone else could have planted it."""
    uid = os.geteuid()
    path = "/tmp/relay-pyz-%d" % uid
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as error:
        fail("no usable cache directory (%s: %s); set RELAY_PYZ_CACHE" % (path, error.strerror))
    status = os.lstat(path)
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != uid or status.st_mode & 0o022:
        fail(
            "refusing cache directory %s: it must be a directory owned by uid %d and "
            "not writable by group or others; set RELAY_PYZ_CACHE" % (path, uid)
        )
    return path


# -- extraction, under flock --------------------------------------------------


def enter_extraction(root, key, target):
    """Return the extraction directory for key, extracting it first if needed.

    Returns holding a shared lock on it, and deliberately leaves that fd open
    for the life of the process: no other build's cleanup removes a directory
    that is in use.
    """
    path = os.path.join(root, "relay-" + key)
    lock_path = path + ".lock"
    while True:
        if os.path.isdir(path):
            fd = locked(lock_path, fcntl.LOCK_SH)
            if os.path.isdir(path):
                return path
            os.close(fd)
        fd = locked(lock_path, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if fd is None:
            # Another first run is extracting, or has just finished and now
            # holds the lock shared for its whole life: waiting for exclusive
            # would wait for that process to exit. Poll for its result instead.
            time.sleep(EXTRACTION_POLL)
            continue
        extracted = not os.path.isdir(path)
        if extracted:
            extract(root, key, target, path)
        # Linux does not convert flock modes atomically: check that nobody
        # removed the extraction in between.
        fcntl.flock(fd, fcntl.LOCK_SH)
        if still_locking(fd, lock_path) and os.path.isdir(path):
            if extracted:
                remove_other_builds(root)
            return path
        os.close(fd)


def locked(lock_path, operation):
    """Open lock_path and flock it; retry if it was unlinked while we waited.
    With LOCK_NB, None when someone else holds it."""
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, operation)
        except BlockingIOError:
            os.close(fd)
            return None
        if still_locking(fd, lock_path):
            return fd
        os.close(fd)


def still_locking(fd, lock_path):
    try:
        on_disk = os.stat(lock_path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


def extract(root, key, target, path):
    """Unpack and byte-compile into a temporary directory, then rename it to path.

    Runs with the key's lock held exclusively, so leftovers of this key's
    temporary directories come from a crashed run and can go.
    """
    import compileall
    import io
    import py_compile
    import shutil
    import tempfile
    import zipfile

    remove_temporaries(root, key)
    temporary = tempfile.mkdtemp(dir=root, prefix=".tmp-%s-" % key)
    try:
        with zipfile.ZipFile(archive_path()) as outer:
            for payload in ("relay", "common", target):
                data = outer.read("payload/%s.zip" % payload)
                with zipfile.ZipFile(io.BytesIO(data)) as inner:
                    unpack(inner, temporary)
        # The directory never changes once renamed into place, so the
        # bytecode need not be checked against source timestamps.
        compileall.compile_dir(
            temporary, ddir=path, quiet=2, workers=1,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        os.rename(temporary, path)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def unpack(archive, destination):
    """Extract every member, restoring the permission bits stored by the build."""
    for member in archive.infolist():
        extracted = archive.extract(member, destination)
        mode = (member.external_attr >> 16) & 0o777
        if mode and not member.is_dir():
            os.chmod(extracted, mode)


def archive_path():
    loader = globals().get("__loader__")
    return getattr(loader, "archive", None) or os.path.dirname(os.path.abspath(__file__))


def remove_other_builds(root):
    """Remove extractions of other builds that no running process holds."""
    import re

    pattern = re.compile(r"^(?:relay-|\.tmp-)([0-9a-f]{16}-cp\d+-\w+)(?:\.lock|-.*)?$")
    keys = set()
    for name in os.listdir(root):
        match = pattern.match(name)
        if match and not match.group(1).startswith(BUILD_ID[:16] + "-"):
            keys.add(match.group(1))
    for key in sorted(keys):
        lock_path = os.path.join(root, "relay-%s.lock" % key)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            if still_locking(fd, lock_path):
                remove_extraction(root, key)
                os.unlink(lock_path)
        finally:
            os.close(fd)


def remove_extraction(root, key):
    """Rename first, so no process can ever start from a half-deleted directory."""
    remove_temporaries(root, key)
    path = os.path.join(root, "relay-" + key)
    if os.path.isdir(path):
        os.rename(path, os.path.join(root, ".tmp-%s-removed" % key))
        remove_temporaries(root, key)


def remove_temporaries(root, key):
    import shutil

    for name in os.listdir(root):
        if name.startswith(".tmp-%s-" % key):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


if __name__ == "__main__":
    main()
