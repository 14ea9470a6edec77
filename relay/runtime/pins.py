"""Pins: reference counts of the images that in-flight invocations are using.

An invocation pins its image from before its container is created until
the container is gone; image garbage collection never removes a pinned
tag. ``when_unpinned`` runs a callback once an image has no pins left:
that is how an old version's tag is removed after its last invocation
ends. (Pins are counts in this process; the fleet-wide leases of a
``concurrency_key`` are Redis keys: relay.stream.limits.KeyLeases.)
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("relay.runtime.pins")


class ImagePins:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._waiting: dict[str, Callable[[str], object]] = {}  # image -> run when its count drops to zero

    def pin(self, image: str) -> None:
        with self._lock:
            self._counts[image] += 1

    def unpin(self, image: str) -> None:
        with self._lock:
            count = self._counts[image] - 1
            if count < 0:
                raise RuntimeError(f"{image} unpinned more often than pinned")
            if count:
                self._counts[image] = count
                return
            del self._counts[image]
            callback = self._waiting.pop(image, None)
        if callback is not None:
            _run(callback, image)

    @contextmanager
    def holding(self, image: str) -> Iterator[str]:
        self.pin(image)
        try:
            yield image
        finally:
            self.unpin(image)

    def in_use(self, image: str) -> bool:
        with self._lock:
            return self._counts[image] > 0

    def pinned(self) -> frozenset[str]:
        """The images pinned right now."""
        with self._lock:
            return frozenset(self._counts)

    def when_unpinned(self, image: str, callback: Callable[[str], object]) -> bool:
        """Call ``callback(image)`` now if *image* has no pin, else after its
        last unpin; return whether it ran now.

        One callback waits per image: a later one replaces it. The callback
        runs in the caller of the last ``unpin``; its errors are logged,
        never raised into that caller.
        """
        with self._lock:
            if self._counts[image] > 0:
                self._waiting[image] = callback
                return False
        _run(callback, image)
        return True


def _run(callback: Callable[[str], object], image: str) -> None:
    try:
        callback(image)
    except Exception:
        log.exception("Callback for an idle image failed", extra={"image": image})
