"""relay.envfile: systemd's EnvironmentFile format, and how the admin commands merge it with the environment."""

import os
import re

import pytest

from relay import envfile
from relay.envfile import command_environment, parse_environment, read_environment_file
from relay.errors import ConfigError
from tests.support.relay_process import ROOT

FILE = "/etc/relay/relay.env"


def parsed(text):
    return parse_environment(text.encode(), FILE)


def refused(data):
    with pytest.raises(ConfigError) as caught:
        parse_environment(data if isinstance(data, bytes) else data.encode(), FILE)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{FILE}, line ")
    return message


@pytest.mark.parametrize(("text", "expected"), [
    ("A=1\n", {"A": "1"}),
    ("A=1", {"A": "1"}),                                           # no newline at the end
    ("  A = spaced value  \t\n", {"A": "spaced value"}),           # blanks around name and value dropped
    ("A=\n", {"A": ""}),
    ("A=", {"A": ""}),
    ("# comment\n; also a comment\n\n   \nA=1\n", {"A": "1"}),
    ("A=a#b ;c\n", {"A": "a#b ;c"}),                               # # and ; inside a value are text
    ("A=x\\ \n", {"A": "x "}),                                      # a backslash keeps a trailing blank
    ("A=\\ \n", {"A": " "}),
    ("A=x\\\\y\n", {"A": "x\\y"}),
    ("A=x\\ny\n", {"A": "xny"}),                                    # unquoted: the backslash only keeps n
    ("A=first\\\nsecond\n", {"A": "firstsecond"}),                 # a line continuation
    ("A='single \\ \"quoted\" $x'\n", {"A": 'single \\ "quoted" $x'}),
    ("A='two\nlines'\n", {"A": "two\nlines"}),
    ('A="say \\"hi\\" \\\\ \\$x \\`y\\` \\n"\n', {"A": 'say "hi" \\ $x `y` \\n'}),
    ('A="joined \\\nline"\n', {"A": "joined line"}),
    ('A="kept "  \n', {"A": "kept "}),                              # blanks inside quotes stay
    ("A='x'y \"z\"\n", {"A": 'xy "z"'}),                           # the value goes on after a quote
    ("A='x' 'y'\n", {"A": "xy"}),                                   # blanks between quoted parts are dropped
    ("A=x'y'\n", {"A": "x'y'"}),                                    # a later quote is a character
    ("A=1\r\nB=2\r\n", {"A": "1", "B": "2"}),                       # CRLF
    ("A=1\nA=2\n", {"A": "2"}),                                     # the last one wins
    ("# comment \\\nA=1\n", {"A": "1"}),                            # a comment ends at its line (systemd 254)
    ("REDIS_URI=redis://relay:p%40ss@10.0.0.1:6379/0\n", {"REDIS_URI": "redis://relay:p%40ss@10.0.0.1:6379/0"}),
    ("_A1=é\x1b\n", {"_A1": "é\x1b"}),                              # control characters are allowed in values
])
def test_values_are_read_as_systemd_reads_them(text, expected):
    assert parsed(text) == expected


def test_the_shipped_example_is_read_whole():
    variables = read_environment_file(ROOT / "deploy" / "relay.env.example")
    assert variables["REDIS_URI"] and variables["REDIS_STREAM"] and variables["REDIS_GROUP"]


@pytest.mark.parametrize(("data", "message"), [
    ("A=1\nREDIS_URI redis://u:hunter2@h\n", 'line 2: not NAME=value (there is no "=")'),
    ("A=1\nB", 'line 2: not NAME=value (there is no "=")'),
    ("A=1\nexport B=hunter2\n", 'line 2: what comes before "=" is not a variable name'),
    ("1A=hunter2\n", 'line 1: what comes before "=" is not a variable name'),
    ("REDIS_URI redis://u:hunter2@h=x\n", 'line 1: what comes before "=" is not a variable name'),
    ("A=1\n\nB='hunter2\nC=3\n", "line 3: the value of B opens a quote that is never closed"),
    ('A="hunter2', "line 1: the value of A opens a quote that is never closed"),
    (b"A=1\nB=hunter2\xff\n", "line 2: not UTF-8 text"),
    (b"A=1\n\nB=hunter2\0\n", "line 3: a NUL byte; an environment file is text"),
])
def test_a_malformed_file_is_one_line_naming_the_file_and_line_never_a_value(data, message):
    shown = refused(data)
    assert message in shown
    assert "hunter2" not in shown


def test_the_environment_wins_and_the_default_file_is_read_only_when_it_exists(tmp_path, monkeypatch):
    service = tmp_path / "relay.env"
    monkeypatch.setattr(envfile, "SERVICE_ENV_FILE", str(service))
    environ = {"REDIS_STREAM": "mine", "PATH": "/bin"}
    assert command_environment(None, environ) is environ            # no file: the environment as it is
    service.write_text("REDIS_URI=redis://db:6379\nREDIS_STREAM=events\n")
    assert command_environment(None, environ) == {"REDIS_URI": "redis://db:6379", "REDIS_STREAM": "mine",
                                                  "PATH": "/bin"}
    other = tmp_path / "other.env"
    other.write_text("REDIS_URI=redis://other:6379\n")
    assert command_environment(str(other), {})["REDIS_URI"] == "redis://other:6379"
    assert command_environment("/dev/null", {}) == {}                # /dev/null: no file at all


def test_an_unreadable_file_is_one_line(tmp_path):
    for path, message in [(tmp_path / "missing.env", "cannot read the environment file {}: No such file or directory"),
                          (tmp_path, "the environment file {} is not a regular file")]:
        with pytest.raises(ConfigError, match=re.escape(message.format(path))):
            read_environment_file(path)
    fifo = tmp_path / "fifo.env"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="is not a regular file"):
        read_environment_file(fifo)   # refused at once: it never waits for a writer
    big = tmp_path / "big.env"
    big.write_bytes(b"A=" + b"x" * envfile.MAX_BYTES)
    with pytest.raises(ConfigError, match="is larger than 1024 KiB"):
        read_environment_file(big)


def test_the_default_file_is_the_one_the_shipped_unit_names():
    unit = (ROOT / "deploy" / "relay.service").read_text()
    assert re.findall(r"^EnvironmentFile=-?(.+)$", unit, re.MULTILINE) == [envfile.SERVICE_ENV_FILE]
