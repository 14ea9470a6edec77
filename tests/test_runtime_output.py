"""Handler output forwarding: frames, lines, prefixes, caps, tails."""

import io
import struct

import pytest

from relay.runtime.output import (
    MAX_LINE_BYTES,
    STDERR,
    STDOUT,
    TAIL_BYTES,
    TRUNCATED,
    Frames,
    Lines,
    OutputForwarder,
    Tail,
    prefix,
    teed,
)


def frame(stream, payload):
    return struct.pack(">BxxxL", stream, len(payload)) + payload


def test_prefix_names_function_handler_and_known_ids():
    assert prefix("fn", "events.created.handler") == 'relay: function "fn" handler "events.created.handler": '
    assert prefix("fn", "h.h", "1-0", "evt_1") == 'relay: function "fn" handler "h.h" message "1-0" event "evt_1": '
    assert prefix("fn", "h.h", None, "evt_1") == 'relay: function "fn" handler "h.h" event "evt_1": '


@pytest.mark.parametrize(("event_id", "shown"), [
    ("evt\nrelay: forged", "evt\\nrelay: forged"), ('say "hi"', 'say \\"hi\\"'), ("back\\slash", "back\\\\slash"),
    ("lone \ud800", "lone \\ud800"), ("esc \x1b[2J\r", "esc \\x1b[2J\\r"), ("line\u2028sep", "line\\u2028sep"),
    ("caf\u00e9", "caf\u00e9"),
])
def test_prefix_values_are_escaped(event_id, shown):
    assert prefix("fn", "h.h", "1-0", event_id) == f'relay: function "fn" handler "h.h" message "1-0" event "{shown}": '


def test_a_hostile_event_id_keeps_one_output_line_per_handler_line():
    raw = io.BytesIO()
    output = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    forwarder = OutputForwarder(output, prefix("fn", "h.h", "1-0", "evt\n\ud800"))
    forwarder.feed(frame(1, b"one\ntwo\n"))
    forwarder.close()
    assert forwarder.failed is None
    assert raw.getvalue().decode().splitlines() == [
        'relay: function "fn" handler "h.h" message "1-0" event "evt\\n\\ud800": one',
        'relay: function "fn" handler "h.h" message "1-0" event "evt\\n\\ud800": two']


def test_frames_survive_any_chunking():
    stream = frame(1, b"hello\n") + frame(2, b"oops\n") + frame(1, b"") + frame(1, b"x" * 70000)
    for size in (1, 3, 7, 8, 9, 4096, len(stream)):
        frames = Frames()
        seen = []
        for start in range(0, len(stream), size):
            seen += frames.feed(stream[start:start + size])
        assert seen == [(1, b"hello\n"), (2, b"oops\n"), (1, b""), (1, b"x" * 70000)]
        assert frames.pending == 0


def collect(limit=MAX_LINE_BYTES):
    lines = []
    return lines, Lines(lines.append, limit)


def test_partial_lines_are_joined_and_the_last_one_flushed_at_the_end():
    lines, splitter = collect()
    for chunk in (b"he", b"llo\nwor", b"ld\n\npart", b"ial"):
        splitter.feed(chunk)
    assert lines == ["hello", "world", ""]
    splitter.close()
    assert lines == ["hello", "world", "", "partial"]


def test_lines_are_verbatim():
    lines, splitter = collect()
    splitter.feed(b'  tabs\tand "quotes" level=ERROR \\n \r\n')
    assert lines == ['  tabs\tand "quotes" level=ERROR \\n \r']


def test_invalid_utf8_is_replaced_not_fatal():
    lines, splitter = collect()
    splitter.feed(b"caf\xc3\xa9 \xff\n")
    assert lines == ["caf\u00e9 \ufffd"]


def test_a_long_line_is_cut_marked_and_the_rest_dropped():
    lines, splitter = collect(limit=10)
    splitter.feed(b"0123456789abcdef")
    splitter.feed(b"ghijkl")
    splitter.feed(b"mnop\nnext\n")
    assert lines == ["0123456789" + TRUNCATED, "next"]


def test_the_default_cap_is_64_kib_and_memory_stays_bounded():
    lines, splitter = collect()
    for _ in range(100):
        splitter.feed(b"y" * 65536)  # 6.4 MB without a newline
        assert len(splitter._partial) <= MAX_LINE_BYTES
    splitter.feed(b"\nafter\n")
    assert [len(line) for line in lines] == [MAX_LINE_BYTES + len(TRUNCATED), 5]


@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_a_cut_never_splits_a_utf8_character(offset):
    lines, splitter = collect(limit=10)
    splitter.feed(b"a" * (7 + offset) + "\u20ac".encode() * 3 + b"\n")  # a 3-byte character at every cut position
    assert "\ufffd" not in lines[0]
    assert lines[0].endswith(TRUNCATED)


def test_forwarder_prefixes_each_line_and_keeps_streams_apart():
    output = io.StringIO()
    forwarder = OutputForwarder(output, prefix("fn", "h.h", "1-0"))
    data = frame(1, b"out one\nout ") + frame(2, b"err one\n") + frame(1, b"two\n") + frame(2, b"err tail")
    for index in range(len(data)):
        forwarder.feed(data[index:index + 1])
    forwarder.close()
    assert output.getvalue().splitlines() == [
        'relay: function "fn" handler "h.h" message "1-0": out one',
        'relay: function "fn" handler "h.h" message "1-0": err one',
        'relay: function "fn" handler "h.h" message "1-0": out two',
        'relay: function "fn" handler "h.h" message "1-0": err tail',
    ]


def test_a_failing_output_drops_lines_without_raising():
    output = io.StringIO()
    output.close()
    forwarder = OutputForwarder(output, prefix("fn", "h.h"))
    forwarder.feed(frame(1, b"one\ntwo\n"))
    forwarder.close()
    assert isinstance(forwarder.failed, ValueError)


# --- tails ---

def tail_of(lines, limit=TAIL_BYTES):
    tail = Tail(limit)
    for line in lines:
        tail.add(line)
    return tail.text()


def test_a_tail_of_nothing_is_empty():
    assert Tail().text() == ""
    assert TAIL_BYTES == 4096


def test_a_tail_that_fits_holds_every_line_joined_with_newlines():
    assert tail_of(["one", "", "three"]) == "one\n\nthree"


def test_a_full_tail_is_the_last_bytes_of_the_lines():
    assert tail_of(["0123", "4567", "8"], limit=11) == "0123\n4567\n8"   # exactly 11
    assert tail_of(["0123", "4567", "89"], limit=10) == "23\n4567\n89"   # the oldest line kept keeps its end
    assert tail_of(["0123", "4567", "89"], limit=8) == "4567\n89"        # a whole line goes with its newline
    assert tail_of(["0123", "4567", "89"], limit=7) == "4567\n89"
    assert tail_of(["0123", "4567", "89"], limit=6) == "567\n89"


def test_a_tail_counts_utf8_bytes_not_characters():
    euro = "\u20ac"                                   # 3 bytes
    assert tail_of(["ab", euro * 2], limit=9) == "ab\n" + euro * 2     # 2 + 1 + 6 bytes
    assert tail_of(["ab", euro * 2], limit=8) == "b\n" + euro * 2      # 5 characters, but 9 bytes


def test_a_line_longer_than_the_tail_keeps_its_end():
    assert tail_of(["before", "x" * 20 + "the end"], limit=10) == "xxxthe end"
    assert tail_of(["0123456789"], limit=10) == "0123456789"
    assert tail_of(["x" * 20 + "the end", "next"], limit=10) == "e end\nnext"


@pytest.mark.parametrize("offset", [0, 1, 2])
def test_the_end_of_a_line_never_starts_inside_a_character(offset):
    text = tail_of(["a" + "\u20ac" * 10 + "b" * offset], limit=10)
    assert text == "\u20ac" * ((10 - offset) // 3) + "b" * offset
    text = tail_of(["a" + "\u20ac" * 10, "b" * offset], limit=10)
    assert text == "\u20ac" * ((9 - offset) // 3) + "\n" + "b" * offset


def test_a_tail_stays_within_its_limit_whatever_is_fed():
    tail, stream = Tail(), b""
    for number in range(3000):
        line = f"line {number} " + "\u00e9" * (number % 50) + ("x" * 5000 if number % 997 == 0 else "")
        tail.add(line)
        stream = (stream + b"\n" + line.encode() if stream else line.encode())[-2 * TAIL_BYTES:]
        expected = stream[-TAIL_BYTES:]
        assert tail.text().encode() in (expected, expected[1:])    # the last bytes, less a split character
    assert tail.text().endswith("line 2999 " + "\u00e9" * 49)


def test_a_cleared_tail_starts_again():
    tail = Tail(10)
    tail.add("old")
    tail.clear()
    tail.add("new")
    assert tail.text() == "new"
    tail.clear()
    tail.clear()
    assert tail.text() == ""


def test_teed_writes_and_keeps_each_line():
    written, tail = [], Tail()
    lines = Lines(teed(written.append, tail))
    lines.feed(b"one\ntwo")
    lines.close()
    assert written == ["one", "two"] and tail.text() == "one\ntwo"


def test_the_forwarders_tails_keep_each_stream_as_forwarded():
    output = io.StringIO()
    forwarder = OutputForwarder(output, prefix("fn", "h.h"))
    forwarder.feed(frame(1, b"out one\n") + frame(2, b"err \xff one\n") + frame(1, b"z" * 70000 + b"\n")
                   + frame(2, b"no newline"))
    forwarder.close()
    assert forwarder.tails[STDERR].text() == "err \ufffd one\nno newline"
    assert forwarder.tails[STDOUT].text() == ("z" * MAX_LINE_BYTES + TRUNCATED)[-TAIL_BYTES:]   # "out one" went
