"""relay.pyz: the build, and the bootstrap run for real in subprocesses.

The full pyz is built once per session. Tests that only need the bootstrap's
behaviour use a tiny pyz built from a temporary source tree, which extracts in
milliseconds. Interpreters come from pyenv; a missing one fails the test.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

import pytest

from tests.support.zipapps import (
    ARCH,
    REPO,
    SUPPORTED,
    build_id,
    build_tiny,
    build_zipapp,
    cleaned_up,
    env_without_cache,
    extraction_dirs,
    fallback_user,
    find_python,
    leftovers,
    load_bootstrap,
    payload,
    readable_by_all,
    run,
    run_with_cache,
    tag,
    tiny_sources,
)

VERSION = re.search(r'__version__ = "(.+)"', (REPO / "relay" / "__init__.py").read_text())[1]
HOLD_SHARED_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_SH)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "cache"


def embedded_targets(pyz: Path) -> dict:
    source = zipfile.ZipFile(pyz).read("__main__.py").decode()
    return ast.literal_eval(re.search(r"^TARGETS = (.*)$", source, re.MULTILINE)[1])


def key_of(pyz: Path, python: str) -> str:
    return f"{build_id(pyz)[:16]}-{tag(python)}"


def assert_version_output(result: subprocess.CompletedProcess) -> None:
    assert (result.returncode, result.stdout, result.stderr) == (0, f"relay {VERSION}\n", "")


# -- the built file ---------------------------------------------------------------


def test_archive_is_one_executable_file_of_few_stored_entries(pyz):
    assert pyz.read_bytes().split(b"\n", 1)[0] == b"#!/usr/bin/env python3"
    assert stat.S_IMODE(pyz.stat().st_mode) == 0o755
    entries = zipfile.ZipFile(pyz).infolist()
    targets = [f"cp{v.replace('.', '')}-{arch}" for arch in ("x86_64", "aarch64") for v in SUPPORTED]
    expected = ["__main__.py", "payload/common.zip", "payload/relay.zip"]
    assert sorted(entry.filename for entry in entries) == sorted(
        expected + [f"payload/{target}.zip" for target in embedded_targets(pyz)])
    assert {entry.compress_type for entry in entries} == {zipfile.ZIP_STORED}
    assert set(embedded_targets(pyz)) <= set(targets)
    assert {f"cp{v.replace('.', '')}-x86_64" for v in SUPPORTED} <= set(embedded_targets(pyz))
    assert all(glibc[0] == 2 for glibc in embedded_targets(pyz).values())


def test_build_id_is_the_digest_of_the_payloads(pyz):
    outer = zipfile.ZipFile(pyz)
    payloads = {name[len("payload/"):-len(".zip")]: outer.read(name)
                for name in outer.namelist() if name.startswith("payload/")}
    assert build_id(pyz) == build_zipapp.payload_digest(payloads)


def test_payloads_hold_sources_only_and_share_common_files(pyz):
    common = set(payload(pyz, "common").namelist())
    assert "gevent/__init__.py" in common and "requests/__init__.py" in common
    assert "relay/entry.py" in payload(pyz, "relay").namelist()
    for target in embedded_targets(pyz):
        names = set(payload(pyz, target).namelist())
        assert not names & common
        assert any(name.startswith("gevent/") and name.endswith(".so") for name in names)
    for name in ["relay", "common", *embedded_targets(pyz)]:
        for member in payload(pyz, name).namelist():
            assert "__pycache__" not in member and not member.endswith(".pyc"), member
            assert not member.startswith("bin/"), member


def test_every_x86_64_target_carries_the_speedups(pyz):
    common = set(payload(pyz, "common").namelist())
    for target in (f"cp{v.replace('.', '')}-x86_64" for v in SUPPORTED):
        names = common | set(payload(pyz, target).namelist())
        for package in build_zipapp.OPTIONAL_PACKAGES:
            assert any(name.startswith(f"{package}/") and ".so" in name for name in names), (target, package)


# -- running it ------------------------------------------------------------------


SAY_SPEEDUPS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from relay import jsontext, speedups
print(json.dumps({"in_use": speedups.in_use(), "event": jsontext.loads('{"n": 18446744073709551616, "x": NaN}'),
                  "decoded": repr(jsontext.loads('{"a": [1, 2.5, "\\u00e9"]}'))}))
"""


def speedups_of(python: str, pyz: Path, cache: Path) -> dict:
    """What the extracted pyz runs with under *python*, and what it decodes."""
    assert_version_output(run_with_cache(python, pyz, cache, "--version"))
    [extraction] = [path for path in extraction_dirs(cache) if path.name.endswith(tag(python))]
    result = subprocess.run([python, "-I", "-c", SAY_SPEEDUPS, str(extraction)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_pyz_decodes_with_orjson_and_parses_with_hiredis(pyz, cache, version):
    said = speedups_of(find_python(version), pyz, cache)
    assert said["in_use"]["json_decoder"].startswith("orjson ")
    assert said["in_use"]["redis_parser"].startswith("hiredis ")
    assert said["event"]["n"] == 2**64 and said["event"]["x"] != said["event"]["x"]     # exact, and NaN
    assert said["decoded"] == "{'a': [1, 2.5, '\u00e9']}"


def without_speedups(site: Path):
    """A copytree ignore that leaves out the top-level files of OPTIONAL_PACKAGES (packages, dist-info, .libs)."""
    def ignored(directory, names):
        return [name for name in names if Path(directory) == site
                and name.split("-")[0].split(".")[0].lower() in build_zipapp.OPTIONAL_PACKAGES]

    return ignored


def test_a_pyz_without_the_speedups_runs_on_the_pure_python_paths(pyz, cache, tmp_path):
    """As on an interpreter orjson and hiredis publish no wheel for: the same trees, less those two."""
    targets = [build_zipapp.Target(version, ARCH) for version in SUPPORTED]
    sites = build_zipapp.install_all(targets, build_zipapp.REQUIREMENTS, build_zipapp.DEPENDENCY_CACHE)
    stripped = {}
    for target, site in sites.items():
        stripped[target] = tmp_path / "sites" / target
        shutil.copytree(site, stripped[target], ignore=without_speedups(site))
    assert not [path for path in stripped[targets[0].tag].iterdir() if path.name.startswith(("orjson", "hiredis"))]
    bare = tmp_path / "bare.pyz"
    build_zipapp.build_pyz(bare, REPO / "relay", stripped)
    said = speedups_of(find_python("3.12"), bare, cache)
    assert said["in_use"] == {"json_decoder": "json (standard library)",
                              "redis_parser": said["in_use"]["redis_parser"]}
    assert said["in_use"]["redis_parser"].endswith("(pure Python)")
    assert said["event"]["n"] == 2**64 and said["event"]["x"] != said["event"]["x"]
    assert said["decoded"] == "{'a': [1, 2.5, '\u00e9']}"


@pytest.mark.parametrize("version", SUPPORTED)
def test_version_cold_then_warm(pyz, cache, version):
    python = find_python(version)
    assert_version_output(run_with_cache(python, pyz, cache, "--version"))
    [extraction] = extraction_dirs(cache)
    assert extraction.name == f"relay-{key_of(pyz, python)}"
    assert not leftovers(cache)
    cache_tag = f"cpython-{version.replace('.', '')}"
    for source in (extraction / "relay").glob("*.py"):
        assert (source.parent / "__pycache__" / f"{source.stem}.{cache_tag}.pyc").is_file()
    assert len(list(extraction.rglob(f"*.{cache_tag}.pyc"))) > 500

    marker = extraction / "still-the-first-extraction"
    marker.touch()
    assert_version_output(run_with_cache(python, pyz, cache, "--version"))
    assert extraction_dirs(cache) == [extraction] and marker.exists()
    assert not leftovers(cache)


def test_runs_as_a_program_through_its_shebang(pyz, cache, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(find_python("3.12"))
    env = env_without_cache(RELAY_PYZ_CACHE=str(cache), PATH=f"{bin_dir}:/usr/bin:/bin")
    result = subprocess.run([str(pyz), "--version"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert_version_output(result)
    assert [path.name for path in extraction_dirs(cache)] == [
        f"relay-{build_id(pyz)[:16]}-cp312-{ARCH}"]


def test_concurrent_first_runs_all_succeed(pyz, tmp_path):
    python = find_python("3.11")
    for attempt in range(3):
        cache = tmp_path / f"cache-{attempt}"
        env = env_without_cache(RELAY_PYZ_CACHE=str(cache))
        runs = [subprocess.Popen([python, str(pyz), "--version"], env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for _ in range(3)]
        for process in runs:
            stdout, stderr = process.communicate(timeout=300)
            assert (process.returncode, stdout, stderr) == (0, f"relay {VERSION}\n", "")
        assert len(extraction_dirs(cache)) == 1
        assert not leftovers(cache)


@pytest.mark.parametrize("version", ["3.10"])
def test_unsupported_python_gets_one_line_and_exit_1(pyz, cache, version):
    result = run_with_cache(find_python(version), pyz, cache, "--version")
    supported = load_bootstrap().describe_targets(embedded_targets(pyz))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (f"relay.pyz: unsupported Python {version} ({ARCH}); "
                             f"relay.pyz runs on {supported}\n")
    assert not cache.exists()


def test_supported_list_names_what_the_build_carries():
    describe = load_bootstrap().describe_targets
    assert describe([f"cp{v}-{a}" for a in ("x86_64", "aarch64") for v in (311, 312, 313)]) == (
        "CPython 3.11, 3.12 or 3.13 on Linux x86_64 or aarch64")
    assert describe(["cp311-x86_64", "cp312-x86_64", "cp313-x86_64",
                     "cp312-aarch64", "cp313-aarch64"]) == (
        "CPython 3.11, 3.12 or 3.13 on Linux x86_64, or CPython 3.12 or 3.13 on Linux aarch64")
    assert describe(["cp312-x86_64"]) == "CPython 3.12 on Linux x86_64"


def test_executables_in_the_payload_stay_executable(pyz, cache):
    python = find_python("3.11")
    assert_version_output(run_with_cache(python, pyz, cache, "--version"))
    [extraction] = extraction_dirs(cache)
    executables = [member.filename
                   for name in ("common", tag(python))
                   for member in payload(pyz, name).infolist()
                   if (member.external_attr >> 16) & 0o111]
    assert executables
    for name in executables:
        assert os.stat(extraction / name).st_mode & 0o111, name


# -- where the cache goes ---------------------------------------------------------


@pytest.mark.parametrize("home", ["unset", "read-only", "/nonexistent"])
def test_without_a_writable_home_falls_back_to_private_tmp(pyz, home):
    uid, python, as_user = fallback_user()
    fallback = Path(f"/tmp/relay-pyz-{uid}")
    with contextlib.ExitStack() as stack:
        shared_pyz = stack.enter_context(readable_by_all(pyz))
        stack.enter_context(cleaned_up(fallback, pyz))
        env = env_without_cache(TMPDIR="/nonexistent-tmpdir")
        if home == "read-only":
            read_only = Path(tempfile.mkdtemp(dir="/tmp", prefix="relay-pyz-home-"))
            stack.callback(shutil.rmtree, read_only)
            read_only.chmod(0o555)
            env["HOME"] = str(read_only)
        elif home != "unset":
            env["HOME"] = home
        assert_version_output(run(python, shared_pyz, "--version", env=env, **as_user))
        assert (fallback / f"relay-{key_of(pyz, python)}").is_dir()
        status = fallback.stat()
        assert status.st_uid == uid and not status.st_mode & 0o022
        assert not Path("/nonexistent/.cache").exists()


def test_refuses_a_tmp_fallback_that_others_can_write(tmp_path):
    uid, python, as_user = fallback_user()
    fallback = Path(f"/tmp/relay-pyz-{uid}")
    with readable_by_all(build_tiny(tmp_path)) as tiny, world_writable(fallback, uid):
        before = sorted(fallback.iterdir())
        result = run(python, tiny, env=env_without_cache(), **as_user)
        assert result.returncode == 1
        assert result.stderr.count("\n") == 1
        assert result.stderr.startswith(f"relay.pyz: refusing cache directory {fallback}: ")
        assert sorted(fallback.iterdir()) == before


@contextlib.contextmanager
def world_writable(path: Path, uid: int):
    existed = path.exists()
    if not existed:
        path.mkdir()
        os.chown(path, uid, -1)
    mode = stat.S_IMODE(path.stat().st_mode)
    path.chmod(0o777)
    try:
        yield path
    finally:
        if existed:
            path.chmod(mode)
        else:
            shutil.rmtree(path)


@pytest.mark.parametrize("variables, chosen", [
    ({"RELAY_PYZ_CACHE": "{t}/a", "CACHE_DIRECTORY": "{t}/b", "XDG_CACHE_HOME": "{t}/c",
      "HOME": "{t}/d"}, "a"),
    ({"CACHE_DIRECTORY": "{t}/b:{t}/b2", "XDG_CACHE_HOME": "{t}/c", "HOME": "{t}/d"}, "b"),
    ({"XDG_CACHE_HOME": "{t}/c", "HOME": "{t}/d"}, "c/relay"),
    ({"HOME": "{t}/d"}, "d/.cache/relay"),
    ({"RELAY_PYZ_CACHE": "{t}/file/x", "CACHE_DIRECTORY": "{t}/file/y", "HOME": "{t}/d"},
     "d/.cache/relay"),
    ({"XDG_CACHE_HOME": "relative", "HOME": "{t}/d"}, "d/.cache/relay"),
])
def test_cache_location_order(tmp_path, variables, chosen):
    """A regular file at {t}/file makes the candidates below it unusable, even for root."""
    tiny = build_tiny(tmp_path / "tiny")
    (tmp_path / "file").write_text("")
    env = env_without_cache(**{name: value.format(t=tmp_path) for name, value in variables.items()})
    result = run(find_python("3.11"), tiny, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    used = [path.parent.relative_to(tmp_path).as_posix()
            for path in tmp_path.rglob("relay-*.lock")]
    assert used == [chosen]


# -- the extraction cache ---------------------------------------------------------


def plant_old_extraction(cache: Path, python: str) -> str:
    key = f"0000000000000000-{tag(python)}"
    (cache / f"relay-{key}" / "relay").mkdir(parents=True)
    (cache / f"relay-{key}" / "relay" / "__init__.py").write_text("")
    (cache / f"relay-{key}.lock").touch()
    (cache / f".tmp-{key}-crashed").mkdir()
    return key


EXTRACT_THEN_STAY = """
import fcntl, os, sys
lock, ready, path = sys.argv[1:]
fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("extracting", flush=True)
sys.stdin.readline()
os.rename(ready, path)
fcntl.flock(fd, fcntl.LOCK_SH)
print("shared", flush=True)
sys.stdin.read()
"""


def test_a_first_run_waiting_on_an_extraction_does_not_wait_for_the_extractor_to_exit(tmp_path, cache):
    """A first run that found another one extracting must use its extraction as
    soon as it is in place, although the extractor then holds the lock (shared)
    for as long as it runs, as a worker does."""
    python = find_python("3.11")
    tiny = build_tiny(tmp_path / "tiny")
    key = key_of(tiny, python)
    elsewhere = tmp_path / "elsewhere"
    assert run_with_cache(python, tiny, elsewhere).returncode == 0
    cache.mkdir(mode=0o700)
    extractor = subprocess.Popen(
        [python, "-c", EXTRACT_THEN_STAY, str(cache / f"relay-{key}.lock"), str(elsewhere / f"relay-{key}"),
         str(cache / f"relay-{key}")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert extractor.stdout.readline() == "extracting\n"
        waiting = subprocess.Popen([python, str(tiny)], env=env_without_cache(RELAY_PYZ_CACHE=str(cache)),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        assert waiting.poll() is None
        extractor.stdin.write("go\n")
        extractor.stdin.flush()
        assert extractor.stdout.readline() == "shared\n"
        stdout, stderr = waiting.communicate(timeout=30)
        assert waiting.returncode == 0, stderr
    finally:
        extractor.stdin.close()
        extractor.wait(timeout=30)


def test_first_run_of_a_new_build_removes_unused_old_builds(pyz, cache):
    python = find_python("3.11")
    plant_old_extraction(cache, python)
    assert_version_output(run_with_cache(python, pyz, cache, "--version"))
    key = key_of(pyz, python)
    assert sorted(path.name for path in cache.iterdir()) == [f"relay-{key}", f"relay-{key}.lock"]


def test_an_old_build_in_use_is_kept_until_released(pyz, cache):
    python = find_python("3.11")
    old = plant_old_extraction(cache, python)
    holder = subprocess.Popen([python, "-c", HOLD_SHARED_LOCK, str(cache / f"relay-{old}.lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert_version_output(run_with_cache(python, pyz, cache, "--version"))
        assert (cache / f"relay-{old}").is_dir() and (cache / f"relay-{old}.lock").exists()
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)

    ours = cache / f"relay-{key_of(pyz, python)}"
    shutil.rmtree(ours)
    assert_version_output(run_with_cache(python, pyz, cache, "--version"))
    assert extraction_dirs(cache) == [ours]
    assert not (cache / f"relay-{old}.lock").exists() and not leftovers(cache)


def test_same_build_for_other_interpreters_is_kept(pyz, cache):
    first, second = find_python("3.11"), find_python("3.12")
    assert_version_output(run_with_cache(first, pyz, cache, "--version"))
    assert_version_output(run_with_cache(second, pyz, cache, "--version"))
    assert [path.name for path in extraction_dirs(cache)] == sorted(
        f"relay-{key_of(pyz, python)}" for python in (first, second))


def test_crashed_extraction_of_the_same_build_is_cleared(tmp_path, cache):
    python = find_python("3.11")
    tiny = build_tiny(tmp_path / "tiny")
    stale = cache / f".tmp-{key_of(tiny, python)}-crashed"
    (stale / "relay").mkdir(parents=True)
    result = run_with_cache(python, tiny, cache)
    assert result.returncode == 0, result.stderr
    assert not leftovers(cache)


@pytest.mark.parametrize("version", SUPPORTED)
def test_warm_start_imports_no_extraction_machinery(tmp_path, cache, version):
    """zipfile imports threading, which gevent has to patch before it is used."""
    python = find_python(version)
    tiny = build_tiny(tmp_path / "tiny")
    assert run_with_cache(python, tiny, cache).returncode == 0
    warm = run_with_cache(python, tiny, cache)
    assert warm.returncode == 0, warm.stderr
    baseline = subprocess.run(
        [python, "-c", "import sys; print(' '.join(n for n in sys.argv[1:] if n in sys.modules))",
         "zipfile", "tempfile", "shutil", "hashlib", "compileall", "threading"],
        env=env_without_cache(), capture_output=True, text=True, check=True)
    assert set(json.loads(warm.stdout)["early"]) <= set(baseline.stdout.split())


def test_tiny_payload_runs_with_its_executable_and_its_own_target_files(tmp_path, cache):
    python = find_python("3.12")
    tiny = build_tiny(tmp_path / "tiny")
    result = run_with_cache(python, tiny, cache, "some", "args")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["argv"] == ["some", "args"]
    assert report["flavour"] == tag(python)
    assert Path(report["relay"]).parent == extraction_dirs(cache)[0]
    assert subprocess.run([report["tool"]], capture_output=True, text=True).stdout == "tool ran\n"
    assert not (extraction_dirs(cache)[0] / "bin").exists()


def test_glibc_older_than_the_wheels_need_gets_one_line(tmp_path, cache):
    python = find_python("3.11")
    tiny = build_tiny(tmp_path / "tiny", wheel_tag=f"cp311-cp311-manylinux_2_99_{ARCH}")
    result = run_with_cache(python, tiny, cache)
    assert result.returncode == 1
    assert re.fullmatch(r"relay\.pyz: needs glibc 2\.99 or newer; this system has glibc \d+\.\d+\n",
                        result.stderr)


# -- the builder ------------------------------------------------------------------


def test_same_sources_give_the_same_bytes(tmp_path):
    tags = [f"cp311-{ARCH}", f"cp312-{ARCH}"]
    package, sites = tiny_sources(tmp_path / "src", tags)
    first = build_zipapp.build_pyz(tmp_path / "first.pyz", package, sites)
    for path in (tmp_path / "src").rglob("*"):
        os.utime(path, (1, 1))
    (package / "entry.py").chmod(0o600)
    second = build_zipapp.build_pyz(tmp_path / "second.pyz", package, sites)
    assert first == second
    assert (tmp_path / "first.pyz").read_bytes() == (tmp_path / "second.pyz").read_bytes()

    with open(package / "entry.py", "a") as file:
        file.write("# changed\n")
    assert build_zipapp.build_pyz(tmp_path / "third.pyz", package, sites) != first


def test_files_identical_for_all_targets_go_to_common(tmp_path):
    tiny = build_tiny(tmp_path)
    assert payload(tiny, "relay").namelist() == ["relay/__init__.py", "relay/entry.py"]
    assert payload(tiny, "common").namelist() == ["tinydep/__init__.py", "tinydep/tool.sh"]
    for target in (f"cp{v}-{ARCH}" for v in (311, 312, 313)):
        assert payload(tiny, target).namelist() == ["tinydep/flavour.txt"]


def test_missing_optional_arch_wheels_skip_that_target_with_a_warning(monkeypatch, capsys,
                                                                       tmp_path):
    def install(requirements, target, cache):
        if target.tag == "cp311-aarch64":
            raise build_zipapp.NoWheels("No matching distribution found for gevent==26.9.0")
        return tmp_path / target.tag

    monkeypatch.setattr(build_zipapp, "cached_install", install)
    targets = [build_zipapp.Target(v, a) for a in ("x86_64", "aarch64") for v in SUPPORTED]
    installed = build_zipapp.install_all(targets, Path("requirements.txt"), tmp_path)
    assert list(installed) == [t.tag for t in targets if t.tag != "cp311-aarch64"]
    assert "warning: skipping cp311-aarch64: No matching distribution" in capsys.readouterr().err

    x86_64 = [build_zipapp.Target("3.11", "x86_64")]
    monkeypatch.setattr(build_zipapp, "cached_install", no_wheels)
    with pytest.raises(build_zipapp.NoWheels):
        build_zipapp.install_all(x86_64, Path("requirements.txt"), tmp_path)


def no_wheels(*_):
    raise build_zipapp.NoWheels("No matching distribution found")


def test_pip_is_asked_for_exact_pins_and_every_manylinux_tag():
    command = build_zipapp.pip_command(build_zipapp.Target("3.12", "aarch64"))
    assert {"--no-deps", "--only-binary=:all:", "--no-compile"} <= set(command)
    for option, value in [("--python-version", "3.12"), ("--abi", "cp312"),
                          ("--implementation", "cp")]:
        assert command[command.index(option) + 1] == value
    platforms = {command[i + 1] for i, arg in enumerate(command) if arg == "--platform"}
    assert {f"manylinux_2_{minor}_aarch64" for minor in range(17, 29)} <= platforms
    assert {"manylinux2014_aarch64", "manylinux2010_aarch64", "manylinux1_aarch64"} <= platforms


def test_the_speedups_are_optional_requirements_and_the_rest_are_not():
    required, optional = build_zipapp.split_requirements(
        "# comment\ngevent==26.9.0\nhiredis==3.5.0   # speedup\n\nOrJSON==3.13.0\nredis==8.1.0\n")
    assert (required, optional) == (["gevent==26.9.0", "redis==8.1.0"], ["hiredis==3.5.0", "OrJSON==3.13.0"])
    _, pinned = build_zipapp.split_requirements(build_zipapp.REQUIREMENTS.read_text())
    assert sorted(build_zipapp.canonical(line.split("==")[0]) for line in pinned) == ["hiredis", "orjson"]


def test_a_speedup_without_a_wheel_for_a_target_is_left_out_with_a_warning(monkeypatch, capsys, tmp_path):
    """pip itself is the fake here: it installs a directory per requirement, and has no orjson wheel."""
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("gevent==26.9.0\norjson==3.13.0\nhiredis==3.5.0\n")
    asked = []

    def pip(command, target):
        site = Path(command[command.index("--target") + 1])
        if "-r" in command:
            names = Path(command[command.index("-r") + 1]).read_text().split()
        else:
            names = [command[command.index("--target") - 1]]
        asked.append(names)
        if names == ["orjson==3.13.0"]:
            raise build_zipapp.NoWheels("No matching distribution found for orjson==3.13.0")
        for name in names:
            (site / name.split("==")[0]).mkdir(parents=True)

    monkeypatch.setattr(build_zipapp, "run_pip", pip)
    site = build_zipapp.cached_install(requirements, build_zipapp.Target("3.13", "x86_64"), tmp_path / "cache")
    assert asked == [["gevent==26.9.0"], ["orjson==3.13.0"], ["hiredis==3.5.0"]]
    assert sorted(path.name for path in site.iterdir()) == ["gevent", "hiredis"]
    assert "warning: cp313-x86_64 gets no orjson==3.13.0: no wheel for it" in capsys.readouterr().err


def test_a_required_package_without_a_wheel_still_fails_the_target(monkeypatch, tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("gevent==26.9.0\norjson==3.13.0\n")
    monkeypatch.setattr(build_zipapp, "run_pip", no_wheels)
    with pytest.raises(build_zipapp.NoWheels):
        build_zipapp.cached_install(requirements, build_zipapp.Target("3.13", "x86_64"), tmp_path / "cache")


def test_required_glibc_is_the_newest_any_wheel_needs(tmp_path):
    wheels = {
        "a": "cp311-cp311-manylinux_2_17_x86_64\nTag: cp311-cp311-manylinux2014_x86_64",
        "b": "cp311-cp311-manylinux_2_5_x86_64\nTag: cp311-cp311-manylinux_2_28_x86_64",
        "c": "cp311-cp311-manylinux_2_28_x86_64",
        "d": "py3-none-any",
    }
    for name, tags in wheels.items():
        (tmp_path / f"{name}-1.dist-info").mkdir()
        (tmp_path / f"{name}-1.dist-info" / "WHEEL").write_text(f"Wheel-Version: 1.0\nTag: {tags}\n")
    assert build_zipapp.required_glibc(tmp_path) == (2, 28)
    shutil.rmtree(tmp_path / "c-1.dist-info")
    assert build_zipapp.required_glibc(tmp_path) == (2, 17)


def test_default_output_is_relay_pyz_in_the_current_directory():
    assert build_zipapp.parse_args([]).output == Path("relay.pyz")


def test_dependency_cache_forgets_installs_of_older_requirements(tmp_path):
    target = build_zipapp.Target("3.11", "x86_64")
    for name in ("cp311-x86_64-old", "cp311-x86_64-new", "cp312-x86_64-other"):
        (tmp_path / name).mkdir()
    build_zipapp.prune_cache(tmp_path, [target], keep={tmp_path / "cp311-x86_64-new"})
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "cp311-x86_64-new", "cp312-x86_64-other"]
