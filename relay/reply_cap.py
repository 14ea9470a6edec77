"""A cap on the bytes one Redis reply may bring into this worker.

Redis sends a reply whole, and redis-py's parsers hold all of it before the
caller sees any: sixteen stream entries whose producer wrote 64 MiB into
each are a gigabyte in the worker before Relay can look at one size. The
worker's client therefore counts each reply's bytes as they arrive and,
past the cap, raises ReplyTooLarge; redis-py drops the connection on any
error while reading, so the rest of the reply is never read and Redis
discards it. The caller then fetches what it needs in a form that cannot
be large (relay.stream.claims).

redis-py takes its reply parser as a class (``parser_class``) among its
connections' arguments; the two below extend its two parsers for RESP3,
the protocol it speaks by default, hiredis's and its own, at the one place
each receives bytes from the socket. Both are tested against the pinned
redis-py (tests/test_reply_cap.py).
"""

from __future__ import annotations

import io
from functools import partial
from typing import Any

import redis
from redis._parsers import _HiredisParser, _RESP3Parser
from redis.utils import HIREDIS_AVAILABLE, SENTINEL

from relay.errors import ReplyTooLarge


def cap_replies(client: redis.Redis, max_reply_bytes: int, *, hiredis: bool = HIREDIS_AVAILABLE) -> redis.Redis:
    """*client*, its connections made from now on reading replies of at most *max_reply_bytes*.

    Connections come from the client's pool (a Sentinel one too), which
    passes its connection arguments, the parser class among them, to each.
    """
    parser = _CappedHiredisParser if hiredis else _CappedPythonParser
    client.connection_pool.connection_kwargs["parser_class"] = partial(parser, max_reply_bytes=max_reply_bytes)
    return client


def _too_large(received: int, cap: int) -> ReplyTooLarge:
    return ReplyTooLarge(f"a Redis reply passed {cap} bytes ({received} received); its connection was dropped")


class _CappedHiredisParser(_HiredisParser):
    """hiredis: count what each read from the socket feeds the reader, per reply."""

    def __init__(self, socket_read_size: int, max_reply_bytes: int) -> None:
        super().__init__(socket_read_size)
        self.max_reply_bytes = max_reply_bytes
        self._received = 0

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        self._received = 0
        return super().read_response(*args, **kwargs)

    def read_from_socket(self, timeout: Any = SENTINEL, raise_on_timeout: bool = True) -> bool:
        reader = self._reader
        before = reader.len() if reader is not None else 0
        read = super().read_from_socket(timeout, raise_on_timeout)
        if reader is not None:
            # A feed only appends to the reader's buffer (it is trimmed when a reply is taken),
            # so the difference is what this read brought.
            self._received += reader.len() - before
            if self._received > self.max_reply_bytes:
                raise _too_large(self._received, self.max_reply_bytes)
        return read


class _CappedPythonParser(_RESP3Parser):
    """redis-py's own parser: its socket buffer keeps bytes until everything in it was read."""

    def __init__(self, socket_read_size: int, max_reply_bytes: int) -> None:
        super().__init__(socket_read_size)
        self.max_reply_bytes = max_reply_bytes

    def on_connect(self, connection: Any) -> None:
        super().on_connect(connection)
        buffer: Any = self._buffer
        buffer._buffer = _CappedBytes(self.max_reply_bytes)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if self._buffer is not None:
            self._buffer._buffer.reply_start = self._buffer.get_pos()
        return super().read_response(*args, **kwargs)


class _CappedBytes(io.BytesIO):
    """The socket buffer's storage; the reply being read starts at ``reply_start``."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap
        self.reply_start = 0

    def write(self, data: Any) -> int:
        received = self.tell() + len(data) - self.reply_start    # the socket buffer writes at the end
        if received > self.cap:
            raise _too_large(received, self.cap)
        return super().write(data)
