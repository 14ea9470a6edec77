"""Concurrency slots: MAX_CONCURRENCY for the worker, the template's concurrency per function.

Per-function limits are created the first time a function name is seen and
never resized (a running invocation is never interrupted); a changed
``concurrency`` takes effect after a restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from gevent.lock import BoundedSemaphore


class Slots:
    def __init__(self, max_concurrency: int, on_wait: Callable[[], object] | None = None) -> None:
        self._global = BoundedSemaphore(max_concurrency)
        self._per_function: dict[str, BoundedSemaphore] = {}
        self._on_wait = on_wait or (lambda: None)

    def function_limit(self, name: str, concurrency: int) -> BoundedSemaphore:
        limit = self._per_function.get(name)
        if limit is None:
            limit = self._per_function[name] = BoundedSemaphore(concurrency)
        return limit

    @contextmanager
    def hold(self, name: str, concurrency: int, timeout: float) -> Iterator[bool]:
        """Yield True holding both slots, or False if they were not free within *timeout* seconds."""
        deadline = time.monotonic() + timeout
        function_slot = self.function_limit(name, concurrency)
        if not self._acquire(function_slot, deadline):
            yield False
            return
        try:
            if not self._acquire(self._global, deadline):
                yield False
                return
            try:
                yield True
            finally:
                self._global.release()
        finally:
            function_slot.release()

    def _acquire(self, semaphore: BoundedSemaphore, deadline: float) -> bool:
        if semaphore.acquire(blocking=False):
            return True
        self._on_wait()
        return semaphore.acquire(timeout=max(0.0, deadline - time.monotonic()))
