"""What the runtime tells the rest of the process: its domain events, as an observer seam.

    build_failed             a function's image could not be built
    image_built              a function's image was built, and how long it took
    warm_containers_changed  a function's number of warm containers changed
    image_missing            an invocation found its function's image gone from the engine

The image builder and the executors emit them; relay.wiring decides who
hears them: Prometheus (relay.metrics.prometheus.PrometheusObserver) counts
builds and warm containers, the reconciler rebuilds a missing image. An
observer is called inline (the warm pool's under its lock): it must be
quick and must not raise.

Each event does nothing here, so an observer that hears only some of them
subclasses RuntimeObserver and overrides those (as dramatiq's middleware
does); any object with the four methods fits as well.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class RuntimeObserver(Protocol):
    def build_failed(self, function: str) -> None:
        """A build of *function*'s image failed (BuildError)."""
        return None

    def image_built(self, function: str, seconds: float) -> None:
        """*function*'s image was built in *seconds*; not emitted when an image was up to date."""
        return None

    def warm_containers_changed(self, function: str, count: int) -> None:
        """*function* has *count* warm containers now (starting, idle or running an invocation)."""
        return None

    def image_missing(self, function: str, image: str) -> None:
        """An invocation of *function* found *image* gone from the engine; it failed uncharged."""
        return None


class NoObserver(RuntimeObserver):
    """Hears nothing: the default of a runtime part used on its own (``relay invoke``, tests)."""


class RuntimeObservers(RuntimeObserver):
    """Several observers as one: each event goes to every one of them, in the order they were added.

    ``add`` joins one more after construction: the reconciler hears the
    executors built before it, which it needs to retire images.
    """

    def __init__(self, observers: Iterable[RuntimeObserver] = ()) -> None:
        self.observers = list(observers)

    def add(self, observer: RuntimeObserver) -> None:
        self.observers.append(observer)

    def build_failed(self, function: str) -> None:
        for observer in self.observers:
            observer.build_failed(function)

    def image_built(self, function: str, seconds: float) -> None:
        for observer in self.observers:
            observer.image_built(function, seconds)

    def warm_containers_changed(self, function: str, count: int) -> None:
        for observer in self.observers:
            observer.warm_containers_changed(function, count)

    def image_missing(self, function: str, image: str) -> None:
        for observer in self.observers:
            observer.image_missing(function, image)
