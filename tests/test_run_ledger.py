"""The run ledger as the engine writes it: one record per attempt, the settlement on the last, bounded,
secret-safe, and never in delivery's way. A real redis-server, a scripted executor (tests/support/engine.py)."""

import json
import logging
from datetime import UTC, datetime

import pytest

from relay.durations import MINUTE
from relay.errors import SecretError
from relay.runs.ledger import RunLedger
from relay.runs.record import RunStatus, Settled, decode, status_of
from relay.runtime.invocation import Outcome
from relay.stream.keys import StreamAddress, idempotency_key, runs_stream
from relay.stream.schedules import Occurrence, Publisher
from tests.support.engine import AUDIT, ORDERS, STREAM, Engine, Result, fail_acknowledgments, function, value

pytestmark = pytest.mark.integration

RUNS = runs_stream(STREAM)


@pytest.fixture
def engine(redis_client):
    return Engine(redis_client, [ORDERS, AUDIT])


def test_a_success_is_one_record_that_says_the_entry_was_acknowledged(engine):
    engine.executor.program("audit.handler", Result(ok=True, duration=0.25, container_id="c0ffee", warm=True,
                                                    stdout_tail="booked\n"))
    message_id = engine.publish({"kind": "refund", "event_id": "evt_1"})
    engine.read()
    (run,) = engine.runs()
    target = engine.catalog.rules().matching({"kind": "refund"})[0]
    assert (run.kind, run.entry, run.event_id, run.function, run.handler, run.rule, run.attempt) == (
        "run", message_id, "evt_1", "audit", "audit.handler", "audit/audit.handler", 1)
    assert run.key == idempotency_key(STREAM, message_id, target)
    assert (run.host, run.pid, run.worker, run.mode, run.container) == ("test-host", 4242, "test-host/4242", "warm",
                                                                        "c0ffee")
    assert (run.status, run.exit_code, run.duration_ms, run.stdout) == (RunStatus.SUCCEEDED, 0, 250.0, "booked\n")
    assert run.started_ms == engine.clock.now // 1_000_000
    assert (run.settled, run.retry_at_ms, run.reason) == (Settled.ACKNOWLEDGED, None, "")


def test_a_failure_then_a_retry_each_have_a_record(redis_client):
    engine = Engine(redis_client, [ORDERS])
    engine.executor.program("first.handler", Result(ok=False, exit_code=3, error="exited with code 3",
                                                    stderr_tail="Traceback ...\nKeyError: 'sku'"))
    message_id = engine.publish({"kind": "order"})
    engine.read()
    (failed,) = engine.runs()
    assert (failed.handler, failed.attempt, failed.status, failed.exit_code) == (
        "first.handler", 1, RunStatus.FAILED, 3)
    assert failed.stderr.endswith("KeyError: 'sku'") and failed.error == "exited with code 3"
    assert failed.settled is Settled.RETRY_DUE and failed.retry_at_ms > int(failed.run_id.partition("-")[0])
    engine.redeliver(after=MINUTE)
    runs = engine.runs()[1:]
    assert [(run.handler, run.attempt, run.status, run.settled) for run in runs] == [
        ("first.handler", 2, RunStatus.SUCCEEDED, None),
        ("second.handler", 1, RunStatus.SUCCEEDED, Settled.ACKNOWLEDGED)]
    assert {run.entry for run in engine.runs()} == {message_id}


@pytest.mark.parametrize(("result", "status"), [
    (Result(ok=False, exit_code=None, timed_out=True, error="timed out after 30s"), RunStatus.TIMED_OUT),
    (Result(ok=False, exit_code=137, error="exited with code 137"), RunStatus.KILLED),
    (Result(ok=False, exit_code=1, error="exited with code 1"), RunStatus.FAILED),
])
def test_a_timeout_a_kill_and_a_failure_are_told_apart(engine, result, status):
    engine.executor.program("audit.handler", result)
    engine.publish({"kind": "refund"})
    engine.read()
    (run,) = engine.runs()
    assert run.status is status and run.exit_code == result.exit_code


def test_an_invocation_that_could_not_start_says_why(redis_client):
    def environment(fn):
        raise SecretError("secret 'api-key' is not in the secret store")

    engine = Engine(redis_client, [AUDIT], env=environment)
    engine.publish({"kind": "refund"})
    engine.read()
    (run,) = engine.runs()
    assert run.status is RunStatus.NOT_STARTED and "api-key" in run.error and run.mode == ""


def test_the_secret_values_an_invocation_was_given_are_masked_in_its_output(redis_client):
    payments = function("payments", """
runtime: python3.14
env:
  REGION: eu-west-1
secrets:
  API_TOKEN: payments-token
  PEM: payments-key
events:
  - handler: app.charge
    pattern: {kind: [charge]}
""")
    secrets = {"API_TOKEN": "tok_live_9f8e7d6c", "PEM": "-----BEGIN KEY-----\nAAAABBBBCCCC\n-----END KEY-----"}
    engine = Engine(redis_client, [payments], env=lambda fn: {**fn.template.env, **secrets})
    engine.executor.program("app.charge", Result(
        ok=False, exit_code=1, stdout_tail="calling eu-west-1 with tok_live_9f8e7d6c",
        stderr_tail="bad key -----BEGIN KEY-----\nAAAABBBBCCCC\n-----END KEY----- (tok_live_9f8e7d6c)"))
    engine.publish({"kind": "charge"})
    engine.read()
    (run,) = engine.runs()
    assert run.stdout == "calling eu-west-1 with ***"          # the template's env is not a secret
    assert run.stderr == "bad key ***\n***\n*** (***)"
    assert b"tok_live" not in b"".join(value for _id, fields in redis_client.xrange(RUNS) for value in fields.values())


def test_an_expired_rule_has_a_record_and_the_dead_letter_names_no_run(redis_client):
    welcome = function("welcome", """
runtime: python3.14
events:
  - handler: app.send
    pattern: {kind: [user]}
    max_event_age: 1h
""")
    engine = Engine(redis_client, [welcome])
    milliseconds = (engine.clock.now - 2 * 60 * MINUTE) // 1_000_000
    redis_client.xadd(STREAM, {"event": json.dumps({"kind": "user"})}, id=f"{milliseconds}-*")
    engine.read()
    (run,) = engine.runs()
    assert (run.status, run.attempt, run.settled) == (RunStatus.EXPIRED, 0, Settled.DEAD_LETTERED)
    assert run.reason.startswith("older than max_event_age (1h)")
    (entry,) = engine.dlq()
    assert "run_id" not in entry and "run_status" not in entry


def test_an_entry_settled_without_an_attempt_has_a_settlement_record(redis_client):
    nightly = function("nightly", """
runtime: python3.14
schedules:
  - handler: jobs.run
    cron: "0 3 * * *"
""")
    engine = Engine(redis_client, [nightly])
    occurrence = Occurrence("nightly", "jobs.run", datetime(2026, 12, 6, 3, tzinfo=UTC))
    forged = redis_client.xadd(STREAM, {"event": "{}", "schedule": occurrence.id}).decode()
    engine.read()
    assert engine.executor.calls == []
    (record,) = engine.runs()
    assert (record.kind, record.entry, record.function, record.settled) == (
        "settlement", forged, "nightly", Settled.DEAD_LETTERED)
    assert "not written by Relay's scheduler" in record.reason
    Publisher(redis_client, STREAM, engine.metrics).publish(occurrence)
    engine.read()
    assert [run.key for run in engine.runs()[1:]] == [occurrence.id]


def test_a_ledger_that_cannot_be_written_never_stops_delivery(redis_client, caplog):
    engine = Engine(redis_client, [ORDERS, AUDIT])
    redis_client.set(RUNS, "not a stream")            # every XADD to it is refused (WRONGTYPE)
    engine.executor.program("first.handler", Result(ok=False, exit_code=1))
    with caplog.at_level(logging.INFO, logger="relay.runs.ledger"):
        engine.publish({"kind": "refund"})              # acknowledged: the ledger's refusal does not stop it
        engine.publish({"kind": "order"})               # audit.handler runs, first.handler fails: left pending
        engine.read()
        assert engine.pending() == 1 and value(engine.metrics.events_processed) == 1
        assert value(engine.metrics.runs_unrecorded) == 3
        assert [record.message for record in caplog.records if record.name == "relay.runs.ledger"] == [
            "Cannot write to the run ledger; runs go unrecorded until it can"]
        redis_client.delete(RUNS)
        engine.redeliver(after=MINUTE)
    assert engine.pending() == 0 and value(engine.metrics.runs_unrecorded) == 3
    assert [record.message for record in caplog.records if record.name == "relay.runs.ledger"][1:] == [
        "The run ledger is written again"]
    assert [(run.handler, run.attempt) for run in engine.runs()] == [("first.handler", 2), ("second.handler", 1)]


def test_a_dead_letter_is_written_whole_when_the_ledger_is_refused(engine):
    engine.client.set(RUNS, "not a stream")
    engine.executor.program("second.handler", Result(ok=False, exit_code=7, stderr_tail="boom"))
    engine.publish({"kind": "order"})
    engine.read()
    (entry,) = engine.dlq()
    assert "run_id" not in entry and (entry["run_status"], entry["exit_code"], entry["stderr"]) == (
        "failed", "7", "boom")
    assert engine.pending() == 0


def test_the_ledger_keeps_about_runs_max_entries(redis_client):
    redis_client.config_set("stream-node-max-entries", 10)   # approximate trimming drops whole nodes
    try:
        engine = Engine(redis_client, [AUDIT], max_entries=20)
        for _ in range(60):
            engine.publish({"kind": "refund"})
            engine.read()
        assert 20 <= redis_client.xlen(RUNS) <= 30
    finally:
        redis_client.config_set("stream-node-max-entries", 100)


def test_the_ledger_forgets_records_older_than_runs_max_age(redis_client):
    redis_client.config_set("stream-node-max-entries", 1)
    try:
        now_ms = int(redis_client.time()[0]) * 1000
        old = [redis_client.xadd(RUNS, {"kind": "run"}, id=f"{now_ms - age}-0").decode()
               for age in (3 * 3600_000, 2 * 3600_000)]
        recent = redis_client.xadd(RUNS, {"kind": "run"}, id=f"{now_ms - 60_000}-0").decode()
        engine = Engine(redis_client, [AUDIT], max_age_ms=3600_000)
        engine.publish({"kind": "refund"})
        engine.read()
        ids = [run.run_id for run in engine.runs()]
        assert not set(old) & set(ids) and ids[0] == recent and len(ids) == 2
    finally:
        redis_client.config_set("stream-node-max-entries", 100)


def test_a_record_is_at_most_about_ten_kib(redis_client):
    ledger = RunLedger(redis_client, STREAM, host="h" * 64, pid=1)
    from relay.stream.seams import Attempt

    attempt = Attempt(message_id="1-0", event_id="e" * 200, function="f" * 64, handler="h" * 128,
                      rule="f/h", number=3, idempotency_key="k" * 32, started_at=0)
    huge = Outcome(ok=False, exit_code=1, duration=1.0, error="x" * 5000, stdout_tail="o" * 9000,
                   stderr_tail="é" * 9000)
    ledger.invocation_finished(attempt, huge)
    plan = type("Plan", (), {"message_id": "1-0", "targets": (), "event_id": None, "replay_of": None})()
    from relay.stream.verdict import OPEN

    ledger.write(plan, OPEN)
    ((run_id, fields),) = redis_client.xrange(RUNS)
    assert sum(len(name) + len(value) for name, value in fields.items()) < 10_500
    run = decode(run_id, fields)
    assert len(run.stdout.encode()) == 4096 and run.stdout == "o" * 4096 and run.stderr == "é" * 2048


def test_status_of_an_outcome():
    assert status_of(None) is RunStatus.FAILED
    assert status_of(Outcome(ok=True, exit_code=0, duration=0)) is RunStatus.SUCCEEDED
    assert status_of(Outcome.not_started("no secret")) is RunStatus.NOT_STARTED
    assert status_of(Outcome(ok=False, exit_code=137, duration=0, timed_out=True)) is RunStatus.TIMED_OUT


def test_records_of_two_streams_are_kept_apart(redis_client):
    other = Engine(redis_client, [AUDIT], address=StreamAddress("other", "relay", "w"))
    assert other.ledger.key == "relay:other:runs" != RUNS


def test_a_replayed_entry_s_runs_name_the_entry_it_copies(redis_client):
    engine = Engine(redis_client, [ORDERS, AUDIT])
    source = engine.publish({"kind": "order"})
    engine.read()
    copy = redis_client.xadd(STREAM, {"event": json.dumps({"kind": "order"}), "replay_of": source,
                                      "replay_for": "audit"}).decode()
    engine.read()
    replayed = [run for run in engine.runs() if run.entry == copy]
    assert [(run.function, run.replay_of) for run in replayed] == [("audit", source)]
    assert all(run.replay_of == "" for run in engine.runs() if run.entry == source)


def test_a_record_with_every_field_set_writes_exactly_the_fields_a_reader_knows():
    from relay.runs.record import FIELDS, Run

    full = Run(entry="1-0", event_id="e", function="f", handler="h", rule="f/h", attempt=1, key="k", host="w",
               pid=1, mode="cold", container="c", started_ms=1, duration_ms=1.0, status=RunStatus.FAILED,
               exit_code=1, error="x", stdout="o", stderr="e", settled=Settled.RETRY_DUE, retry_at_ms=5,
               reason="r", replay_of="1-1")
    assert set(full.fields()) == set(FIELDS)
    assert decode("2-0", {name.encode(): value.encode() for name, value in full.fields().items()}) == \
        Run(**{**{name: getattr(full, name) for name in Run.__slots__}, "run_id": "2-0", "status_text": "failed"})


def test_records_that_went_unsent_with_a_failed_acknowledgment_are_written_with_it_later(
        redis_client, monkeypatch):
    engine = Engine(redis_client, [AUDIT])
    fail_acknowledgments(monkeypatch, redis_client)      # the acknowledgment's round trip fails; later ones pass
    message_id = engine.publish({"kind": "refund"})
    engine.read()
    assert engine.pending() == 1 and engine.runs() == [] and engine.ledger._queued == {}
    assert len(engine.write_behind.owed[message_id].records) == 1
    assert engine.write_behind.flush()
    (run,) = engine.runs()
    assert (run.entry, run.status, run.settled) == (message_id, RunStatus.SUCCEEDED, Settled.ACKNOWLEDGED)
    assert engine.pending() == 0 and value(engine.metrics.runs_unrecorded) == 0


def test_records_the_write_behind_gives_up_are_counted(redis_client, monkeypatch):
    engine = Engine(redis_client, [AUDIT])
    fail_acknowledgments(monkeypatch, redis_client)
    engine.publish({"kind": "refund"})
    engine.read()
    monkeypatch.setattr(engine.write_behind, "flush", lambda: False)    # Redis never answers again
    engine.write_behind.grace = 0
    engine.write_behind.stop()
    engine.write_behind.loop()                                          # at stop: given up, and counted
    assert value(engine.metrics.runs_unrecorded) == 1 and value(engine.metrics.bookkeeping_lost) == 1


def test_a_record_that_cannot_be_built_never_stops_delivery(redis_client, caplog):
    class Bare:   # an outcome without the fields a record reads
        ok, exit_code, duration, timed_out, error, engine_unavailable = True, 0, 0.1, False, None, False

    engine = Engine(redis_client, [AUDIT])
    engine.executor.program("audit.handler", Bare())
    with caplog.at_level(logging.ERROR, logger="relay.runs.ledger"):
        engine.publish({"kind": "refund"})
        engine.read()
    assert engine.pending() == 0 and value(engine.metrics.events_processed) == 1
    assert engine.runs()[0].kind == "settlement" and value(engine.metrics.runs_unrecorded) == 1
    assert [record.message for record in caplog.records if record.name == "relay.runs.ledger"] == [
        "Cannot build a run record; the run goes unrecorded"]
