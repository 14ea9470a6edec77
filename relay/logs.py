"""Relay's own log lines, in logfmt.

    time=2026-09-13T22:47:41.204+02:00 level=INFO msg="Loaded 3 function(s)" stream=events

Attributes are passed with the standard ``extra`` argument and printed in
the order given: ``log.info("Executed", extra={"function": name})``. Values
are quoted only when they must be, and escaped like Go's ``strconv.Quote``
so any logfmt parser reads them back. Handler output is not logged through
here: it is a raw transport (see the executor).
"""

import logging
import sys
from datetime import datetime
from typing import TextIO

LEVEL_NUMBERS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING, "ERROR": logging.ERROR}
_LEVEL_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN", logging.ERROR: "ERROR"}
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t",
            "\a": "\\a", "\b": "\\b", "\f": "\\f", "\v": "\\v"}


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds")
        level = _LEVEL_NAMES.get(record.levelno) or ("ERROR" if record.levelno > logging.ERROR else "DEBUG")
        parts = [f"time={stamp.replace('+00:00', 'Z')}", f"level={level}", f"msg={quote(record.getMessage())}"]
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS:
                parts.append(f"{_key(key)}={quote(value)}")
        if record.exc_info:
            parts.append(f"error={quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


def configure_logging(level: str = "INFO", stream: TextIO | None = None) -> logging.Logger:
    """Send Relay's log records, at *level* and above, to stderr as logfmt."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger("relay")
    root.handlers[:] = [handler]
    root.setLevel(LEVEL_NUMBERS[level])
    root.propagate = False
    return root


def quote(value: object) -> str:
    """Render *value* as a logfmt value, quoting and escaping only when needed."""
    if value is None:
        return "<nil>"
    if value is True or value is False:
        return "true" if value else "false"
    text = str(value)
    if text and text.isprintable() and " " not in text and "=" not in text and '"' not in text:
        return text
    return f'"{escape(text)}"'


def escape(text: str) -> str:
    """*text* safe between double quotes on one line: quotes, backslashes, control
    characters, line separators and lone surrogates become Go-style escapes."""
    if text.isprintable() and '"' not in text and "\\" not in text:
        return text   # the usual case, and every character the loop below would keep as it is
    return "".join(_escape(char) for char in text)


def _escape(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _key(name: str) -> str:
    return "".join(char if char > " " and char not in '="' and char.isprintable() else "_" for char in name) or "_"
