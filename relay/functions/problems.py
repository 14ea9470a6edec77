"""Collecting every problem of a function, each with its file, line and field path.

A Problem says where (the field path in the template, ``events[1].pattern.
created_at.gt``; the line of that field once the template's node graph has
been read; another file of the function when the problem is that file's) and
what. Errors refuse the function; warnings are said and change nothing.

Messages stay short whatever the template holds: values are rendered through
``show`` (as YAML would write them, about 100 characters at most), a field
name in a path is cut the same way, a message is capped as a backstop, and an
error lists at most MAX_LISTED problems, then says how many more there are
(relay.errors.InvalidTemplate). No message shows a Python repr: ``null``,
``true`` and ``"text"``, never ``None``, ``True`` or ``'text'``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date
from typing import Protocol

from relay.errors import InvalidTemplate
from relay.quoting import QUOTE_LIMIT, shorten
from relay.quoting import show as _show

MAX_MESSAGE = 3 * QUOTE_LIMIT
ERROR, WARNING = "error", "warning"


class Lines(Protocol):
    """Where the fields of a template are written (relay.functions.document.Locations)."""

    def line(self, path: str) -> int | None: ...


@dataclass(frozen=True)
class Problem:
    """One problem: the field path ("" for the file as a whole), the message, where and how bad."""

    path: str
    message: str
    line: int | None = None     # 1-based line in the template, when known
    severity: str = ERROR
    file: str | None = None     # the function's file it is about; None: the template

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        field = f"{self.path}: " if self.path else ""
        return f"{self.file + ': ' if self.file else ''}{where}{field}{self.message}"


class Problems:
    """The problems found so far, errors and warnings, in the order they were found."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, path: str, message: str, line: int | None = None) -> None:
        """An error at *path*: the function is refused."""
        self._add(path, message, ERROR, line)

    def warn(self, path: str, message: str, line: int | None = None) -> None:
        """A warning at *path*: said, and the function loads all the same."""
        self._add(path, message, WARNING, line)

    def _add(self, path: str, message: str, severity: str, line: int | None) -> None:
        self.items.append(Problem(shorten(path, 2 * QUOTE_LIMIT), shorten(message, MAX_MESSAGE), line, severity))

    @property
    def errors(self) -> list[Problem]:
        return [problem for problem in self.items if problem.severity == ERROR]

    @property
    def warnings(self) -> list[Problem]:
        return [problem for problem in self.items if problem.severity == WARNING]

    def locate(self, locations: Lines | None) -> None:
        """Give every problem without a line the line of its field in *locations* (relay.functions.document)."""
        if locations is not None:
            self.items = [problem if problem.line is not None or problem.file is not None
                          else replace(problem, line=locations.line(problem.path)) for problem in self.items]

    def raise_if_any(self, source: str, locations: Lines | None = None) -> None:
        """Raise InvalidTemplate listing the errors, if there are any."""
        if self.errors:
            self.locate(locations)
            raise InvalidTemplate(source, self.errors)

    def __len__(self) -> int:
        return len(self.errors)


def join(path: str, key: object) -> str:
    """Extend a field path: join("events[1].pattern", "created_at") → "events[1].pattern.created_at"."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    name = shorten(key if isinstance(key, str) else show(key))
    return f"{path}.{name}" if path else name


def reason(error: BaseException, value: object) -> str:
    """*error*'s text with any full quotation of *value* in it rendered like ``show``."""
    text = str(error)
    for quoted in (repr(value), f'"{value}"'):
        text = text.replace(quoted, show(value))
    return text


def show(value: object) -> str:
    """A short, unambiguous rendering of a YAML value for a message (see relay.quoting.show)."""
    return _show(value)


def given(value: object) -> str:
    """What *value* is, in words and as written, for "must be ..., not <given>": ``the string "x"``."""
    if value is None:
        return "an empty value (null)"
    if value is True or value is False:
        return f"the boolean {show(value)}"
    if isinstance(value, (int, float)):
        return f"the number {show(value)}"
    if isinstance(value, str):
        return f"the string {show(value)}" if value else "an empty string"
    if isinstance(value, date):
        return f"the timestamp {show(value)}"
    if isinstance(value, dict):
        return f"the mapping {show(value)}" if value else "an empty mapping"
    if isinstance(value, (list, tuple)):
        return f"the list {show(value)}" if value else "an empty list"
    return show(value)
