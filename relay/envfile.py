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

import os
import re
import stat

from relay.errors import ConfigError
from relay.quoting import quote

SERVICE_ENV_FILE = "/etc/relay/relay.env"  # the EnvironmentFile= of deploy/relay.service
MAX_BYTES = 1024 * 1024
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_BLANK = " \t\n\r"
_NEWLINE = "\n\r"
_KEPT_IN_DOUBLE_QUOTES = '"\\`$'


def command_environment(env_file, environ):
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


def read_environment_file(path):
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


def parse_environment(data, shown):
    """The assignments of *data* (bytes) as a dict; *shown* names the file in errors."""
    nul = data.find(b"\0")
    if nul >= 0:
        raise ConfigError(f"{shown}, line {_line_of(data, nul)}: a NUL byte; an environment file is text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{shown}, line {_line_of(data, error.start)}: not UTF-8 text") from None
    variables = {}
    for line, name, value in _assignments(text, shown):
        if not _NAME.fullmatch(name):  # not quoted: a line gone wrong may hold a password before an "="
            raise ConfigError(f'{shown}, line {line}: what comes before "=" is not a variable name (letters, '
                              "digits and _, not starting with a digit)")
        variables[name] = value
    return variables


def _assignments(text, shown):
    """(line, name, value) for each assignment in *text*, following systemd's states, one character at a time."""
    state, name, value, line, start = "before name", [], [], 1, 1
    for character in text:
        if state == "before name":
            if character in "#;":
                state = "comment"
            elif character not in _BLANK:
                state, name, start = "name", [character], line
        elif state == "name":
            if character in _NEWLINE:
                raise ConfigError(f'{shown}, line {start}: not NAME=value (there is no "=")')
            elif character == "=":
                state, value = "before value", []
            else:
                name.append(character)
        elif state == "before value":
            if character in _NEWLINE:
                yield start, _name(name), _text(value)
                state = "before name"
            elif character == "'":
                state = "single quotes"
            elif character == '"':
                state = "double quotes"
            elif character == "\\":
                state = "escape"
                value.append(_ESCAPED)
            elif character not in _BLANK:
                state = "value"
                value.append(character)
        elif state == "value":
            if character in _NEWLINE:
                yield start, _name(name), _trailing_blanks_dropped(value)
                state = "before name"
            elif character == "\\":
                state = "escape"
                value.append(_ESCAPED)  # a mark: what follows is kept even if it is a blank
            else:
                value.append(character)
        elif state == "escape":
            state = "value"
            if character not in _NEWLINE:
                value.append(character)
        elif state == "single quotes":
            if character == "'":
                state = "before value"
            else:
                value.append(character)
        elif state == "double quotes":
            if character == '"':
                state = "before value"
            elif character == "\\":
                state = "double quote escape"
            else:
                value.append(character)
        elif state == "double quote escape":
            state = "double quotes"
            if character in _KEPT_IN_DOUBLE_QUOTES:
                value.append(character)
            elif character != "\n":
                value += ["\\", character]
        elif state == "comment" and character in _NEWLINE:
            state = "before name"
        if character == "\n":
            line += 1
    if state == "name":
        raise ConfigError(f'{shown}, line {start}: not NAME=value (there is no "=")')
    if state in ("single quotes", "double quotes", "double quote escape"):
        what = f"the value of {_name(name)}" if _NAME.fullmatch(_name(name)) else "the value"
        raise ConfigError(f"{shown}, line {start}: {what} opens a quote that is never closed")
    if state == "value":
        yield start, _name(name), _trailing_blanks_dropped(value)
    elif state in ("before value", "escape"):
        yield start, _name(name), _text(value)


_ESCAPED = object()  # marks, in a value being read, that a backslash kept the next character


def _name(characters):
    return "".join(characters).rstrip(" \t")


def _text(value):
    return "".join(part for part in value if part is not _ESCAPED)


def _trailing_blanks_dropped(value):
    """An unquoted value at its line's end: without its trailing blanks, except one a backslash kept."""
    end = len(value)
    while end and value[end - 1] in (" ", "\t", "\r") and not (end >= 2 and value[end - 2] is _ESCAPED):
        end -= 1
    return _text(value[:end])


def _line_of(data, offset):
    return data.count(b"\n", 0, offset) + 1
