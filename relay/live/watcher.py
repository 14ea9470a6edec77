"""Noticing changes under /functions without ever blocking the gevent hub.

watchdog's observers cannot run under gevent's monkey-patching: they are
threads around ``queue.Queue``, which becomes gevent's queue, and the
observer fails at its first event; its inotify emitter would also block the
hub in ``os.read`` (watchdog issue 306). So the watcher polls with
watchdog's own snapshot primitives -- what its PollingObserver is built
from -- and takes every snapshot and diff in gevent's threadpool, a real OS
thread. The hub only sleeps between passes and receives the names of the
functions whose files changed. Snapshots are recursive, so nested
directories count; symbolic links are not followed (like the fingerprint).

A change is seen within one poll interval (0.5 s; longer for a tree so big
that scanning it takes more than an eighth of that). Each function's changes
then go through a debounce: it is reconciled 750 ms after its last change,
so a burst of editor saves yields one rebuild.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
from gevent.event import Event
from watchdog.utils.dirsnapshot import DirectorySnapshot, DirectorySnapshotDiff, EmptyDirectorySnapshot

from relay.offload import in_thread

log = logging.getLogger("relay.live.watcher")

POLL_INTERVAL = 0.5   # seconds; well under the debounce so that one burst stays one
DEBOUNCE = 0.75       # seconds after a function's last change
SCAN_REST = 4         # the pause after a scan is at least this many times as long as the scan


class Watcher:
    def __init__(self, functions_dir: str | Path, on_change: Callable[[str], object], *,
                 interval: float = POLL_INTERVAL, offload: Callable[..., Any] = in_thread) -> None:
        """*on_change(name)* is called in the watcher's greenlet for every function that changed."""
        self.root = os.path.abspath(functions_dir)
        self.on_change = on_change
        self.interval = interval
        self.offload = offload
        self.stopping = Event()
        self._failing = False

    def loop(self) -> None:
        previous: DirectorySnapshot | None = None
        while True:
            started = time.monotonic()
            try:
                previous, changed = self.offload(poll, self.root, previous)
            except OSError as error:
                if not self._failing:
                    log.warning("Cannot scan the functions directory; the periodic pass still runs",
                                extra={"path": self.root, "error": str(error)})
                self._failing = True
            else:
                self._failing = False
                for name in changed:
                    self.on_change(name)
            # A huge tree scans slowly: rest several scans' time, so polling never eats a core.
            if self.stopping.wait(max(self.interval, SCAN_REST * (time.monotonic() - started))):
                return

    def stop(self) -> None:
        self.stopping.set()


def poll(root: str, previous: DirectorySnapshot | None) -> tuple[DirectorySnapshot, list[str]]:
    """(snapshot, names of the functions that changed since *previous*); blocking.

    The first poll (*previous* None) reports nothing: the startup load has
    just read everything. A missing *root* is an empty snapshot, so its
    removal reports every function that was there.
    """
    try:
        snapshot = DirectorySnapshot(root, recursive=True, stat=os.lstat)
    except FileNotFoundError:
        snapshot = EmptyDirectorySnapshot()
    if previous is None:
        return snapshot, []
    diff = DirectorySnapshotDiff(previous, snapshot)
    paths = [*diff.files_created, *diff.files_deleted, *diff.files_modified, *diff.dirs_created, *diff.dirs_deleted]
    for source, destination in [*diff.files_moved, *diff.dirs_moved]:
        paths += [source, destination]
    names: set[str] = set()
    for path in paths:
        first = os.path.relpath(os.fsdecode(path), root).split(os.sep, 1)[0]   # str paths: root is one
        if first not in (os.curdir, os.pardir):
            names.add(first)
    return snapshot, sorted(names)


class Debouncer:
    """Calls ``action(key)`` once, *delay* seconds after the last ``touch(key)``."""

    def __init__(self, action: Callable[[str], object], delay: float = DEBOUNCE) -> None:
        self.action = action
        self.delay = delay
        self._due: dict[str, float] = {}
        self._timers: dict[str, gevent.Greenlet] = {}

    def touch(self, key: str) -> None:
        self._due[key] = time.monotonic() + self.delay
        if key not in self._timers:
            self._timers[key] = gevent.spawn(self._wait, key)

    def cancel(self) -> None:
        timers, self._timers = list(self._timers.values()), {}
        self._due.clear()
        gevent.killall(timers, block=False)

    def _wait(self, key: str) -> None:
        while (remaining := self._due[key] - time.monotonic()) > 0:
            gevent.sleep(remaining)
        del self._due[key], self._timers[key]
        try:
            self.action(key)
        except Exception:
            log.exception("Handling a change failed", extra={"function": key})
