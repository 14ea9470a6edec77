"""Reference counts of the images that in-flight invocations are using.

An invocation holds a lease on its image from before its container is
created until the container is gone; image garbage collection never removes
a leased tag. ``when_idle`` runs a callback once an image has no leases left:
that is how an old version's tag is removed after its last invocation ends.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("relay.runtime.leases")


class ImageLeases:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._waiting: dict[str, Callable[[str], object]] = {}  # image -> run when its count drops to zero

    def acquire(self, image: str) -> None:
        with self._lock:
            self._counts[image] += 1

    def release(self, image: str) -> None:
        with self._lock:
            count = self._counts[image] - 1
            if count < 0:
                raise RuntimeError(f"lease on {image} released more often than acquired")
            if count:
                self._counts[image] = count
                return
            del self._counts[image]
            callback = self._waiting.pop(image, None)
        if callback is not None:
            _run(callback, image)

    @contextmanager
    def lease(self, image: str) -> Iterator[str]:
        self.acquire(image)
        try:
            yield image
        finally:
            self.release(image)

    def in_use(self, image: str) -> bool:
        with self._lock:
            return self._counts[image] > 0

    def leased(self) -> frozenset[str]:
        """The images leased right now."""
        with self._lock:
            return frozenset(self._counts)

    def when_idle(self, image: str, callback: Callable[[str], object]) -> bool:
        """Call ``callback(image)`` now if *image* has no lease, else after its
        last release; return whether it ran now.

        One callback waits per image: a later one replaces it. The callback
        runs in the caller of the last ``release``; its errors are logged,
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
