"""Bounds on one image build: a wall-clock cutoff and a bounded tail of its output.

docker-py streams a build's output over one HTTP response and hands back only
a generator. A build that hangs, or prints a line now and then forever,
would hold that stream (and a reconcile slot) without end, so ``Cutoff``
shuts the response's socket down when the deadline passes: the read wakes
up, and the engine, seeing its client gone, abandons the build and removes
its container. A timer thread does it (a greenlet when gevent has patched
threading); shutting a socket down wakes a reader blocked on it in either.

``Tail`` keeps the last bytes of the output for the error message, so a
failed install that prints megabytes (or one enormous line) quotes its
end, never all of it. ``Progress`` says every so often that a build is
still running, and at which step, so a ten-minute install is not silent at
INFO.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from requests import Response


class Cutoff:
    """Cuts *stream* (docker-py's build generator) at *deadline* (a time.monotonic() value)."""

    def __init__(self, stream: Iterator[Any], deadline: float) -> None:
        self.fired = False
        self._response = _response_of(stream)
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    def _fire(self) -> None:
        self.fired = True
        if self._response is None:
            return
        raw_socket = _socket_of(self._response)
        try:
            if raw_socket is not None:
                raw_socket.shutdown(socket.SHUT_RDWR)
            else:
                self._response.close()
        except OSError:
            pass  # already closed: the build ended at the same moment


def _response_of(stream: Iterator[Any]) -> Response | None:
    """The requests.Response a docker-py build generator reads from (an argument of its frame), or None."""
    frame = getattr(stream, "gi_frame", None)
    return frame.f_locals.get("response") if frame is not None else None


def _socket_of(response: Response) -> socket.socket | None:
    """The socket under *response* (unix or TCP; TLS wraps it), or None where docker-py uses another transport."""
    reader = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    candidate = getattr(getattr(reader, "raw", None), "_sock", None)
    return candidate if hasattr(candidate, "shutdown") else None


class Progress:
    """Calls *report(step, elapsed_seconds)* every *interval* seconds until cancelled.

    *step* is the last ``Step N/M`` line the build printed (``note``), or None.
    """

    def __init__(self, interval: float, report: Callable[[str | None, float], None]) -> None:
        self._interval = interval
        self._report = report
        self._began = time.monotonic()
        self._step: str | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="build-progress", daemon=True)
        self._thread.start()

    def note(self, line: str) -> None:
        if line.startswith("Step "):
            self._step = line

    def cancel(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            self._report(self._step, time.monotonic() - self._began)


class Tail:
    """The last *limit* bytes of build output (UTF-8, lines joined by newlines); "..." marks a cut."""

    _CUT = b"..."

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._data = bytearray()
        self._cut = False

    def add(self, line: str) -> None:
        if self._data:
            self._data += b"\n"
        self._data += line.encode("utf-8", "replace")
        room = self.limit - len(self._CUT)
        if len(self._data) > room:
            del self._data[:-room]
            self._cut = True

    def text(self) -> str:
        text = bytes(self._data).decode("utf-8", "ignore")
        return self._CUT.decode() + text if self._cut else text

    def __bool__(self) -> bool:
        return bool(self._data)
