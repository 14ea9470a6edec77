"""The compiled speedups Relay uses where they are installed, and says so at start.

orjson decodes events (relay/jsontext.py) and hiredis parses Redis replies
(redis-py picks it up by itself). relay.pyz carries their wheels for every
interpreter and platform they publish one for (build_zipapp.OPTIONAL_PACKAGES);
where one is missing, Relay runs the same without it, only slower: events
through the standard library's json, replies through redis-py's own parser.
``log_in_use`` tells which, at DEBUG, when Relay connects to Redis.
"""

import logging

log = logging.getLogger("relay.speedups")


def in_use() -> dict[str, str]:
    """{"json_decoder": ..., "redis_parser": ...}: what this interpreter runs with."""
    from relay.jsontext import decoder_name

    return {"json_decoder": decoder_name(), "redis_parser": redis_parser()}


def redis_parser() -> str:
    import redis
    import redis.utils

    if redis.utils.HIREDIS_AVAILABLE:
        import hiredis

        return f"hiredis {hiredis.__version__}"
    return f"redis-py {redis.__version__} (pure Python)"


def log_in_use() -> None:
    log.debug("Decoders in use", extra=in_use())
