"""Helpers for the relay.pyz tests (tests/test_zipapp.py and others): interpreters, tiny pyz builds, subprocess runs."""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import build_zipapp  # noqa: E402

ARCH = {"arm64": "aarch64", "amd64": "x86_64"}.get(os.uname().machine, os.uname().machine)
NOBODY = 65534
SUPPORTED = ("3.11", "3.12", "3.13")
CACHE_VARIABLES = ("RELAY_PYZ_CACHE", "CACHE_DIRECTORY", "XDG_CACHE_HOME", "HOME")


def load_bootstrap():
    """pyz/bootstrap.py as a module, for its pure functions."""
    spec = importlib.util.spec_from_file_location("relay_pyz_bootstrap", build_zipapp.BOOTSTRAP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pyenv_roots() -> list[Path]:
    roots = [os.environ.get("PYENV_ROOT"), str(Path.home() / ".pyenv")]
    if shutil.which("pyenv"):
        result = subprocess.run(["pyenv", "root"], capture_output=True, text=True)
        roots.append(result.stdout.strip())
    return list(dict.fromkeys(Path(root) for root in roots if root))


def find_python(version: str) -> str:
    """The newest pyenv CPython X.Y.Z; a missing one fails the test, it is not skipped."""
    found = {}
    for root in pyenv_roots():
        for binary in glob.glob(str(root / "versions" / f"{version}.*" / "bin" / f"python{version}")):
            release = Path(binary).parent.parent.name
            if re.fullmatch(r"\d+\.\d+\.\d+", release):
                found[tuple(map(int, release.split(".")))] = binary
    if not found:
        searched = ", ".join(str(root / "versions") for root in pyenv_roots())
        pytest.fail(f"CPython {version} is needed for this test and was not found under "
                    f"{searched}; install it with `pyenv install {version}`", pytrace=False)
    return found[max(found)]


def system_python() -> str:
    """A supported interpreter outside /root, which stays runnable as another user."""
    for directory in ("/usr/bin", "/usr/local/bin"):
        for version in SUPPORTED:
            candidate = Path(directory) / f"python{version}"
            if candidate.exists():
                return str(candidate)
    pytest.fail(f"no CPython {' / '.join(SUPPORTED)} in /usr/bin or /usr/local/bin to run "
                f"as uid {NOBODY}; install one (apt-get install python3)", pytrace=False)


def fallback_user() -> tuple[int, str, dict]:
    """(uid, interpreter, Popen kwargs) to run as a user whose permissions are enforced.

    Root may write to any directory, so as root the fallback tests run the pyz
    as nobody; otherwise as ourselves.
    """
    if os.geteuid() == 0:
        return NOBODY, system_python(), {"user": NOBODY, "group": NOBODY, "extra_groups": []}
    return os.geteuid(), find_python(SUPPORTED[0]), {}


def env_without_cache(**extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in CACHE_VARIABLES}
    env.update(extra)
    return env


def run(python: str, pyz: Path, *args: str, env: dict | None = None, timeout: float = 120,
        **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([python, str(pyz), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def run_with_cache(python: str, pyz: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    return run(python, pyz, *args, env=env_without_cache(RELAY_PYZ_CACHE=str(cache)))


def extraction_dirs(cache: Path) -> list[Path]:
    return sorted(path for path in cache.glob("relay-*") if path.is_dir())


def leftovers(cache: Path) -> list[Path]:
    return sorted(cache.glob(".tmp-*"))


def build_id(pyz: Path) -> str:
    source = zipfile.ZipFile(pyz).read("__main__.py").decode()
    return source.split("BUILD_ID = '", 1)[1].split("'", 1)[0]


def payload_targets(pyz: Path) -> list[str]:
    names = zipfile.ZipFile(pyz).namelist()
    return [name[len("payload/"):-len(".zip")] for name in names
            if name.startswith("payload/cp")]


def payload(pyz: Path, name: str) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(zipfile.ZipFile(pyz).read(f"payload/{name}.zip")))


def tag(python: str) -> str:
    """The target tag of an interpreter binary named pythonX.Y."""
    version = Path(python).name[len("python"):]
    return f"cp{version.replace('.', '')}-{ARCH}"


# -- a tiny pyz built from a temporary source tree -------------------------------

TINY_ENTRY = '''\
import sys

WATCHED = ("zipfile", "tempfile", "shutil", "hashlib", "compileall", "threading")


def main(argv=None):
    early = [name for name in WATCHED if name in sys.modules]
    import json
    import os

    import relay
    import tinydep

    json.dump({
        "argv": sys.argv[1:] if argv is None else argv,
        "relay": os.path.dirname(relay.__file__),
        "early": early,
        "tool": tinydep.TOOL,
        "flavour": tinydep.flavour(),
    }, sys.stdout)
    return 0
'''

TINYDEP_INIT = '''\
import os

TOOL = os.path.join(os.path.dirname(__file__), "tool.sh")


def flavour():
    with open(os.path.join(os.path.dirname(__file__), "flavour.txt")) as file:
        return file.read()
'''


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def tiny_sources(root: Path, tags: list[str], wheel_tag: str | None = None) -> tuple[Path, dict]:
    """A relay/ package and one dependency tree per tag.

    tinydep/__init__.py and the executable tool.sh are the same for every tag
    (so they go to common.zip); flavour.txt differs (so it goes to each tag's).
    wheel_tag, if given, goes into a fake dist-info's WHEEL file.
    """
    package = root / "relay"
    write(package / "__init__.py", '__version__ = "tiny"\n')
    write(package / "entry.py", TINY_ENTRY)
    sites = {}
    for target in tags:
        site = root / "site" / target
        write(site / "tinydep" / "__init__.py", TINYDEP_INIT)
        write(site / "tinydep" / "tool.sh", "#!/bin/sh\necho tool ran\n", 0o755)
        write(site / "tinydep" / "flavour.txt", target)
        write(site / "bin" / "console-script", "#!/wrong/python\n", 0o755)
        if wheel_tag:
            write(site / "fake-1.0.dist-info" / "WHEEL", f"Wheel-Version: 1.0\nTag: {wheel_tag}\n")
        sites[target] = site
    return package, sites


def build_tiny(root: Path, tags: list[str] | None = None, wheel_tag: str | None = None) -> Path:
    """Build a small pyz whose relay.entry.main() prints JSON about its environment."""
    tags = tags or [f"cp{v}-{ARCH}" for v in ("311", "312", "313")]
    package, sites = tiny_sources(root / "src", tags, wheel_tag)
    pyz = root / "tiny.pyz"
    build_zipapp.build_pyz(pyz, package, sites)
    return pyz


@contextlib.contextmanager
def cleaned_up(cache: Path, pyz: Path):
    """Leave a shared cache directory as it was: remove it if the test created
    it, else only the entries of this pyz's build."""
    existed = cache.exists()
    key = build_id(pyz)[:16]
    try:
        yield cache
    finally:
        if not existed:
            shutil.rmtree(cache, ignore_errors=True)
        elif cache.is_dir():
            for entry in cache.iterdir():
                if entry.name.startswith((f"relay-{key}-", f".tmp-{key}-")):
                    if entry.is_dir():
                        shutil.rmtree(entry, ignore_errors=True)
                    else:
                        entry.unlink(missing_ok=True)


@contextlib.contextmanager
def readable_by_all(pyz: Path):
    """A copy of pyz in a fresh world-readable directory under /tmp."""
    directory = Path(tempfile.mkdtemp(dir="/tmp", prefix="relay-pyz-test-"))
    try:
        directory.chmod(0o755)
        copy = directory / pyz.name
        shutil.copy2(pyz, copy)
        yield copy
    finally:
        shutil.rmtree(directory, ignore_errors=True)
