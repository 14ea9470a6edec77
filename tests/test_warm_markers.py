"""MarkedLines: a warm container's stream with the protocol's marker lines taken out (no I/O)."""

import pytest

from relay.errors import ProtocolBreak
from relay.runtime.output import Lines
from relay.runtime.warm import MARKER, MARKER_LINE_LIMIT, MarkedLines

STREAM = (b"first line\npartial " + MARKER + b"end 1\n" + b"\x1e not a marker\n" + MARKER + b"done 1 ok\n"
          + b"after \x1e\x1f" + b"relay-ish\n" + MARKER + b"end 2\n")
LINES = ["first line", "partial ", "\x1e not a marker", "after \x1e\x1frelay-ish"]
MARKERS = [b"end 1", b"done 1 ok", b"end 2"]


def split(stream, cuts):
    edges = [0, *cuts, len(stream)]
    return [stream[start:end] for start, end in zip(edges, edges[1:], strict=False)]


def run(pieces):
    lines, markers = [], []
    marked = MarkedLines(Lines(lines.append))
    for piece in pieces:
        markers += marked.feed(piece)
    marked.lines.close()
    return lines, markers


def test_whole_stream():
    assert run([STREAM]) == (LINES, MARKERS)


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_every_single_cut_gives_the_same_lines_and_markers(cut):
    assert run(split(STREAM, [cut])) == (LINES, MARKERS)


def test_byte_by_byte():
    assert run([bytes([byte]) for byte in STREAM]) == (LINES, MARKERS)


def test_output_that_ends_like_the_start_of_a_marker_is_kept_until_it_is_not_one():
    lines, markers = run([b"tail \x1e", b"\x1fX\n"])
    assert (lines, markers) == (["tail \x1e\x1fX"], [])


def test_a_marker_line_without_its_end_breaks_the_protocol():
    marked = MarkedLines(Lines(lambda text: None))
    marked.feed(MARKER + b"x" * (MARKER_LINE_LIMIT // 2))
    with pytest.raises(ProtocolBreak, match="a marker line without its end"):
        marked.feed(b"x" * MARKER_LINE_LIMIT)
