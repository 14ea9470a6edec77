"""The consumer group: created once at the start of the stream, recreated if lost."""

import logging

import redis

from relay.errors import DependencyError

log = logging.getLogger("relay.stream.group")


def ensure_group(client: redis.Redis, stream: str, group: str) -> None:
    """Create the consumer group at the stream's start; an existing group is fine.

    Position 0 (not "$") so that entries published before Relay's first start
    are delivered rather than skipped.
    """
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as error:
        if str(error).startswith("BUSYGROUP"):
            log.debug("Consumer group exists", extra={"stream": stream, "group": group})
            return
        raise DependencyError(f"cannot create consumer group {group!r} on stream {stream!r}: {error}") from None
    except redis.RedisError as error:
        raise DependencyError(f"cannot create consumer group {group!r} on stream {stream!r}: {error}") from None
    log.info("Created consumer group", extra={"stream": stream, "group": group})


def is_missing_group(error: BaseException) -> bool:
    return isinstance(error, redis.ResponseError) and str(error).startswith("NOGROUP")
