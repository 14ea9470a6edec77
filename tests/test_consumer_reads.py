"""Round trips to a real redis-server: a batch that matched nothing is
acknowledged in the round trip of the next XREADGROUP, never lost and never
held past the loop's end; a matched entry's last completed marker goes in
the round trip of its acknowledgment, an earlier one before the next runs.

Round trips are counted with a client that counts what it sends: one
``execute_command`` is one round trip, one pipeline ``execute`` is one too.
"""

import pytest

from relay.stream import markers
from relay.stream.keys import dlq_stream
from tests.support.engine import AUDIT, GROUP, ORDERS, STREAM, Engine, fail_acknowledgments

UNMATCHED = {"kind": "nothing-wants-this"}


class RoundTrips:
    """Counts the round trips a redis-py client makes, by command name."""

    def __init__(self, client, monkeypatch):
        self.sent = []
        execute_command, pipeline = client.execute_command, client.pipeline

        def counted_command(*args, **options):
            self.sent.append((args[0],))
            return execute_command(*args, **options)

        def counted_pipeline(*args, **options):
            pipe = pipeline(*args, **options)
            execute = pipe.execute

            def counted_execute(*execute_args, **execute_options):
                self.sent.append(tuple(command[0][0] for command in pipe.command_stack))
                return execute(*execute_args, **execute_options)

            pipe.execute = counted_execute
            return pipe

        monkeypatch.setattr(client, "execute_command", counted_command)
        monkeypatch.setattr(client, "pipeline", counted_pipeline)

    def relay(self):
        """The round trips but the test's own look at the pending count."""
        return [sent for sent in self.sent if sent != ("XPENDING",)]


@pytest.fixture
def engine(redis_client):
    return Engine(redis_client, [ORDERS], buffered=4)


def processed(engine):
    return engine.metrics.events_processed._value.get()


def test_a_batch_that_matched_nothing_is_acknowledged_with_the_next_read(engine, monkeypatch):
    for _ in range(6):
        engine.publish(UNMATCHED)
    trips = RoundTrips(engine.client, monkeypatch)
    engine.consumer.read_once()
    assert engine.pending() == 4 and processed(engine) == 0 and engine.consumer.buffer.used == 4
    engine.consumer.read_once()      # acks the first four, reads the last two
    assert engine.pending() == 2 and processed(engine) == 4 and engine.consumer.buffer.used == 2
    engine.consumer.read_once()      # acks those, finds nothing
    assert engine.pending() == 0 and processed(engine) == 6 and engine.consumer.buffer.used == 0
    assert trips.relay() == [("XREADGROUP",), ("XACK", "XREADGROUP"), ("XACK", "XREADGROUP")]


def test_the_read_that_carries_acknowledgments_does_not_block(engine):
    """Its answer, and so the settled count, comes back at once on an idle stream."""
    engine.consumer.block_ms = 600_000
    engine.publish(UNMATCHED)
    engine.consumer.read_once()
    engine.consumer.read_once()      # would block for ten minutes if it were a blocking read
    assert engine.pending() == 0 and processed(engine) == 1


def test_a_full_buffer_still_reads_to_carry_its_acknowledgments(engine):
    for _ in range(9):
        engine.publish(UNMATCHED)
    engine.consumer.read_once()
    assert engine.consumer.buffer.free() == 0
    engine.consumer.read_once()      # the four waiting for their ack make room for four more
    engine.consumer.read_once()
    engine.consumer.read_once()
    assert engine.pending() == 0 and processed(engine) == 9 and engine.consumer.buffer.used == 0


def test_matched_and_malformed_entries_are_settled_as_before_between_reads(engine):
    engine.publish(UNMATCHED)
    engine.publish({"kind": "order"})
    engine.publish("{broken")
    engine.consumer.read_once()
    engine.consumer.drain(10)
    assert engine.pending() == 1                   # only the unmatched one, until the next read
    assert [entry["reason"] for entry in engine.dlq()] == [
        "the 'event' field is not valid JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)"]
    assert len(engine.executor.calls) == 2
    engine.consumer.read_once()
    assert engine.pending() == 0 and engine.consumer.buffer.used == 0


def test_the_loop_acknowledges_what_it_holds_when_it_stops(engine, monkeypatch):
    engine.publish(UNMATCHED)
    engine.publish(UNMATCHED)
    read_once = engine.consumer.read_once

    def read_then_stop(*args, **kwargs):
        read_once(*args, **kwargs)
        engine.consumer.stop()

    monkeypatch.setattr(engine.consumer, "read_once", read_then_stop)
    engine.consumer.read_loop()
    assert engine.pending() == 0 and processed(engine) == 2 and engine.consumer.buffer.used == 0


def test_a_failed_read_releases_the_entries_it_carried_and_they_stay_pending(engine):
    """The group vanished (Redis was reset): the read fails, its acks have nothing to
    acknowledge, and the buffer does not keep them."""
    engine.publish(UNMATCHED)
    engine.consumer.read_once()
    engine.client.xgroup_destroy(STREAM, GROUP)
    with pytest.raises(Exception, match="NOGROUP"):
        engine.consumer.read_once()
    assert engine.consumer.buffer.used == 0 and processed(engine) == 1
    assert engine.client.xlen(dlq_stream(STREAM)) == 0


# --- matched entries ---------------------------------------------------------------


def scripts_loaded(engine):
    """Run one entry first, so the claim script is in Redis's cache and EVALSHA never falls back."""
    engine.publish({"kind": "refund"})
    engine.read()
    engine.executor.calls.clear()


def test_one_target_completes_and_is_acknowledged_in_three_round_trips(redis_client, monkeypatch):
    engine = Engine(redis_client, [AUDIT])
    scripts_loaded(engine)
    trips = RoundTrips(engine.client, monkeypatch)
    message_id = engine.publish({"kind": "refund"})
    engine.read()
    # The run's record in the ledger (XADD) rides on the acknowledgment's round trip.
    assert trips.relay()[2:] == [("HGETALL",), ("EVALSHA",), ("HSET", "EXPIRE", "XADD", "XACK", "DEL")]
    assert engine.pending() == 0 and engine.state(message_id) == {} and len(engine.executor.calls) == 1


def test_an_earlier_target_is_recorded_complete_before_the_next_one_runs(redis_client, monkeypatch):
    engine = Engine(redis_client, [ORDERS])
    scripts_loaded(engine)
    trips = RoundTrips(engine.client, monkeypatch)
    engine.publish({"kind": "order"})
    engine.read()
    # Both runs' records ride on the acknowledgment, with the ledger's trim by age (its first write here).
    assert trips.relay()[2:] == [("HGETALL",), ("EVALSHA",), ("HSET", "EXPIRE"), ("EVALSHA",),
                                 ("HSET", "EXPIRE", "XADD", "XADD", "XTRIM", "XACK", "DEL")]
    assert engine.pending() == 0


def test_a_completed_marker_is_written_on_its_own_when_the_entry_stays_pending(redis_client, monkeypatch):
    """first.handler completes; second.handler is running on another worker: no ack to ride on."""
    engine = Engine(redis_client, [ORDERS])
    message_id = engine.publish({"kind": "order"})
    elsewhere = markers.running(engine.clock.now + 60 * 10**9, 1)
    engine.client.hset(markers.state_key(STREAM, GROUP, message_id), "orders/second.handler", elsewhere)
    engine.read()
    assert engine.state(message_id) == {"orders/first.handler": markers.OK, "orders/second.handler": elsewhere}
    assert engine.handlers_called() == [("orders", "first.handler")] and engine.pending() == 1


def test_a_failed_acknowledgment_leaves_the_entry_and_its_completed_target_to_the_next_delivery(
        redis_client, monkeypatch):
    """Redis fails the one round trip: the entry stays pending and the marker says running, as
    when the marker's own write failed before; the next delivery finds the claim past its deadline."""
    engine = Engine(redis_client, [AUDIT])
    scripts_loaded(engine)
    message_id = engine.publish({"kind": "refund"})
    fail_acknowledgments(monkeypatch, engine.client)
    engine.read()
    assert engine.pending() == 1 and engine.state(message_id)["audit/audit.handler"].startswith("running:")
