"""The worker's Redis client caps each reply (relay.reply_cap), with hiredis's
parser and with redis-py's own, against a real redis-server: a reply past the
cap raises ReplyTooLarge having read little more than the cap, the
connection is dropped, and the next command works on a new one."""

import re

import pytest
import redis

from relay.errors import ReplyTooLarge
from relay.reply_cap import cap_replies

CAP = 256 * 1024


@pytest.fixture(params=["hiredis", "python"])
def capped(request, redis_server, redis_client):
    client = cap_replies(redis.Redis(host="127.0.0.1", port=redis_server.port, password=redis_server.password),
                         CAP, hiredis=request.param == "hiredis")
    yield client
    client.close()


def test_a_reply_within_the_cap_is_read_whole(capped):
    capped.set("fits", b"x" * (CAP - 100))
    assert capped.get("fits") == b"x" * (CAP - 100)


def test_a_reply_past_the_cap_is_dropped_and_the_client_goes_on(capped, redis_client):
    redis_client.set("huge", b"x" * (16 * 1024 * 1024))
    with pytest.raises(ReplyTooLarge, match=f"passed {CAP} bytes") as raised:
        capped.get("huge")
    received = int(re.search(r"\((\d+) received\)", str(raised.value)).group(1))
    assert received <= CAP + 65536         # one socket read past the cap, not the 16 MiB
    assert capped.ping() is True
    assert redis_client.info("stats")["total_connections_received"] >= 2


def test_the_cap_counts_each_reply_of_a_pipeline_on_its_own(capped):
    capped.set("a", b"a" * (CAP // 2))
    pipe = capped.pipeline(transaction=False)
    for _ in range(8):
        pipe.get("a")
    assert pipe.execute() == [b"a" * (CAP // 2)] * 8      # 4 caps in all, none in one reply


def test_a_stream_read_past_the_cap_raises(capped, redis_client):
    redis_client.xgroup_create("s", "g", id="0", mkstream=True)
    for _ in range(4):
        redis_client.xadd("s", {"event": b"e" * (CAP // 2)})
    with pytest.raises(ReplyTooLarge):
        capped.xreadgroup("g", "c", {"s": ">"}, count=4)
    assert redis_client.xpending("s", "g")["pending"] == 4    # delivered all the same: Relay claims them again
