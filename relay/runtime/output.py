"""Handler output: Docker's multiplexed attach stream, split into lines and
written to Relay's output with a prefix, verbatim.

This is a raw transport, not logging: every line is written whatever
LOG_LEVEL says, with no severity guessed from stdout or stderr:

    relay: function "user-events-python" handler "events.created.handler" message "1726-0" event "evt_1": User created

Each stream keeps its own partial line until its newline arrives (or the
stream ends). A line longer than MAX_LINE_BYTES is cut there, marked as cut,
and the rest of it, up to its newline, is dropped: one runaway line cannot
take Relay's memory. Bytes that are not UTF-8 are shown as U+FFFD.

Each stream also keeps its Tail: the last TAIL_BYTES of its lines, for the
run ledger (issue #32), fed by the same emit that writes them; a stream
that writes nothing costs nothing.

The prefix's values come from the event (its event_id) and are escaped the
way Relay's log values are: a newline, a quote, a control character or a
lone surrogate in an event_id is printed as \\n, \\", \\x1b or \\ud800, so it
can neither forge a line of its own nor make the write fail and drop the
handler's output.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import TextIO

from relay.logs import escape

MAX_LINE_BYTES = 64 * 1024
TRUNCATED = " [relay: line cut at 64 KiB]"
TAIL_BYTES = 4096
STDOUT, STDERR = 1, 2
_HEADER = struct.Struct(">BxxxL")

PrefixParts = tuple[str, *tuple[str | None, ...]]
"""``prefix``'s arguments: the function, then the handler, message id and event id when known."""


def prefix(function: str, handler: str | None = None, message_id: str | None = None,
           event_id: str | None = None) -> str:
    """Without a handler: the prefix of what a warm container writes before its first invocation."""
    parts = [f'relay: function "{escape(function)}"']
    if handler:
        parts.append(f'handler "{escape(handler)}"')
    if message_id:
        parts.append(f'message "{escape(message_id)}"')
    if event_id:
        parts.append(f'event "{escape(event_id)}"')
    return " ".join(parts) + ": "


class Frames:
    """Docker's attach stream without a TTY: 8-byte headers (stream, size) then payloads.

    ``feed(data)`` returns the complete (stream, payload) pairs in *data* and
    keeps an incomplete frame for the next call.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        if self._buffer:
            self._buffer += data
            data = bytes(self._buffer)
            self._buffer.clear()
        frames = []
        offset, total, header = 0, len(data), _HEADER.size
        while total - offset >= header:
            stream, size = _HEADER.unpack_from(data, offset)
            end = offset + header + size
            if end > total:
                break
            frames.append((stream, data[offset + header:end]))
            offset = end
        if offset < total:
            self._buffer += data[offset:]
        return frames

    @property
    def pending(self) -> int:
        return len(self._buffer)


class Lines:
    """One stream's bytes → whole lines handed to ``emit(text)``, without the newline."""

    def __init__(self, emit: Callable[[str], None], limit: int = MAX_LINE_BYTES) -> None:
        self._emit = emit
        self._limit = limit
        self._partial = bytearray()
        self._dropping = False  # inside a line that was already cut

    def feed(self, data: bytes) -> None:
        start = 0
        while True:
            newline = data.find(b"\n", start)
            piece = data[start:] if newline < 0 else data[start:newline]
            if not self._dropping:
                self._partial += piece
                if len(self._partial) > self._limit:
                    self._cut()
            if newline < 0:
                return
            if self._dropping:
                self._dropping = False
            else:
                self._flush()
            start = newline + 1

    def close(self) -> None:
        """The stream ended: a last line without a newline is still a line."""
        if self._partial:
            self._flush()
        self._dropping = False

    def _cut(self) -> None:
        end = self._limit
        # Do not split a UTF-8 sequence: back up over continuation bytes.
        while end > self._limit - 3 and (self._partial[end] & 0xC0) == 0x80:
            end -= 1
        self._emit(self._partial[:end].decode("utf-8", "replace") + TRUNCATED)
        self._partial.clear()
        self._dropping = True

    def _flush(self) -> None:
        self._emit(self._partial.decode("utf-8", "replace"))
        self._partial.clear()


class Tail:
    """The last *limit* bytes (UTF-8) of one stream's lines, joined with "\\n".

    The oldest lines go first; the oldest one kept may keep only its end, so
    a full tail is *limit* bytes, or a few less where that end would have
    begun inside a character. The lines are those Relay forwards (decoded,
    a runaway line already cut), so a tail reads as the output did. Adding a
    line costs a deque append while the tail is not full.
    """

    __slots__ = ("_limit", "_lines", "_sizes", "_size")

    def __init__(self, limit: int = TAIL_BYTES) -> None:
        self._limit = limit
        self._lines: deque[str] = deque()
        self._sizes: deque[int] = deque()
        self._size = -1   # the text's size: the lines' encoded sizes and the newlines between them

    def add(self, line: str) -> None:
        size = len(line) if line.isascii() else len(line.encode())
        self._lines.append(line)
        self._sizes.append(size)
        self._size += size + 1
        if self._size > self._limit:
            self._trim()

    def _trim(self) -> None:
        lines, sizes = self._lines, self._sizes
        while (excess := self._size - self._limit) > 0:
            first = sizes[0]
            if first <= excess and len(lines) > 1:   # the whole line and its newline go
                lines.popleft()
                sizes.popleft()
                self._size -= first + 1
            else:                                     # its end stays
                lines[0], kept = _end_of(lines[0], first - excess)
                sizes[0] = kept
                self._size -= first - kept

    def text(self) -> str:
        return "\n".join(self._lines) if self._lines else ""

    def clear(self) -> None:
        if self._lines:
            self._lines.clear()
            self._sizes.clear()
            self._size = -1


def _end_of(line: str, size: int) -> tuple[str, int]:
    """The last *size* bytes of *line* (UTF-8), less a character's partial start; and their size."""
    if line.isascii():
        return (line[-size:], size) if size else ("", 0)
    encoded = line.encode()[-size:] if size else b""
    start = 0
    while start < len(encoded) and (encoded[start] & 0xC0) == 0x80:   # a continuation byte
        start += 1
    return encoded[start:].decode(), len(encoded) - start


def teed(write: Callable[[str], None], tail: Tail) -> Callable[[str], None]:
    """An emit for Lines: each line goes to *write*, and *tail* keeps it too."""
    add = tail.add

    def emit(text: str) -> None:
        write(text)
        add(text)

    return emit


class PrefixedOutput:
    """Writes each line to *output* after its prefix; the first error writing stops it and stays in ``failed``.

    Relay's own output trouble (a closed stdout) never decides a handler's result: lines are dropped.
    """

    def __init__(self, output: TextIO, line_prefix: str = "") -> None:
        self._output = output
        self._prefix: str | None = line_prefix
        self._parts: PrefixParts = ("",)
        self.failed: Exception | None = None

    def prefix_with(self, *parts: *PrefixParts) -> None:
        """Prefix the lines from now on with ``prefix(*parts)``, made at the first one:
        most invocations of a warm container write none."""
        self._parts = parts
        self._prefix = None

    def write(self, text: str) -> None:
        if self.failed is not None:
            return
        line_prefix = self._prefix
        if line_prefix is None:
            line_prefix = self._prefix = prefix(*self._parts)
        try:
            self._output.write(line_prefix + text + "\n")
            self._output.flush()
        except (OSError, ValueError) as error:  # ValueError: the file is closed
            self.failed = error


class OutputForwarder:
    """Demultiplexes one container's attach stream onto *output*, one prefixed line per line.

    If *output* itself fails (a closed stdout), lines are dropped and
    ``failed`` says so: Relay's own output trouble never decides a handler's
    result. ``tails`` holds each stream's Tail ({STDOUT: Tail, STDERR: Tail}),
    whole once ``close`` has flushed the last partial lines.
    """

    def __init__(self, output: TextIO, line_prefix: str) -> None:
        self._sink = PrefixedOutput(output, line_prefix)
        self._frames = Frames()
        self.tails = {STDOUT: Tail(), STDERR: Tail()}
        self._streams = {stream: Lines(teed(self._sink.write, tail)) for stream, tail in self.tails.items()}

    @property
    def failed(self) -> Exception | None:
        """The first error writing to output, or None."""
        return self._sink.failed

    def feed(self, data: bytes) -> None:
        for stream, payload in self._frames.feed(data):
            lines = self._streams.get(stream)
            if lines is not None:  # 0 would be stdin echoed back; never with a TTY off
                lines.feed(payload)

    def close(self) -> None:
        for lines in self._streams.values():
            lines.close()
