"""Administrative commands: each module has ``run(args)``, called by relay.cli through its table.

None of them imports gevent; each imports what it needs when it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    import redis

# docopt's parsed arguments, as each ``run`` gets them. A value's type depends on the usage text
# (str or None for an option with a value or a positional, bool for a flag or a command word,
# list[str] for a repeated one), which is why docopt itself gives them as Any.
Arguments: TypeAlias = Mapping[str, Any]


def connect_stream(environ: Mapping[str, str]) -> tuple[redis.Redis, str]:
    """A Redis client that answered a PING, and the stream, from REDIS_URI (REDIS_SENTINEL_PASSWORD) and
    REDIS_STREAM in *environ*: what ``relay dlq``, ``runs`` and ``replay`` work on. Raises ConfigError
    or DependencyError, each one line."""
    from relay.clients import connect_redis, ping_redis
    from relay.config import load_redis_settings, load_stream

    settings = load_redis_settings(environ)
    stream = load_stream(environ)
    client = connect_redis(settings)
    ping_redis(client, settings)
    return client, stream
