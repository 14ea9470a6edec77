"""The watcher and the debounce: which functions changed, never blocking the hub."""

import os
import shutil
import time

import gevent
import pytest

from relay.live.watcher import Debouncer, Watcher, poll


@pytest.fixture
def root(tmp_path):
    directory = tmp_path / "functions"
    for name in ("alpha", "beta"):
        (directory / name / "pkg" / "inner").mkdir(parents=True)
        (directory / name / "template.yaml").write_text("runtime: python3.14\n")
        (directory / name / "pkg" / "inner" / "jobs.py").write_text("X = 1\n")
    return directory


def changes(root, action):
    snapshot, first = poll(str(root), None)
    assert first == [], "the first poll only takes the reference"
    action()
    return poll(str(root), snapshot)[1]


def test_edits_anywhere_below_a_function_name_that_function(root):
    assert changes(root, lambda: (root / "alpha" / "pkg" / "inner" / "jobs.py").write_text("X = 22\n")) == ["alpha"]
    assert changes(root, lambda: (root / "beta" / "pkg" / "new.py").write_text("")) == ["beta"]
    assert changes(root, lambda: shutil.rmtree(root / "beta" / "pkg")) == ["beta"]
    assert changes(root, lambda: (root / "alpha" / "template.yaml").rename(root / "alpha" / "t.yaml")) == ["alpha"]
    assert changes(root, lambda: None) == []


def test_new_removed_and_renamed_functions(root):
    assert changes(root, (root / "gamma").mkdir) == ["gamma"]
    assert changes(root, lambda: shutil.rmtree(root / "alpha")) == ["alpha"]
    assert changes(root, lambda: (root / "beta").rename(root / "delta")) == ["beta", "delta"]


def test_an_editor_save_replacing_the_file_is_a_change(root):
    def save():
        replacement = root / "alpha" / ".template.yaml.swp"
        replacement.write_text("runtime: node24\n")
        os.replace(replacement, root / "alpha" / "template.yaml")

    assert changes(root, save) == ["alpha"]


def test_a_vanished_functions_directory_names_every_function(root):
    assert changes(root, lambda: shutil.rmtree(root)) == ["alpha", "beta"]
    snapshot, _ = poll(str(root), None)
    root.mkdir()
    (root / "alpha").mkdir()
    assert poll(str(root), snapshot)[1] == ["alpha"]


def test_symbolic_links_are_not_followed(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "alpha" / "link").symlink_to(outside)
    (root / "alpha" / "loop").symlink_to(root / "alpha")
    assert changes(root, lambda: (outside / "file").write_text("x")) == []


def big_tree(root, files=6000, start=0):
    for index in range(start, start + files):
        directory = root / "big" / f"d{index // 100}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{index}.py").write_text("")


def scan_time(root):
    started = time.monotonic()
    poll(str(root), None)
    return time.monotonic() - started


def test_the_watcher_does_not_block_the_hub(root):
    """Another greenlet keeps its 5 ms schedule while the watcher scans a tree that would
    hold the hub for tens of milliseconds if it were scanned there. The tree grows until
    a scan takes that long (a quiet machine with a warm cache scans 6,000 files in 30 ms)."""
    files = 0
    while files < 48000:
        big_tree(root, start=files)
        files += 6000
        blocking = scan_time(root)
        if blocking > 0.05:
            break
    assert blocking > 0.05, f"the tree is too small to prove anything ({blocking:.3f}s for {files} files)"

    seen = []
    watcher = Watcher(root, seen.append, interval=0.0)
    scans = []
    original = watcher.offload

    def timed(function, *args):
        started = time.monotonic()
        try:
            return original(function, *args)
        finally:
            scans.append((started, time.monotonic()))

    watcher.offload = timed
    ticks = []

    def tick():
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            ticks.append(time.monotonic())
            gevent.sleep(0.005)

    running = gevent.spawn(watcher.loop)
    ticker = gevent.spawn(tick)
    gevent.sleep(0.3)
    (root / "alpha" / "pkg" / "inner" / "jobs.py").write_text("X = 3\n")
    ticker.join()
    watcher.stop()
    running.join(timeout=5)
    assert "alpha" in seen
    windows = [(start, end) for start, end in scans if ticks[0] < start and end < ticks[-1]]
    assert windows, "a whole scan happened while the ticker ran"
    for start, end in windows:
        # A hub blocked by the scan would show no tick inside it at all.
        inside = [moment for moment in ticks if start < moment < end]
        assert len(inside) >= (end - start) / 0.005 / 4, (
            f"{len(inside)} ticks during a {end - start:.3f}s scan; the hub was held")


def test_a_scan_error_is_logged_once_and_the_watcher_goes_on(root, caplog):
    calls = []

    def failing(function, *args):
        calls.append(1)
        if len(calls) <= 3:
            raise PermissionError(13, "Permission denied")
        return function(*args)

    watcher = Watcher(root, lambda name: None, interval=0.01, offload=failing)
    running = gevent.spawn(watcher.loop)
    gevent.sleep(0.2)
    watcher.stop()
    running.join(timeout=2)
    assert len(calls) > 4 and caplog.text.count("Cannot scan the functions directory") == 1


def test_a_burst_of_touches_is_one_action_after_the_quiet_time():
    fired = []
    debouncer = Debouncer(lambda key: fired.append((key, time.monotonic())), delay=0.2)
    for _ in range(10):
        debouncer.touch("alpha")
        last = time.monotonic()
        gevent.sleep(0.05)
    debouncer.touch("beta")
    gevent.sleep(0.4)
    assert [key for key, _ in fired] == ["alpha", "beta"]
    assert fired[0][1] - last >= 0.19
    debouncer.touch("alpha")
    gevent.sleep(0.3)
    assert [key for key, _ in fired] == ["alpha", "beta", "alpha"]


def test_cancel_drops_pending_actions():
    fired = []
    debouncer = Debouncer(fired.append, delay=0.05)
    debouncer.touch("alpha")
    debouncer.cancel()
    gevent.sleep(0.1)
    assert fired == []


def test_ten_quick_saves_through_watcher_and_debounce_are_one_change(root):
    fired = []
    debouncer = Debouncer(fired.append, delay=0.75)
    watcher = Watcher(root, debouncer.touch, interval=0.5)
    running = gevent.spawn(watcher.loop)
    gevent.sleep(0.3)
    for number in range(10):
        (root / "alpha" / "pkg" / "inner" / "jobs.py").write_text(f"X = {number}\n")
        gevent.sleep(0.1)
    gevent.sleep(2.0)
    watcher.stop()
    running.join(timeout=2)
    assert fired == ["alpha"]
