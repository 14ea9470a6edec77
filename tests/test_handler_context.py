"""The handler context on the real engine: the RELAY_* variables a Python and a Node handler
see, cold and warm, run by the executor alone and by the stream engine on a real redis-server
(a retry, the next invocation of a warm container, a redriven entry, a schedule occurrence)."""

import io
import json
import time
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from relay.durations import MINUTE, SECOND
from relay.functions import ActiveFunction, parse_template
from relay.functions.template import Warm
from relay.live.catalog import Catalog
from relay.metrics.prometheus import Metrics
from relay.runtime.executor import build_executor
from relay.runtime.invocation import Invocation
from relay.stream.deadletters import DeadLetters
from relay.stream.group import ensure_group
from relay.stream.keys import StreamAddress, dlq_stream, idempotency_key
from relay.stream.schedules import Occurrence, Publisher
from tests.support.runtime import built_fixtures, clean_hostname

FIXTURES = ("rt-warm-python", "rt-warm-node")
MODES = {"cold": None, "warm": Warm(containers=1)}
STREAM, GROUP = "events", "relay"
TIMEOUT = 20 * SECOND


@pytest.fixture(scope="module")
def images(docker_engine, tmp_path_factory):
    """The fixture functions under per-session names, built once: {fixture: (Function, tag)}."""
    with built_fixtures(docker_engine, tmp_path_factory.mktemp("functions"), FIXTURES) as built:
        yield built


@contextmanager
def executor_on(docker_engine):
    """An executor (cold and warm) whose handler output goes to a StringIO; its warm containers are removed after."""
    with clean_hostname(docker_engine, "rt-context") as hostname:
        output = io.StringIO()
        executor = build_executor(docker_engine, hostname, output, warm_capacity=2)
        try:
            yield executor, output
        finally:
            executor.warm.close()


def shown(output):
    """The context each invocation printed, in order: {message id: [variables, ...]}."""
    printed = {}
    for line in output.getvalue().splitlines():
        before, found, text = line.partition('": {')
        if found:
            message_id = before.split(' message "', 1)[1].split('"', 1)[0]
            printed.setdefault(message_id, []).append(json.loads("{" + text))
    return printed


def parse_deadline(text):
    assert len(text) == 24 and text.endswith("Z"), text       # 2026-12-06T10:00:06.250Z
    return datetime.fromisoformat(text).timestamp()


# --- the executor alone ---

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fixture", FIXTURES)
def test_each_variable_cold_and_warm_and_no_leftover_between_warm_invocations(docker_engine, images, fixture,
                                                                            mode):
    """The second invocation's event_id holds a NUL, which no environment variable can: it runs without
    RELAY_EVENT_ID (a cold container's start would fail; a warm one must not keep the first's)."""
    function, tag = images[fixture]
    base = Invocation(function=function.name, handler="warm.context", image=tag, payload=b'{"n":1}',
                      timeout=TIMEOUT, env=dict(function.template.env), runtime=function.template.runtime,
                      warm=MODES[mode])
    first = replace(base, message_id="1700000000000-0", event_id="evt 1", attempt=2, idempotency_key="ab" * 16)
    second = replace(base, message_id="1700000000001-0", event_id="evt\0nul", attempt=1, idempotency_key="cd" * 16)
    with executor_on(docker_engine) as (executor, output):
        before = time.time()
        assert executor.run(first).ok
        after = time.time()
        outcome = executor.run(second)       # warm: the same container's next invocation
        assert outcome.ok, outcome.error
    printed = shown(output)
    [seen] = printed["1700000000000-0"]
    deadline = parse_deadline(seen.pop("RELAY_DEADLINE"))
    assert before + TIMEOUT / 1e9 - 0.001 <= deadline <= after + TIMEOUT / 1e9
    assert seen == {"RELAY_FUNCTION": function.name, "RELAY_HANDLER": "warm.context",
                    "RELAY_MESSAGE_ID": "1700000000000-0", "RELAY_EVENT_ID": "evt 1", "RELAY_ATTEMPT": "2",
                    "RELAY_IDEMPOTENCY_KEY": "ab" * 16}
    [seen] = printed["1700000000001-0"]
    assert parse_deadline(seen.pop("RELAY_DEADLINE")) >= deadline
    assert seen == {"RELAY_FUNCTION": function.name, "RELAY_HANDLER": "warm.context",
                    "RELAY_MESSAGE_ID": "1700000000001-0", "RELAY_ATTEMPT": "1", "RELAY_IDEMPOTENCY_KEY": "cd" * 16}


# --- the stream engine ---

class NoPins:
    @contextmanager
    def holding(self, image):
        yield


class Clock:
    """The engine's clock (markers, backoff); containers run on real time."""

    def __init__(self):
        self.now = time.time_ns()

    def __call__(self):
        return self.now


def context_function(function, tag, warm):
    """The fixture's image under a template that routes events and a schedule to warm.context."""
    template = parse_template(f"""
runtime: {function.template.runtime}
{"warm: {containers: 1}" if warm else ""}
events:
  - handler: warm.context
    pattern: {{kind: [context]}}
    retries: 1
schedules:
  - handler: warm.context
    cron: "0 3 * * *"
""", f"{function.name}/template.yaml")
    return ActiveFunction(replace(function, template=template), image=tag)


@pytest.mark.parametrize(("fixture", "mode"), [("rt-warm-python", "warm"), ("rt-warm-node", "cold")])
def test_retries_redeliveries_redrives_and_schedules_through_the_stream_engine(docker_engine, redis_client,
                                                                              images, fixture, mode):
    from relay.wiring import build_engine

    active = context_function(*images[fixture], warm=mode == "warm")
    name = active.name
    clock, metrics = Clock(), Metrics()
    ensure_group(redis_client, STREAM, GROUP)
    with executor_on(docker_engine) as (executor, output):
        wired = build_engine(redis_client, StreamAddress(STREAM, GROUP, "worker-1"), catalog=Catalog([active]),
                             executor=executor, environment=lambda function: {}, pins=NoPins(),
                             metrics=metrics, max_concurrency=2, max_buffered_events=8, clock=clock,
                             slot_wait=0.05, block_ms=10, min_idle=0)
        consumer = wired.consumer

        def read():
            for _stream, entries in redis_client.xreadgroup(GROUP, "worker-1", {STREAM: ">"}, count=8,
                                                            block=10) or ():
                consumer.accept(entries)
            consumer.drain(60)

        def redeliver():
            clock.now += 2 * MINUTE
            consumer.reclaim_once()
            consumer.drain(60)

        def publish(event):
            return redis_client.xadd(STREAM, {"event": json.dumps({"kind": "context", **event})}).decode()

        retried = publish({"event_id": "evt_retry", "fail": "first"})
        read()
        redeliver()                                   # attempt 2 succeeds
        plain = publish({})                           # no event_id; warm: the same container as the retry
        read()
        doomed = publish({"fail": "always"})
        read()
        redeliver()                                   # attempt 2 of 2 fails: dead-lettered
        [(dlq_id, _fields)] = redis_client.xrange(dlq_stream(STREAM))
        [(_dlq_id, redriven)] = DeadLetters(redis_client, STREAM).redrive([dlq_id.decode()])
        read()
        occurrence = Occurrence(name, "warm.context", datetime(2026, 12, 6, 3, tzinfo=UTC))
        assert [Publisher(redis_client, STREAM, metrics).publish(occurrence) for _worker in range(2)] == [True, False]
        [scheduled] = [entry_id.decode() for entry_id, fields in redis_client.xrange(STREAM)
                       if fields.get(b"schedule") == occurrence.id.encode()]
        read()
    printed = shown(output)
    for seen in (seen for runs in printed.values() for seen in runs):
        assert seen.pop("RELAY_FUNCTION") == name and seen.pop("RELAY_HANDLER") == "warm.context"
        parse_deadline(seen.pop("RELAY_DEADLINE"))
    [target] = Catalog([active]).rules().matching({"kind": "context"})
    key = idempotency_key(STREAM, retried, target)
    retry = {"RELAY_MESSAGE_ID": retried, "RELAY_EVENT_ID": "evt_retry", "RELAY_IDEMPOTENCY_KEY": key}
    assert printed[retried] == [{**retry, "RELAY_ATTEMPT": "1"}, {**retry, "RELAY_ATTEMPT": "2"}]
    assert printed[plain] == [{"RELAY_MESSAGE_ID": plain, "RELAY_ATTEMPT": "1",
                               "RELAY_IDEMPOTENCY_KEY": idempotency_key(STREAM, plain, target)}]
    doomed_key = idempotency_key(STREAM, doomed, target)
    assert [seen["RELAY_IDEMPOTENCY_KEY"] for seen in printed[doomed]] == [doomed_key, doomed_key]
    assert printed[redriven] == [{"RELAY_MESSAGE_ID": redriven, "RELAY_ATTEMPT": "1",
                                  "RELAY_IDEMPOTENCY_KEY": idempotency_key(STREAM, redriven, target)}]
    assert printed[redriven][0]["RELAY_IDEMPOTENCY_KEY"] != doomed_key
    assert printed[scheduled] == [{"RELAY_MESSAGE_ID": scheduled, "RELAY_ATTEMPT": "1",
                                   "RELAY_IDEMPOTENCY_KEY": f"schedule:{name}:warm.context:2026-12-06T03:00:00Z"}]
    assert redis_client.xpending(STREAM, GROUP)["pending"] == 1     # the redriven entry, failing again
