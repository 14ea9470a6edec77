"""The Engine API calls of one execution that docker-py has no public form for.

A container created with AutoRemove is deleted by the engine as soon as it
exits, so asking for its exit code afterwards can find nothing. Like the
docker CLI's ``run --rm``, Relay therefore sends the wait request *before*
starting the container, with the condition ``removed``: the engine answers
the headers as soon as the wait is registered and the body (with the exit
code) once the container is exited *and* gone. Reading the headers first
proves the exit cannot be missed, and an invocation that has ended leaves no
container behind that could still hold its image (pins rely on that).
docker-py's ``wait`` reads headers and body at once, hence the request is
made here with its lower-level helpers.

Deadlines are enforced on the sockets themselves (a timeout set before each
read), which works the same with and without gevent.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

from docker import APIClient
from requests import Response

from relay.errors import DeadlineExceeded, ExecutionError


def attach(api: APIClient, container_id: str) -> tuple[Any, socket.socket]:
    """The hijacked attach connection (stdin, stdout, stderr), opened before start
    so no output is lost. Returns (handle to close, socket to read and write)."""
    handle = api.attach_socket(container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
    return handle, getattr(handle, "_sock", handle)


def register_wait(api: APIClient, container_id: str, deadline: float) -> Response:
    """Send the wait request and return its response once the engine registered it."""
    response = api._post(api._url("/containers/{0}/wait", container_id), params={"condition": "removed"},
                         stream=True, timeout=(10.0, remaining(deadline)))
    api._raise_for_status(response)
    registered: Response = response
    return registered


def exit_status(api: APIClient, response: Response, deadline: float) -> int:
    """The exit code the registered wait reports; DeadlineExceeded if it does not come in time."""
    sock = api._get_raw_response_socket(response)
    getattr(sock, "_sock", sock).settimeout(remaining(deadline))
    try:
        body = response.json()
        status = body["StatusCode"]
    except Exception as error:  # a timeout surfaces as one of several requests/urllib3 errors
        if time.monotonic() >= deadline:
            raise DeadlineExceeded() from None
        raise ExecutionError(f"waiting for the container's exit failed: {error}") from None
    failure = body.get("Error")
    if failure and failure.get("Message"):
        raise ExecutionError(f"waiting for the container's exit failed: {failure['Message']}")
    return int(status)


def send_stdin(sock: socket.socket, payload: bytes, deadline: float) -> None:
    """Write the event and close our side, so the handler reads end-of-file.

    A process that exits without reading all of stdin is not an engine
    failure: its output and exit code are still to be read.
    """
    try:
        if payload:
            sock.settimeout(remaining(deadline))
            sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
    except TimeoutError:
        raise DeadlineExceeded() from None
    except (BrokenPipeError, ConnectionResetError):
        pass


def read_until_closed(sock: socket.socket, feed: Callable[[bytes], None], deadline: float,
                      size: int = 65536) -> None:
    """Pass everything the attach stream delivers to *feed* until the engine
    closes it (the container's process exited)."""
    while True:
        try:
            sock.settimeout(remaining(deadline))
            data = sock.recv(size)
        except TimeoutError:
            raise DeadlineExceeded() from None
        if not data:
            return
        feed(data)


def close_quietly(*closables: Any) -> None:
    for closable in closables:
        if closable is None:
            continue
        try:
            closable.close()
        except Exception:  # closing a half-dead connection may fail; there is nothing left to do
            pass


def remaining(deadline: float) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise DeadlineExceeded()
    return remaining
