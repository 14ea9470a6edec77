"""One warm container: a resident bootstrap serving one invocation at a time.

    create (hardened, AutoRemove, relay.warm=true) → attach → register wait
    → start → "ready" → { request on stdin → output … → "end" and "done" } …
    → removed (idle, recycled, retired, timed out, broken, or Relay stopping)

The container is the same hardened container as a cold invocation's; only
its command (the bootstrap with ``--warm``, see relay/runtime/bootstraps/),
its labels (the function, image and worker, no invocation) and its
environment (the function's, with RELAY_FUNCTION) differ. A request is a
header line, the invocation's context and the event's bytes, ``invoke <seq>
<nonce> <handler> <context length> <event length>\\n<context><event>``; the
context is the JSON object of the other RELAY_* variables
(relay.runtime.context), which the bootstrap sets for the handler call
only. The bootstrap answers by writing a marker line to each of its streams
after the handler's output: ``\\x1e\\x1frelay:end <seq> <nonce>`` on stderr
and ``\\x1e\\x1frelay:done <seq> <nonce> ok|error`` on stdout. Each stream is
ordered, so once both markers are in, every byte the invocation wrote is
too, and none of it is taken for another's.

The nonce is 128 random bits made for each request and sent only in its
header, never in an environment, so a handler cannot end its own
invocation by printing a marker: one that echoes event text such as
``\\x1e\\x1frelay:done 1 ok`` before it raises still fails. A marker line
without the current request's markers is ordinary output, forwarded as the
handler wrote it; one that holds the nonce but is not what is due can only
come from a broken bootstrap.

Anything unexpected makes the container unusable (``broken`` is set) and it
is removed: a marker with the nonce that is not the expected one, a stream
that ends (the handler exited the process, or it crashed), a timeout.
Output written while a container is idle (a thread the handler left
running) is forwarded with the prefix of the invocation that ran last,
before the next one starts. It is in no invocation's tails (``tails``, for
the run ledger): they start empty with each request and end with its
markers, or with whatever it wrote before the container broke.
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from docker import APIClient

from relay.errors import ContainerExited, DeadlineExceeded, ExecutionError, ProtocolBreak
from relay.runtime import context, protocol
from relay.runtime.containers import (
    FUNCTION_LABEL,
    HOSTNAME_LABEL,
    IMAGE_LABEL,
    LABEL_VALUE_LIMIT,
    USER,
    container_name,
    remove_container,
)
from relay.runtime.output import STDERR, STDOUT, Frames, Lines, PrefixedOutput, PrefixParts, Tail, teed
from relay.runtime.sweep import UNCONFIRMED_CREATE_GRACE, Leftovers

if TYPE_CHECKING:
    from relay.runtime.invocation import Invocation

log = logging.getLogger("relay.runtime.warm")

WARM_LABEL = "relay.warm"
MARKER = b"\x1e\x1frelay:"
MARKER_LINE_LIMIT = 256
PROTOCOL_VERSION = b"3"
EXIT_STATUS_WAIT = 5.0  # seconds to learn the exit code of a container whose streams ended


class MarkedLines:
    """One stream's bytes: the protocol's marker lines taken out, the rest handed to *lines*.

    ``expect(texts, own)`` says which marker texts (after the marker, without
    the newline) end what runs now; ``feed(data)`` returns those that came,
    at most one until the next ``expect``. A marker line that is not one of
    them is ordinary output, forwarded unchanged, unless it contains *own*
    (what only the bootstrap can write: the request's nonce), which is a
    ProtocolBreak. A marker may follow text on its line, as the bootstrap
    writes it after whatever the handler left unfinished: that text is then
    a line of its own, as it would be at the end of a cold container's
    stream. A candidate split across reads is kept until its newline comes,
    or until it is longer than any marker can be.
    """

    def __init__(self, lines: Lines) -> None:
        self.lines = lines
        self._carry = b""
        self._expected: tuple[bytes, ...] = ()
        self._own: bytes | None = None

    def expect(self, texts: tuple[bytes, ...] = (), own: bytes | None = None) -> None:
        self._expected = texts
        self._own = own

    def feed(self, data: bytes) -> list[bytes]:
        data = self._carry + data if self._carry else data
        self._carry = b""
        found: list[bytes] = []
        written = scan = 0                     # data[written:] is not handed on yet; look for markers from scan
        while (at := data.find(MARKER, scan)) >= 0:
            end = data.find(b"\n", at, at + MARKER_LINE_LIMIT + 1)
            if end < 0:
                if len(data) - at > MARKER_LINE_LIMIT:
                    scan = at + _MARKER_SIZE    # longer than any marker: ordinary output
                    continue
                if at > written:
                    self.lines.feed(data[written:at])
                self._carry = data[at:]        # its newline is still to come
                return found
            text = data[at + _MARKER_SIZE:end]
            if text in self._expected:
                if at > written:
                    self.lines.feed(data[written:at])
                self.lines.close()             # text before a marker is a line of its own
                found.append(text)
                self._expected = ()
                written = scan = end + 1
                continue
            if self._own is not None and self._own in text and MARKER not in text:
                raise ProtocolBreak(f"{_show(text)} where {_due(self._expected)} was due")
            scan = at + _MARKER_SIZE            # ordinary output; a real marker may still follow on the line
        rest = data[written:] if written else data
        if rest:
            keep = _marker_prefix(rest)
            self.lines.feed(rest[:len(rest) - keep] if keep else rest)
            self._carry = rest[len(rest) - keep:] if keep else b""
        return found


_MARKER_SIZE = len(MARKER)
_MARKER_BYTES = frozenset(MARKER)


def _marker_prefix(data: bytes) -> int:
    """The length of the longest end of *data* that could begin a marker."""
    if data[-1] not in _MARKER_BYTES:    # a line's end, most often
        return 0
    for size in range(min(len(MARKER) - 1, len(data)), 0, -1):
        if data.endswith(MARKER[:size]):
            return size
    return 0


def _due(texts: tuple[bytes, ...]) -> str:
    return " or ".join(sorted(_show(text) for text in texts)) or "no marker"


@dataclass(frozen=True)
class Version:
    """What a warm container can serve: one function's image, network and environment."""

    function: str
    image: str
    runtime: str
    network: str | None
    env: frozenset[tuple[str, str]]

    @classmethod
    def of(cls, invocation: Invocation) -> Version:
        return cls(invocation.function, invocation.image, invocation.runtime, invocation.network,
                   frozenset(invocation.env.items()))

    def __repr__(self) -> str:  # env holds secret values: never print them
        return f"Version(function={self.function!r}, image={self.image!r})"


class WarmContainer:
    """A started warm container; ``invoke`` runs one request at a time, ``remove`` ends it."""

    def __init__(self, api: APIClient, *, function: str, image: str, version: Version, hostname: str,
                 output: TextIO, leftovers: Leftovers | None = None) -> None:
        self.api = api
        self.function = function
        self.image = image
        self.version = version            # what requests it may serve
        self.hostname = hostname
        self.name = container_name(function)
        self.container_id: str | None = None
        self.served = 0
        self.broken = False
        self.exit_code: int | None = None
        self.last_used = 0.0     # when it was last given back idle (the pool's clock)
        self.idle_limit = 0.0    # seconds it may then stay idle (its function's warm.idle)
        self._sink = PrefixedOutput(output)
        self._leftovers = leftovers
        self._handle: Any = None   # docker-py's attach handle, its socket, the registered wait's response
        self._sock: Any = None
        self._wait: Any = None
        self._frames = Frames()
        self._tails = {STDOUT: Tail(), STDERR: Tail()}   # the current invocation's output
        self._streams = {stream: MarkedLines(Lines(teed(self._sink.write, tail)))
                         for stream, tail in self._tails.items()}
        self._seq = 0

    # --- start --------------------------------------------------------------------

    def start(self, *, command: Sequence[str], env: Mapping[str, str], host_config: Mapping[str, Any],
              user: str = USER, prefix_parts: PrefixParts, deadline: float) -> None:
        """Create and start the container and wait for the bootstrap's ready marker;
        what it writes meanwhile is prefixed with ``output.prefix(*prefix_parts)``."""
        self._sink.prefix_with(*prefix_parts)
        try:
            created = self.api.create_container(
                self.image, name=self.name, user=user, stdin_open=True,
                environment={**env, context.FUNCTION: self.function},
                labels=self.labels(), host_config=host_config, entrypoint=list(command),
                use_config_proxy=False)
            container_id = self.container_id = created["Id"]
            self._handle, self._sock = protocol.attach(self.api, container_id)
            self._wait = protocol.register_wait(self.api, container_id, deadline)
            self.api.start(container_id)
            # No handler code runs before the first request: any "ready" is the bootstrap's own.
            self._streams[STDOUT].expect((b"ready " + PROTOCOL_VERSION,), own=b"ready")
            self._read_markers(deadline, (STDOUT,))
            self._streams[STDOUT].expect()
        except BaseException:
            self.broken = True
            raise

    def labels(self) -> dict[str, str]:
        values = {FUNCTION_LABEL: self.function, HOSTNAME_LABEL: self.hostname, IMAGE_LABEL: self.image,
                  WARM_LABEL: "true"}
        return {key: value[:LABEL_VALUE_LIMIT] for key, value in values.items()}

    # --- one invocation -----------------------------------------------------------

    def invoke(self, handler: str, variables: Mapping[str, str], payload: bytes, prefix_parts: PrefixParts,
               deadline: float) -> bool:
        """Run *handler* on *payload* with the context *variables* (context.request_variables),
        its output prefixed with ``output.prefix(*prefix_parts)``; True when it returned, False
        when it raised. ``tails()`` then holds the end of what it wrote, and only that.

        Raises DeadlineExceeded, ContainerExited, ProtocolBreak or an engine
        error; after any of them the container is broken and must be removed.
        """
        try:
            self._sink.prefix_with(*prefix_parts)
            for tail in self._tails.values():
                tail.clear()
            self._seq += 1
            seq, nonce = str(self._seq).encode(), secrets.token_hex(16).encode()
            stdout, stderr = self._streams[STDOUT], self._streams[STDERR]
            done = b"done %s %s ok" % (seq, nonce)
            stdout.expect((done, b"done %s %s error" % (seq, nonce)), nonce)
            stderr.expect((b"end %s %s" % (seq, nonce),), nonce)
            self._send(request(seq, nonce, handler, variables, payload), deadline)
            markers = self._read_markers(deadline, (STDOUT, STDERR))
            stdout.expect()
            stderr.expect()
        except BaseException:
            self.broken = True
            for marked in self._streams.values():   # nothing more is read for it: its last partial lines are its own
                marked.lines.close()
            raise
        self.served += 1
        return markers[STDOUT] == done

    def _send(self, data: bytes, deadline: float) -> None:
        try:
            self._sock.settimeout(protocol.remaining(deadline))
            self._sock.sendall(data)
        except TimeoutError:
            raise DeadlineExceeded() from None
        except (BrokenPipeError, ConnectionResetError):
            raise self._exited() from None

    def _read_markers(self, deadline: float, streams: tuple[int, ...]) -> dict[int, bytes]:
        """Read until each of *streams* brought the marker it expects; {stream: marker text}."""
        found: dict[int, bytes] = {}
        while len(found) < len(streams):
            try:
                self._sock.settimeout(protocol.remaining(deadline))
                data = self._sock.recv(65536)
            except TimeoutError:
                raise DeadlineExceeded() from None
            if not data:
                raise self._exited()
            for stream, payload in self._frames.feed(data):
                marked = self._streams.get(stream)
                if marked is not None:
                    for text in marked.feed(payload):
                        found[stream] = text
        return found

    def forward_idle_output(self) -> None:
        """Forward what the container wrote since its last request ended, under that request's prefix.

        Raises ContainerExited when the container ended meanwhile (an engine
        restart, say); it is broken then and must be removed. A marker line
        written while idle is ordinary output: no request's nonce is due.
        """
        try:
            self._forward_idle_output()
        except BaseException:
            self.broken = True
            raise

    def _forward_idle_output(self) -> None:
        raw = getattr(self._sock, "_sock", self._sock)   # gevent's socket wraps a non-blocking one
        raw.setblocking(False)
        while True:
            try:
                data = raw.recv(65536)
            except (BlockingIOError, InterruptedError, TimeoutError):
                break
            if not data:
                raise self._exited()
            for stream, payload in self._frames.feed(data):
                if stream in self._streams:
                    self._streams[stream].feed(payload)
        for marked in self._streams.values():
            marked.lines.close()

    def _exited(self) -> ContainerExited:
        """The streams ended: the process exited (the handler ended it, or it crashed)."""
        for stream in self._streams.values():
            stream.lines.close()
        try:
            self.exit_code = protocol.exit_status(self.api, self._wait, time.monotonic() + EXIT_STATUS_WAIT)
        except ExecutionError:
            return ContainerExited("the warm container exited")
        return ContainerExited(f"the warm container exited with code {self.exit_code}")

    def tails(self) -> tuple[str, str]:
        """The ends of what the last invocation wrote on stdout and on stderr (relay.runtime.output.Tail),
        complete once it returned or raised."""
        return self._tails[STDOUT].text(), self._tails[STDERR].text()

    @property
    def output_failed(self) -> Exception | None:
        """The first error writing the handlers' output, or None."""
        return self._sink.failed

    # --- end ----------------------------------------------------------------------

    def remove(self) -> bool:
        """Kill and remove the container (idempotent); True when the engine confirmed it is gone."""
        self.broken = True
        for stream in self._streams.values():
            stream.lines.close()
        context = {"function": self.function, "image": self.image}
        gone = True
        if self.container_id is not None:
            gone = remove_container(self.api, self.container_id, context)
            if not gone and self._leftovers is not None:
                self._leftovers.add(self.container_id, context)
        else:
            # The create may have happened without its answer (an engine going down), or land later:
            # look for the name again until the grace is over, as the cold executor does.
            gone = remove_container(self.api, self.name, context)
            if self._leftovers is not None:
                self._leftovers.add(self.name, context, grace=UNCONFIRMED_CREATE_GRACE)
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        protocol.close_quietly(self._handle, getattr(self._handle, "_sock", None),
                               getattr(self._handle, "_response", None), self._wait)
        self._handle = self._sock = self._wait = None
        return gone


def request(seq: bytes, nonce: bytes, handler: str, variables: Mapping[str, str], payload: bytes) -> bytes:
    """The bytes of request *seq* (bytes), whose end markers carry *nonce* (bytes): run *handler*
    on *payload* with the context *variables*."""
    encoded = json.dumps(variables, separators=(",", ":")).encode()
    return b"invoke %s %s %s %d %d\n%s%s" % (seq, nonce, handler.encode(), len(encoded), len(payload), encoded,
                                             payload)


def _show(text: bytes) -> str:
    return repr(bytes(text[:80]))[1:]
