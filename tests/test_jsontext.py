"""relay.jsontext.loads answers exactly as json.loads does, with orjson installed and without.

Every test runs twice, through the ``decoder`` fixture: once with orjson (it
is pinned in requirements.txt, so a missing one fails here) and once with it
hidden, as on an interpreter relay.pyz carries no orjson wheel for. The
inputs are the ones where the two readers part: NaN and infinities, integers
beyond 64 bits, lone surrogates, deep nesting, and malformed text of every
kind, whose exception and message must be json's own.
"""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay import jsontext
from relay.functions.rules import Rules
from relay.stream.plans import TOO_DEEP, plan_entry
from tests.support.decoders import DECODERS, use_decoder

AGREED = [
    '{"a": 1, "a": 2}', '{"a": 1, "b": 2, "a": 3}', '{"a": -0}', '{"a": -0.0}', '{"a": 1.0}', '{"a": 1E5}',
    '{"a": 1e-400}', '{"a": 4.9e-324}', '{"a": 2.2250738585072011e-308}', '{"a": 0.1e1}', ' {"a": 1} \n',
    '{"a": "\\u0000"}', '{"a": "\\ud83d\\ude00"}', '{"a": 18446744073709551615}', '{"a": -9223372036854775808}',
    '{"a": 9223372036854775807}', '[]', '"x"', '1', 'null', 'true', '{"a": [[], {}], "b": {"c": [1, "d"]}}',
]
PARTED = [
    '{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', '{"a": 1e400}', '{"a": -1e400}',
    '{"a": 1.7976931348623157e309}', '{"a": %s}' % ("9" * 30), '{"a": 18446744073709551616}',
    '{"a": -9223372036854775809}', "%s" % ("9" * 40), '[1, 99999999999999999999]', '{"a": 1e19}',
    '{"a": "\\ud800"}', '{"a": "\\udc00\\ud800"}', '{"\\ud800": 1}',
]
MALFORMED = [
    '\ufeff{"a": 1}', '{"a": "\x01"}', '{"a": 01}', '{"a": .5}', '{"a": 1.}', '{"a": 1}\x00', '{"a": 1}\u00a0',
    '{"a": "\\x"}', '{"a": true,}', '{"a": [1, 2,]}', '{"a":\x0c1}', "", " ", "{", "{not json", '{"a" 1}',
    "nan", "[" * 2000 + "]" * 1999,
]


@pytest.fixture(params=DECODERS)
def decoder(request, monkeypatch):
    return use_decoder(request.param, monkeypatch)


def outcome(decode, text):
    """What decoding *text* gives: ('value', a repr that tells int from float and keeps NaN) or the error."""
    try:
        return "value", _exact(decode(text))
    except RecursionError:
        return "error", RecursionError
    except ValueError as error:
        return "error", type(error), str(error)


def _exact(value):
    if isinstance(value, dict):
        return ("dict", [(key, _exact(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [_exact(item) for item in value])
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else value.hex())
    return (type(value).__name__, value)


@pytest.mark.parametrize("text", AGREED + PARTED + MALFORMED)
def test_the_answer_is_json_loads_answer(decoder, text):
    assert outcome(jsontext.loads, text) == outcome(json.loads, text)


def test_malformed_text_raises_json_own_error_and_message(decoder):
    with pytest.raises(json.JSONDecodeError) as raised:
        jsontext.loads("{not json")
    assert type(raised.value) is json.JSONDecodeError
    assert str(raised.value) == "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"


@pytest.mark.parametrize("depth", [jsontext.SAFE_DEPTH - 1, jsontext.SAFE_DEPTH, jsontext.SAFE_DEPTH + 1, 900,
                                   1020, 1024, 1025, 5000])
def test_nesting_is_read_as_json_reads_it_at_every_depth(decoder, depth):
    for text in ("[" * depth + "]" * depth, '{"a": ' * depth + "1" + "}" * depth):
        assert outcome(jsontext.loads, text) == outcome(json.loads, text)


def test_an_ordinary_event_is_read_by_orjson_when_it_is_there(monkeypatch):
    """The fast path is really taken: with json.loads broken, orjson alone reads an ordinary event."""
    use_decoder("orjson", monkeypatch)

    def broken(text):
        raise AssertionError("json.loads was asked")

    monkeypatch.setattr(json, "loads", broken)
    event = {"event_id": "e", "n": 42, "x": 1.5, "big": 2**63 + 1, "deep": [[[{"k": None}]]], "s": "\u00e9\U0001f600"}
    assert jsontext.loads(json.dumps(event)) == event
    assert jsontext.decoder_name() == f"orjson {jsontext.orjson.__version__}"


def test_without_orjson_the_decoder_says_so(monkeypatch):
    monkeypatch.setattr(jsontext, "orjson", None)
    assert jsontext.decoder_name() == "json (standard library)"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**80, max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.booleans())
def test_any_json_text_is_read_the_same(value, ensure_ascii):
    text = json.dumps(value, ensure_ascii=ensure_ascii)
    assert outcome(jsontext.loads, text) == outcome(json.loads, text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='{}[]",:.-+eE0123456789 \\tnulrfasNIy\u00e9\ud800', max_size=40))
def test_any_text_at_all_is_read_the_same(text):
    assert outcome(jsontext.loads, text) == outcome(json.loads, text)


# --- through plan_entry: the verdict and the reason do not depend on the decoder ---


@pytest.mark.parametrize(("raw", "problem"), [
    (b"{not json", "the 'event' field is not valid JSON: Expecting property name enclosed in double quotes: "
                   "line 1 column 2 (char 1)"),
    (b'\xef\xbb\xbf{"a": 1}', "the 'event' field is not valid JSON: Unexpected UTF-8 BOM (decode using utf-8-sig): "
                              "line 1 column 1 (char 0)"),
    (b"[1, 2]", "the event is a JSON list, not an object"),
    (b"99999999999999999999", "the event is a JSON int, not an object"),
    (b"NaN", "the event is a JSON float, not an object"),
    (b"[" * 1000 + b"]" * 1000, TOO_DEEP),
    (b'{"a": 1} x', "the 'event' field is not valid JSON: Extra data: line 1 column 10 (char 9)"),
])
def test_a_malformed_entry_has_the_same_problem_with_either_decoder(decoder, raw, problem):
    assert plan_entry("1-0", {b"event": raw}, Rules(())).problem == problem


@pytest.mark.parametrize("raw", [b'{"n": NaN}', b'{"n": 1e999}', b'{"n": 18446744073709551616}',
                                 b'{"n": "\\ud800"}', b'{"n": 1}'])
def test_values_orjson_refuses_or_rounds_are_read_as_json_reads_them(decoder, raw):
    plan = plan_entry("1-0", {b"event": raw}, Rules(()))
    assert plan.problem is None and outcome(lambda _text: plan.event, "") == outcome(json.loads, raw.decode())
