"""The service's environment file, for the administrative commands that need Relay's variables.

The shipped systemd unit hands ``relay start`` its variables from
SERVICE_ENV_FILE (``EnvironmentFile=`` in deploy/relay.service). An operator
on that host runs ``sudo relay dlq ls`` or ``relay health`` without those
variables, so the commands that read them (health, dlq, invoke) read the
same file: the one ``--env-file`` names, else SERVICE_ENV_FILE when it
exists. A variable already set in the environment wins over the file.

The file is read as systemd reads an EnvironmentFile (systemd.exec(5), and
``parse_env_file_internal`` in systemd's src/basic/env-file.c):

- one ``NAME=value`` a line; blank lines and lines whose first non-blank
  character is ``#`` or ``;`` are comments (to the end of the line, as since
  systemd 254); whitespace around the name and around an unquoted value is
  dropped, whitespace inside the value is kept;
- unquoted, a backslash keeps the next character as it is (``\\\\`` is one
  backslash) and a backslash at the end of a line joins the next line;
- ``'…'`` keeps everything up to the next ``'`` as it is, across lines;
- ``"…"`` likewise, where a backslash before ``"``, ``\\``, `````` or ``$``
  keeps that character, before a newline joins the lines, and before
  anything else stays a backslash;
- after a closing quote the value goes on (``A='x'y`` is ``xy``); a quote
  later in an unquoted value is an ordinary character.

Where systemd would quietly skip a line or take the rest of the file as a
value, Relay refuses the file instead, with one line naming the file and
the line: a line that is not ``NAME=value``, a name that is not a variable
name (letters, digits and ``_``, not starting with a digit), a quote that is
never closed, text that is not UTF-8, a NUL byte. A value never appears in
a message: it may be a password.

Standard library only: the admin commands import it.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping
from typing import TypeAlias

from relay.errors import ConfigError
from relay.quoting import quote

SERVICE_ENV_FILE = "/etc/relay/relay.env"  # the EnvironmentFile= of deploy/relay.service
MAX_BYTES = 1024 * 1024
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_BLANK = " \t\n\r"
_NEWLINE = "\n\r"
_KEPT_IN_DOUBLE_QUOTES = '"\\`$'


def command_environment(env_file: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> Mapping[str, str]:
    """*environ* with the variables of *env_file* it lacks; *env_file* None means SERVICE_ENV_FILE if it exists.

    ConfigError, one line naming the file (and the line), when the file
    cannot be read or is not an environment file.
    """
    if env_file is None:
        if not os.path.lexists(SERVICE_ENV_FILE):
            return environ
        env_file = SERVICE_ENV_FILE
    from_file = read_environment_file(env_file)
    return {**from_file, **environ}


def read_environment_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """The variables of the environment file *path*, in order; a name given twice keeps its last value."""
    shown = str(path) if str(path).isprintable() else quote(str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise ConfigError(f"cannot read the environment file {shown}: {error.strerror}") from None
    try:
        kind = os.fstat(fd).st_mode
        if not (stat.S_ISREG(kind) or stat.S_ISCHR(kind)):  # a FIFO would hang; a character device: /dev/null
            raise ConfigError(f"the environment file {shown} is not a regular file")
        data = b""
        while len(data) <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as error:
        raise ConfigError(f"cannot read the environment file {shown}: {error.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise ConfigError(f"the environment file {shown} is larger than {MAX_BYTES // 1024} KiB")
    return parse_environment(data, shown)


def parse_environment(data: bytes, shown: str) -> dict[str, str]:
    """The assignments of *data* (bytes) as a dict; *shown* names the file in errors."""
    nul = data.find(b"\0")
    if nul >= 0:
        raise ConfigError(f"{shown}, line {_line_of(data, nul)}: a NUL byte; an environment file is text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{shown}, line {_line_of(data, error.start)}: not UTF-8 text") from None
    return {name: value for name, value in _Reader(shown).read(text)}


class _Escaped:
    """The type of _ESCAPED."""


_ESCAPED = _Escaped()  # marks, in a value being read, that a backslash kept the next character
_State: TypeAlias = Callable[[str], "_State"]   # reads one character, returns the next state


class _Reader:
    """systemd's parser, one method per state: each reads one character and returns the next state."""

    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.found: list[tuple[str, str]] = []        # (name, value), in file order
        self.name: list[str] = []
        self.value: list[str | _Escaped] = []
        self.line = self.start = 1

    def read(self, text: str) -> list[tuple[str, str]]:
        state: _State = self.before_name
        for character in text:
            state = state(character)
            if character == "\n":
                self.line += 1
        if state == self.in_name:
            raise self._refusal('not NAME=value (there is no "=")')
        if state in (self.single_quoted, self.double_quoted, self.double_quoted_escape):
            name = _name(self.name)
            raise self._refusal(f"{'the value of ' + name if _NAME.fullmatch(name) else 'the value'} opens a "
                                "quote that is never closed")
        if state == self.unquoted:
            self._assign(_trailing_blanks_dropped(self.value))
        elif state in (self.before_value, self.escaped):
            self._assign(_text(self.value))
        return self.found

    def before_name(self, character: str) -> _State:
        if character in "#;":
            return self.comment
        if character in _BLANK:
            return self.before_name
        self.name, self.value, self.start = [character], [], self.line
        return self.in_name

    def comment(self, character: str) -> _State:
        return self.before_name if character in _NEWLINE else self.comment

    def in_name(self, character: str) -> _State:
        if character in _NEWLINE:
            raise self._refusal('not NAME=value (there is no "=")')
        if character == "=":
            return self.before_value
        self.name.append(character)
        return self.in_name

    def before_value(self, character: str) -> _State:
        if character in _NEWLINE:
            return self._assign(_text(self.value))
        if character == "'":
            return self.single_quoted
        if character == '"':
            return self.double_quoted
        if character in _BLANK:
            return self.before_value
        return self.unquoted(character)

    def unquoted(self, character: str) -> _State:
        if character in _NEWLINE:
            return self._assign(_trailing_blanks_dropped(self.value))
        if character == "\\":
            self.value.append(_ESCAPED)  # what follows is kept, even a trailing blank
            return self.escaped
        self.value.append(character)
        return self.unquoted

    def escaped(self, character: str) -> _State:
        if character not in _NEWLINE:   # a backslash before a newline joins the lines
            self.value.append(character)
        return self.unquoted

    def single_quoted(self, character: str) -> _State:
        if character == "'":
            return self.before_value
        self.value.append(character)
        return self.single_quoted

    def double_quoted(self, character: str) -> _State:
        if character == '"':
            return self.before_value
        if character == "\\":
            return self.double_quoted_escape
        self.value.append(character)
        return self.double_quoted

    def double_quoted_escape(self, character: str) -> _State:
        if character in _KEPT_IN_DOUBLE_QUOTES:
            self.value.append(character)
        elif character != "\n":
            self.value += ["\\", character]
        return self.double_quoted

    def _assign(self, value: str) -> _State:
        name = _name(self.name)
        if not _NAME.fullmatch(name):  # not quoted: a line gone wrong may hold a password before an "="
            raise self._refusal('what comes before "=" is not a variable name (letters, digits and _, '
                                "not starting with a digit)")
        self.found.append((name, value))
        return self.before_name

    def _refusal(self, problem: str) -> ConfigError:
        return ConfigError(f"{self.shown}, line {self.start}: {problem}")


def _name(characters: list[str]) -> str:
    return "".join(characters).rstrip(" \t")


def _text(value: list[str | _Escaped]) -> str:
    return "".join(part for part in value if not isinstance(part, _Escaped))


def _trailing_blanks_dropped(value: list[str | _Escaped]) -> str:
    """An unquoted value at its line's end: without its trailing blanks, except one a backslash kept."""
    end = len(value)
    while end and value[end - 1] in (" ", "\t", "\r") and not (end >= 2 and value[end - 2] is _ESCAPED):
        end -= 1
    return _text(value[:end])


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1
