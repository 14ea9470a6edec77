#!/usr/bin/env python3
"""Build relay.pyz: Relay and its pinned dependencies in one executable file.

    python3 build_zipapp.py [-o relay.pyz] [--pythons 3.11,3.12,3.13] [--arches x86_64,aarch64]

zipimport cannot load C extensions, so the archive is a carrier: on first run
pyz/bootstrap.py unpacks it into a cache directory and runs Relay from there
(its docstring describes the cache). The outer zip reads fast because it holds
only a handful of entries -- zipimport reads the whole central directory at
every start:

    #!/usr/bin/env python3
    __main__.py                pyz/bootstrap.py with BUILD_ID and TARGETS filled in
    payload/relay.zip          the relay/ package
    payload/common.zip         dependency files identical for every target
    payload/cp311-x86_64.zip   the remaining files of one target (cpXY-arch), ...

Outer entries are stored uncompressed so that the bootstrap can read a payload
without inflating twice; the payloads themselves are deflated. Every archive
is written with sorted names, a fixed timestamp and normalised modes, so the
same inputs give the same bytes and the same BUILD_ID (the sha256 of the
payloads). Dependencies come from PyPI wheels for each target, installed with
pip into build/pyz-deps/ and reused by later builds.

The compiled speedups in OPTIONAL_PACKAGES (orjson, hiredis) are installed one
by one after the rest: a target they publish no wheel for gets a warning and
Relay without them, which then decodes events with the standard library's
json and parses Redis replies with redis-py's own parser (``relay start``
logs which, at DEBUG). Every other requirement must have a wheel for every
target, as before.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent
PACKAGE = REPO / "relay"
REQUIREMENTS = REPO / "requirements.txt"
BOOTSTRAP = REPO / "pyz" / "bootstrap.py"
DEPENDENCY_CACHE = REPO / "build" / "pyz-deps"

PYTHONS = ("3.11", "3.12", "3.13")
ARCHES = ("x86_64", "aarch64")
OPTIONAL_ARCHES = frozenset({"aarch64"})
OPTIONAL_PACKAGES = frozenset({"hiredis", "orjson"})   # speedups Relay runs without (relay/speedups.py)
SHEBANG = b"#!/usr/bin/env python3\n"
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
LEGACY_MANYLINUX_GLIBC = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


class BuildError(Exception):
    """The pyz cannot be built as asked."""


class NoWheels(BuildError):
    """Some requirement publishes no wheel for a target."""


@dataclass(frozen=True)
class Target:
    python: str
    arch: str

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    @property
    def tag(self) -> str:
        return f"{self.abi}-{self.arch}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    targets = [Target(python, arch) for arch in args.arches for python in args.pythons]
    try:
        dependencies = install_all(targets, REQUIREMENTS, DEPENDENCY_CACHE)
        build_id = build_pyz(args.output, PACKAGE, dependencies)
    except BuildError as error:
        print(f"build_zipapp: {error}", file=sys.stderr)
        return 1
    size = args.output.stat().st_size / 2**20
    print(f"wrote {args.output} ({size:.1f} MiB, build {build_id[:16]}) "
          f"for {', '.join(dependencies)} in {time.monotonic() - started:.1f}s")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=Path("relay.pyz"),
                        help="where to write the archive (default: ./relay.pyz)")
    parser.add_argument("--pythons", type=comma_list(PYTHONS), default=",".join(PYTHONS),
                        help="CPython versions to carry dependencies for (default: %(default)s)")
    parser.add_argument("--arches", type=comma_list(ARCHES), default=",".join(ARCHES),
                        help="Linux architectures to carry dependencies for (default: %(default)s)")
    return parser.parse_args(argv)


def comma_list(allowed: tuple[str, ...]):
    def parse(text: str) -> tuple[str, ...]:
        chosen = tuple(item.strip() for item in text.split(",") if item.strip())
        unknown = [item for item in chosen if item not in allowed]
        if unknown or not chosen:
            raise argparse.ArgumentTypeError(f"choose from {','.join(allowed)}")
        return chosen

    return parse


# -- dependencies ---------------------------------------------------------------


def install_all(targets: list[Target], requirements: Path, cache: Path) -> dict[str, Path]:
    """Install the requirements for each target; skip optional arches lacking wheels."""
    installed = {}
    for target in targets:
        try:
            installed[target.tag] = cached_install(requirements, target, cache)
        except NoWheels as missing:
            if target.arch not in OPTIONAL_ARCHES:
                raise
            print(f"warning: skipping {target.tag}: {missing}", file=sys.stderr)
    if not installed:
        raise BuildError("no target left to build for")
    prune_cache(cache, targets, keep=set(installed.values()))
    return installed


def prune_cache(cache: Path, targets: list[Target], keep: set[Path]) -> None:
    """Forget these targets' installs of older requirements, so build/ stays small."""
    for target in targets:
        for old in cache.glob(f"{target.tag}-*"):
            if old not in keep:
                shutil.rmtree(old, ignore_errors=True)


def cached_install(requirements: Path, target: Target, cache: Path) -> Path:
    """Install into cache/<tag>-<hash of the pip commands and requirements>, once.

    The requirements but OPTIONAL_PACKAGES go in with one pip command; each
    optional one then with its own, and one without a wheel for the target is
    left out with a warning.
    """
    required, optional = split_requirements(requirements.read_text())
    commands = [pip_command(target)] + [pip_command(target, line) for line in optional]
    fingerprint = hashlib.sha256("\0".join("\0".join(command[3:]) for command in commands).encode()
                                 + requirements.read_bytes())
    destination = cache / f"{target.tag}-{fingerprint.hexdigest()[:16]}"
    if destination.is_dir():
        return destination
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=cache, prefix=f".{target.tag}-"))
    try:
        listed = staging / "requirements.txt"
        listed.write_text("".join(line + "\n" for line in required))
        site = str(staging / "site")
        run_pip(commands[0] + ["-r", str(listed), "--target", site], target)
        for line, command in zip(optional, commands[1:], strict=True):
            try:
                run_pip(command + ["--target", site], target)
            except NoWheels:
                print(f"warning: {target.tag} gets no {line}: no wheel for it; relay.pyz runs there "
                      f"without it", file=sys.stderr)
        try:
            (staging / "site").rename(destination)
        except OSError:
            if not destination.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return destination


def split_requirements(text: str) -> tuple[list[str], list[str]]:
    """(required, optional) requirement lines, comments and blank lines dropped."""
    required, optional = [], []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name = re.split(r"[=<>!~;\[ ]", line, maxsplit=1)[0]
            (optional if canonical(name) in OPTIONAL_PACKAGES else required).append(line)
    return required, optional


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_command(target: Target, requirement: str | None = None) -> list[str]:
    """requirements.txt pins the transitive dependencies too, hence --no-deps.
    With *requirement*, the command installs that one; without, the caller adds ``-r FILE``."""
    platforms = [arg for tag in manylinux_platforms(target.arch) for arg in ("--platform", tag)]
    return [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--no-compile", "--no-deps", "--only-binary=:all:", "--implementation", "cp",
        "--python-version", target.python, "--abi", target.abi, *platforms,
        *([requirement] if requirement else []),
    ]


def manylinux_platforms(arch: str) -> list[str]:
    """Every manylinux tag to accept, oldest glibc first.

    pip matches --platform tags literally (manylinux_2_28 does not imply
    manylinux_2_17) and prefers the earlier ones, so this picks the build of
    each wheel that runs on the most systems.
    """
    legacy = [f"{name}_{arch}" for name in LEGACY_MANYLINUX_GLIBC]
    return legacy + [f"manylinux_2_{minor}_{arch}" for minor in range(17, 29)]


def run_pip(command: list[str], target: Target) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode == 0:
        return
    if "No matching distribution found" in result.stderr:
        reason = [line for line in result.stderr.splitlines() if "No matching distribution" in line]
        raise NoWheels(reason[0].removeprefix("ERROR: ").strip())
    raise BuildError(f"pip failed for {target.tag}:\n{result.stderr}")


def required_glibc(site: Path) -> tuple[int, int] | None:
    """The newest glibc any installed wheel needs, from the tags in its WHEEL file."""
    needs = []
    for wheel in site.glob("*.dist-info/WHEEL"):
        tags = re.findall(r"^Tag: \S+-\S+-(\S+)$", wheel.read_text(), re.MULTILINE)
        levels = [glibc_of_platform(tag) for tag in tags]
        levels = [level for level in levels if level]
        if levels:
            needs.append(min(levels))
    return max(needs, default=None)


def glibc_of_platform(platform: str) -> tuple[int, int] | None:
    match = re.match(r"manylinux_(\d+)_(\d+)_", platform)
    if match:
        return int(match.group(1)), int(match.group(2))
    return LEGACY_MANYLINUX_GLIBC.get(platform.split("_", 1)[0])


# -- the archive ----------------------------------------------------------------


def build_pyz(output: Path, package_dir: Path, dependency_dirs: Mapping[str, Path],
              bootstrap: Path = BOOTSTRAP) -> str:
    """Write the pyz for the package and per-target dependency trees; return BUILD_ID.

    dependency_dirs maps a target tag ("cp311-x86_64") to a site directory.
    """
    trees = {tag: tree_files(site, skip_top=("bin",)) for tag, site in dependency_dirs.items()}
    common, specific = split_common(trees)
    package = {f"{package_dir.name}/{name}": path for name, path in tree_files(package_dir).items()}
    payloads = {"relay": zip_bytes(package), "common": zip_bytes(common)}
    payloads.update((tag, zip_bytes(files)) for tag, files in specific.items())
    build_id = payload_digest(payloads)
    targets = {tag: required_glibc(site) for tag, site in dependency_dirs.items()}
    write_pyz(output, render_bootstrap(bootstrap.read_text(), build_id, targets), payloads)
    return build_id


def tree_files(root: Path, skip_top: tuple[str, ...] = ()) -> dict[str, Path]:
    """Archive name -> file for everything under root but bytecode and skip_top."""
    files = {}
    for directory, subdirs, names in os.walk(root):
        here = Path(directory)
        subdirs[:] = [d for d in subdirs if d != "__pycache__"
                      and not (here == root and d in skip_top)]
        for name in names:
            if not name.endswith(".pyc"):
                files[(here / name).relative_to(root).as_posix()] = here / name
    return files


def split_common(trees: Mapping[str, Mapping[str, Path]]):
    """Split per-target trees into (files identical in all, {tag: the rest})."""
    fingerprints = {tag: {name: fingerprint(path) for name, path in files.items()}
                    for tag, files in trees.items()}
    first, *others = fingerprints.values()
    shared = {name for name, print_ in first.items()
              if all(other.get(name) == print_ for other in others)}
    common = {name: path for name, path in next(iter(trees.values())).items() if name in shared}
    specific = {tag: {name: path for name, path in files.items() if name not in shared}
                for tag, files in trees.items()}
    return common, specific


def fingerprint(path: Path) -> tuple[bytes, int]:
    return hashlib.sha256(path.read_bytes()).digest(), file_mode(path)


def file_mode(path: Path) -> int:
    """0755 or 0644: keep the executable bit, drop the builder's umask."""
    return 0o755 if path.stat().st_mode & 0o111 else 0o644


def zip_bytes(files: Mapping[str, Path]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in sorted(files):
            entry = zip_entry(name, file_mode(files[name]), zipfile.ZIP_DEFLATED)
            archive.writestr(entry, files[name].read_bytes())
    return buffer.getvalue()


def zip_entry(name: str, mode: int, compression: int) -> zipfile.ZipInfo:
    entry = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
    entry.create_system = 3
    entry.external_attr = (stat.S_IFREG | mode) << 16
    entry.compress_type = compression
    return entry


def payload_digest(payloads: Mapping[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(payloads):
        digest.update(f"{name}\0{len(payloads[name])}\0".encode())
        digest.update(payloads[name])
    return digest.hexdigest()


def render_bootstrap(source: str, build_id: str,
                     targets: Mapping[str, tuple[int, int] | None]) -> str:
    listed = ", ".join(f"{tag!r}: {glibc!r}" for tag, glibc in targets.items())
    source = substitute(source, "BUILD_ID", repr(build_id))
    return substitute(source, "TARGETS", f"{{{listed}}}")


def substitute(source: str, name: str, value: str) -> str:
    rendered, count = re.subn(rf"^{name} = .*$", lambda _: f"{name} = {value}", source,
                              flags=re.MULTILINE)
    if count != 1:
        raise BuildError(f"bootstrap must assign {name} exactly once, found {count}")
    return rendered


def write_pyz(output: Path, main_py: str, payloads: Mapping[str, bytes]) -> None:
    """Write the executable archive, replacing output only once it is complete."""
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
    try:
        with open(partial, "wb") as file:
            file.write(SHEBANG)
            with zipfile.ZipFile(file, "w") as archive:
                archive.writestr(zip_entry("__main__.py", 0o644, zipfile.ZIP_STORED), main_py)
                for name in sorted(payloads):
                    entry = zip_entry(f"payload/{name}.zip", 0o644, zipfile.ZIP_STORED)
                    archive.writestr(entry, payloads[name])
        partial.chmod(0o755)
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
