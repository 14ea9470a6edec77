"""MarkedLines: a warm container's stream with the request's own marker lines taken out (no I/O).

Only a marker carrying the current request's nonce ends it; anything else
that looks like a marker (event text a handler echoed, an old nonce, a line
too long to be one) is ordinary output, forwarded as written.
"""

import pytest

from relay.errors import ProtocolBreak
from relay.runtime.output import Lines
from relay.runtime.warm import MARKER, MARKER_LINE_LIMIT, MarkedLines

NONCE = b"5f0c6a1e9b3d47a2c8e1f0b6d2a94c17"
OLD_NONCE = b"0123456789abcdef0123456789abcdef"
DONE = b"done 1 " + NONCE + b" error"
DUE = (b"done 1 " + NONCE + b" ok", DONE)

STREAM = (b"first line\n"
          + b"echo " + MARKER + b"done 1 ok\n"                   # a forged marker inside a longer line
          + MARKER + b"done 1 " + OLD_NONCE + b" ok\n"           # a nonce that is not this request's
          + b"\x1e not a marker\n"
          + MARKER + b"done 1 ok " + b"x" * MARKER_LINE_LIMIT + b"\n"   # longer than any marker
          + b"tail " + MARKER + b"done 1 ok"                     # a forged one left without its newline,
          + MARKER + DONE + b"\n"                                # then the real one: it ends the line
          + b"after\n")
LINES = ["first line", "echo \x1e\x1frelay:done 1 ok", f"\x1e\x1frelay:done 1 {OLD_NONCE.decode()} ok",
         "\x1e not a marker", "\x1e\x1frelay:done 1 ok " + "x" * MARKER_LINE_LIMIT,
         "tail \x1e\x1frelay:done 1 ok", "after"]


def split(stream, cuts):
    edges = [0, *cuts, len(stream)]
    return [stream[start:end] for start, end in zip(edges, edges[1:], strict=False)]


def run(pieces, due=DUE, own=NONCE):
    lines, markers = [], []
    marked = MarkedLines(Lines(lines.append))
    marked.expect(due, own)
    for piece in pieces:
        markers += marked.feed(piece)
    marked.lines.close()
    return lines, markers


def test_whole_stream():
    assert run([STREAM]) == (LINES, [DONE])


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_every_single_cut_gives_the_same_lines_and_markers(cut):
    assert run(split(STREAM, [cut])) == (LINES, [DONE])


def test_byte_by_byte():
    assert run([bytes([byte]) for byte in STREAM]) == (LINES, [DONE])


def test_text_before_the_real_marker_is_a_line_of_its_own():
    assert run([b"partial ", MARKER + DONE + b"\nnext\n"]) == (["partial ", "next"], [DONE])


def test_a_marker_line_is_ordinary_output_when_nothing_is_due():
    stream = MARKER + DONE + b"\n" + MARKER + b"end 1 " + NONCE + b"\n"
    assert run([stream], due=(), own=None) == (
        [f"\x1e\x1frelay:{DONE.decode()}", f"\x1e\x1frelay:end 1 {NONCE.decode()}"], [])


def test_only_one_marker_ends_a_request():
    lines, markers = run([MARKER + DONE + b"\n" + MARKER + b"done 1 ok\n"], own=None)
    assert (lines, markers) == (["\x1e\x1frelay:done 1 ok"], [DONE])


def test_a_marker_with_the_nonce_that_is_not_due_breaks_the_protocol():
    marked = MarkedLines(Lines(lambda text: None))
    marked.expect(DUE, NONCE)
    with pytest.raises(ProtocolBreak, match="done 2 5f0c6a1e9b3d47a2c8e1f0b6d2a94c17 ok"):
        marked.feed(MARKER + b"done 2 " + NONCE + b" ok\n")


def test_a_ready_marker_of_another_version_breaks_the_protocol():
    marked = MarkedLines(Lines(lambda text: None))
    marked.expect((b"ready 3",), b"ready")
    with pytest.raises(ProtocolBreak, match="'ready 2' where 'ready 3' was due"):
        marked.feed(MARKER + b"ready 2\n")


def test_output_that_ends_like_the_start_of_a_marker_is_kept_until_it_is_not_one():
    lines, markers = run([b"tail \x1e", b"\x1fX\n"])
    assert (lines, markers) == (["tail \x1e\x1fX"], [])


def test_a_marker_line_without_its_end_is_ordinary_output_once_it_is_too_long_for_one():
    lines = []
    marked = MarkedLines(Lines(lines.append))
    marked.expect(DUE, NONCE)
    assert marked.feed(MARKER + b"x" * (MARKER_LINE_LIMIT // 2)) == []
    assert marked.feed(b"x" * MARKER_LINE_LIMIT) == []
    assert marked.feed(b"\n" + MARKER + DONE + b"\n") == [DONE]
    assert lines == ["\x1e\x1frelay:" + "x" * (MARKER_LINE_LIMIT // 2 + MARKER_LINE_LIMIT)]


def test_many_forged_markers_on_one_long_line_cost_linear_time():
    line = (MARKER + b"done 1 ok ") * 20000 + b"\n"          # 380 kB of would-be markers, no newline among them
    lines, markers = run([line[i:i + 65536] for i in range(0, len(line), 65536)] + [MARKER + DONE + b"\n"])
    assert markers == [DONE] and len(lines) == 1 and lines[0].endswith("[relay: line cut at 64 KiB]")
