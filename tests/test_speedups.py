"""Which JSON decoder and which Redis reply parser Relay runs with, and the DEBUG line that says so."""

import importlib
import logging

import pytest
import redis.utils

from relay import jsontext, speedups
from relay.clients import connect_redis
from relay.config import RedisSettings


def pinned(name):
    """A speedup requirements.txt pins: a missing one fails the test, with what to do."""
    try:
        return importlib.import_module(name)
    except ImportError:
        pytest.fail(f"{name} is not installed: requirements.txt pins it; run scripts/setup", pytrace=False)


def test_with_the_speedups_installed_both_are_named_with_their_versions():
    orjson, hiredis = pinned("orjson"), pinned("hiredis")
    assert speedups.in_use() == {"json_decoder": f"orjson {orjson.__version__}",
                                 "redis_parser": f"hiredis {hiredis.__version__}"}


def test_without_them_the_pure_python_paths_are_named(monkeypatch):
    monkeypatch.setattr(jsontext, "orjson", None)
    monkeypatch.setattr(redis.utils, "HIREDIS_AVAILABLE", False)
    assert speedups.in_use() == {"json_decoder": "json (standard library)",
                                 "redis_parser": f"redis-py {redis.__version__} (pure Python)"}


def test_connecting_to_redis_says_which_at_debug(caplog):
    with caplog.at_level(logging.DEBUG, logger="relay.speedups"):
        connect_redis(RedisSettings(host="127.0.0.1", port=1)).close()
    (record,) = [record for record in caplog.records if record.name == "relay.speedups"]
    assert record.levelno == logging.DEBUG and record.getMessage() == "Decoders in use"
    assert (record.json_decoder, record.redis_parser) == (jsontext.decoder_name(), speedups.redis_parser())
