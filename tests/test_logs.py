"""Relay's log lines are logfmt that a parser reads back, filtered by LOG_LEVEL."""

import io
import logging
import re
from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.logs import configure_logging, quote


def parse_logfmt(line):
    """A strict logfmt reader (the go-logfmt grammar), independent of relay.logs."""
    pairs = {}
    position = 0
    while position < len(line):
        match = re.compile(r'([^\s="]+)=').match(line, position)
        assert match, f"no key at {position}: {line[position:]!r}"
        key, position = match.group(1), match.end()
        if line[position:position + 1] == '"':
            chars, position = [], position + 1
            while line[position] != '"':
                if line[position] == "\\":
                    escaped = line[position + 1]
                    if escaped in "xuU":
                        width = {"x": 2, "u": 4, "U": 8}[escaped]
                        chars.append(chr(int(line[position + 2:position + 2 + width], 16)))
                        position += 2 + width
                        continue
                    chars.append({"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b", "f": "\f",
                                  "v": "\v"}.get(escaped, escaped))
                    position += 2
                else:
                    chars.append(line[position])
                    position += 1
            value, position = "".join(chars), position + 1
        else:
            end = line.find(" ", position)
            end = len(line) if end < 0 else end
            value, position = line[position:end], end
        assert position == len(line) or line[position] == " ", f"junk after {key}: {line!r}"
        position += 1
        pairs[key] = value
    return pairs


@pytest.fixture
def output():
    buffer = io.StringIO()
    yield buffer
    configure_logging("INFO", stream=io.StringIO())


def lines(buffer):
    return [parse_logfmt(line) for line in buffer.getvalue().splitlines()]


def test_line_shape(output):
    configure_logging("INFO", stream=output)
    logging.getLogger("relay.test").info("Loaded 3 function(s)", extra={"stream": "events", "count": 3})
    (record,) = lines(output)
    assert list(record) == ["time", "level", "msg", "stream", "count"]
    assert record["level"] == "INFO" and record["msg"] == "Loaded 3 function(s)"
    assert record["stream"] == "events" and record["count"] == "3"
    stamp = datetime.fromisoformat(record["time"].replace("Z", "+00:00"))
    assert stamp.tzinfo is not None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)", record["time"])


@pytest.mark.parametrize(("configured", "shown"), [
    ("DEBUG", ["DEBUG", "INFO", "WARN", "ERROR"]),
    ("INFO", ["INFO", "WARN", "ERROR"]),
    ("WARN", ["WARN", "ERROR"]),
    ("ERROR", ["ERROR"]),
])
def test_level_filtering(output, configured, shown):
    configure_logging(configured, stream=output)
    log = logging.getLogger("relay.test")
    log.debug("d")
    log.info("i")
    log.warning("w")
    log.error("e")
    assert [record["level"] for record in lines(output)] == shown


def test_exceptions_stay_on_one_line(output):
    configure_logging("INFO", stream=output)
    try:
        raise ValueError("bad \"thing\"\nhere")
    except ValueError:
        logging.getLogger("relay.test").exception("Failed")
    text = output.getvalue()
    assert text.count("\n") == 1
    (record,) = lines(output)
    assert record["msg"] == "Failed" and 'ValueError: bad "thing"\nhere' in record["error"]


@pytest.mark.parametrize(("value", "rendered"), [
    ("plain", "plain"), ("", '""'), ("two words", '"two words"'), ("a=b", '"a=b"'), ('say "hi"', '"say \\"hi\\""'),
    ("tab\there", '"tab\\there"'), ("back\\slash", "back\\slash"), (None, "<nil>"), (True, "true"), (3, "3"),
    ("caf\u00e9", "caf\u00e9"), ("nul\x00", '"nul\\x00"'), ("nb\u00a0sp", '"nb\\u00a0sp"'),
])
def test_quoting(value, rendered):
    assert quote(value) == rendered


@pytest.mark.parametrize("value", [
    "two\nlines", "cr\rlf", 'a "quoted" value', "key=value", "ctl \x00\x07\x1b[31m\x7f", "lone \ud800 surrogate",
    "\udfff", "sep\u2028\u2029\x85", "zero\u200bwidth", "back\\slash=\"", "",
])
def test_hostile_values_stay_on_one_line_and_parse_back(output, value):
    raw = io.BytesIO()
    strict = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    configure_logging("INFO", stream=strict)
    logging.getLogger("relay.test").warning(value, extra={"event_id": value, "odd\nkey\ud800": value})
    rendered = raw.getvalue().decode("utf-8")
    assert rendered.endswith("\n") and rendered.count("\n") == 1
    assert rendered[:-1].isprintable()
    record = parse_logfmt(rendered[:-1])
    assert record["msg"] == value and record["event_id"] == value and record["odd_key_"] == value


@given(st.dictionaries(st.from_regex(r"[a-z_]{1,12}", fullmatch=True), st.text(), max_size=5), st.text())
def test_any_message_and_values_parse_back(attributes, message):
    buffer = io.StringIO()
    configure_logging("DEBUG", stream=buffer)
    reserved = {"name", "msg", "args", "message", "asctime", "levelname", "levelno", "pathname", "filename",
                "module", "exc_info", "exc_text", "stack_info", "lineno", "funcName", "created", "msecs",
                "relativeCreated", "thread", "threadName", "processName", "process", "taskName", "time", "level"}
    attributes = {key: value for key, value in attributes.items() if key not in reserved}
    logging.getLogger("relay.test").info("%s", message, extra=attributes)
    rendered = buffer.getvalue()
    assert rendered.endswith("\n") and rendered.count("\n") == 1
    record = parse_logfmt(rendered[:-1])
    assert record["msg"] == message
    for key, value in attributes.items():
        assert record[key] == value
