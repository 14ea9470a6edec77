"""Running a test with each JSON decoder relay.jsontext can have: orjson, and the standard library alone."""

import pytest

from relay import jsontext

DECODERS = ("orjson", "json")


def use_decoder(name, monkeypatch):
    """Make relay.jsontext try *name* first; "json" hides orjson, as a relay.pyz without its wheel would.
    orjson is pinned in requirements.txt, so a missing one fails the test."""
    if name == "orjson":
        if jsontext.orjson is None:
            pytest.fail("orjson is not installed: requirements.txt pins it; run scripts/setup", pytrace=False)
    else:
        monkeypatch.setattr(jsontext, "orjson", None)
    return name
