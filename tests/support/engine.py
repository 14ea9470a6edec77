"""The stream engine on a real redis-server with a scripted executor: the harness of the dispatch tests.

``Engine`` builds the engine through relay.wiring.build_engine, as the
supervisor does, around a ScriptedExecutor (programmed outcomes, no Docker)
and a clock that moves only when a test says so, so every state path (ack,
no match, abort on first failure, backoff markers, exhaustion, DLQ,
malformed input, busy slots, fleet-wide limits) runs in milliseconds. The
dispatch tests and the stream tests beside them share it, with two example
functions (ORDERS, two rules; AUDIT, one).
"""

import json
from contextlib import contextmanager
from dataclasses import dataclass

from relay.durations import SECOND
from relay.functions import ActiveFunction, parse_template
from relay.functions.function import Function
from relay.live.catalog import Catalog
from relay.metrics.prometheus import Metrics
from relay.runs.ledger import RunLedger
from relay.runs.record import decode
from relay.stream import markers
from relay.stream.group import ensure_group
from relay.stream.keys import StreamAddress, dlq_stream, runs_stream
from relay.wiring import build_engine

STREAM, GROUP, CONSUMER = "events", "relay", "worker-1"
ADDRESS = StreamAddress(STREAM, GROUP, CONSUMER)
T0 = 1_800_000_000 * SECOND


@dataclass(frozen=True)
class Result:
    """An executor's answer, with the fields of relay.runtime.invocation.Outcome the engine reads."""

    ok: bool
    exit_code: int | None = 0
    duration: float = 0.01
    timed_out: bool = False
    error: str | None = None
    engine_unavailable: bool = False
    stdout_tail: str = ""
    stderr_tail: str = ""
    container_id: str | None = None
    warm: bool = False

    @property
    def killed(self):
        return not self.ok and not self.timed_out and self.exit_code == 137


class ScriptedExecutor:
    """Returns the next programmed outcome for a handler (success when none is left)."""

    def __init__(self):
        self.calls = []
        self.script = {}

    def program(self, handler, *outcomes):
        self.script.setdefault(handler, []).extend(outcomes)

    def run(self, invocation):
        self.calls.append(invocation)
        queue = self.script.get(invocation.handler)
        return queue.pop(0) if queue else Result(ok=True)


class NoPins:
    @contextmanager
    def holding(self, image):
        yield


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now


def function(name, template_text):
    template = parse_template(template_text, f"{name}/template.yaml")
    return ActiveFunction(Function(name=name, directory=None, template=template, fingerprint="0" * 64),
                          image=f"relay-fn-{name}:0000000000000000")


ORDERS = function("orders", """
runtime: python3.14
events:
  - handler: first.handler
    pattern: {kind: [order]}
    retries: 2
  - handler: second.handler
    pattern: {kind: [order]}
    retries: 0
""")
AUDIT = function("audit", """
runtime: node24
events:
  - handler: audit.handler
    pattern: {kind: [order, refund]}
""")


class Engine:
    """The engine on a clock that moves only when a test says so (``redeliver``).

    Its reclaim interval is 0, so the consumer never holds an entry for a
    retry (the frozen clock would never make it due): redelivery is by hand.
    """

    def __init__(self, client, functions, max_concurrency=8, buffered=16, env=None, observers=(), clock=None,
                 reclaim_interval=0.0, address=ADDRESS, limits=None, slot_wait=0.05, ledger=True, journal=None,
                 **ledger_options):
        self.client = client
        self.clock = clock or Clock()
        self.executor = ScriptedExecutor()
        self.metrics = Metrics()
        self.catalog = Catalog(functions)
        ensure_group(client, STREAM, GROUP)
        # The ledger keeps Redis's time (its records' ids), not the engine's clock.
        self.ledger = RunLedger(client, address.stream, host="test-host", pid=4242,
                                unrecorded=self.metrics.runs_unrecorded.inc, **ledger_options) if ledger else None
        wired = build_engine(client, address, catalog=self.catalog, executor=self.executor,
                             environment=env or (lambda fn: dict(fn.template.env)), pins=NoPins(),
                             metrics=self.metrics, observers=observers, max_concurrency=max_concurrency,
                             max_buffered_events=buffered,
                             clock=self.clock, slot_wait=slot_wait, block_ms=10, min_idle=0,
                             reclaim_interval=reclaim_interval, limits=limits, ledger=self.ledger, journal=journal)
        self.settler, self.store, self.slots, self.limits = wired.settler, wired.store, wired.slots, wired.limits
        self.dispatcher, self.consumer, self.write_behind = wired.dispatcher, wired.consumer, wired.write_behind

    def publish(self, event):
        payload = event if isinstance(event, (str, bytes)) else json.dumps(event)
        return self.client.xadd(STREAM, {"event": payload}).decode()

    def read(self):
        """One consumer read, then wait for its dispatches."""
        response = self.client.xreadgroup(GROUP, CONSUMER, {STREAM: ">"}, count=self.consumer.buffer.free(), block=10)
        for _stream, entries in response or ():
            self.consumer.accept(entries)
        self.consumer.drain(10)

    def redeliver(self, after):
        """Let *after* nanoseconds pass, then reclaim everything pending (idle time 0)."""
        self.clock.now += after
        self.consumer.reclaim_once()
        self.consumer.drain(10)

    def pending(self):
        return self.client.xpending(STREAM, GROUP)["pending"]

    def state(self, message_id):
        stored = self.client.hgetall(markers.state_key(STREAM, GROUP, message_id))
        return {key.decode(): value.decode() for key, value in stored.items()}

    def dlq(self):
        """The dead-letter entries as text; bytes that are not UTF-8 come back as surrogates."""
        return [{key.decode(): value.decode("utf-8", "surrogateescape") for key, value in fields.items()}
                for _id, fields in self.client.xrange(dlq_stream(STREAM))]

    def runs(self):
        """The run ledger's records, oldest first (relay.runs.record.Run)."""
        return [decode(run_id, fields) for run_id, fields in self.client.xrange(runs_stream(STREAM))]

    def handlers_called(self):
        return [(call.function, call.handler) for call in self.executor.calls]


def value(metric, *labels):
    """A Prometheus counter's or gauge's value, of the series with *labels* when given."""
    return (metric.labels(*labels) if labels else metric)._value.get()


def fail_acknowledgments(monkeypatch, client):
    """Every pipeline of *client* that carries an XACK fails as if Redis went away before it was sent."""
    import redis

    pipeline = client.pipeline

    def failing_pipeline(*args, **kwargs):
        pipe = pipeline(*args, **kwargs)

        def execute(*_args, **_kwargs):
            if any(command[0][0] == "XACK" for command in pipe.command_stack):
                pipe.reset()
                raise redis.ConnectionError("Redis went away")
            return type(pipe).execute(pipe, *_args, **_kwargs)

        pipe.execute = execute
        return pipe

    monkeypatch.setattr(client, "pipeline", failing_pipeline)
