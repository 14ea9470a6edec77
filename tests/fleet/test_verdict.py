"""The fleet verdict's judgement of malformed entries, on dead letters the real consumer wrote."""

import pytest

from tests.fleet.functions import MALFORMED, MALFORMED_REASONS
from tests.fleet.verdict import judge
from tests.support.engine import STREAM, Engine


@pytest.fixture
def burst(redis_client):
    """One fleet burst, read by a real consumer with no functions: every entry is dead-lettered."""
    engine = Engine(redis_client, [], buffered=len(MALFORMED))
    ids = [redis_client.xadd(STREAM, fields).decode() for fields in MALFORMED]
    engine.read()
    return engine, ids


def test_every_malformed_kind_is_expected_in_the_dlq_with_its_reason(burst):
    engine, _ids = burst
    verdict = judge(client=engine.client, produced={}, output_paths=[], hostnames=["worker-1"])
    assert verdict.problems == []
    assert (verdict.malformed, verdict.dlq, verdict.dlq_expected) == (8, 8, 8)
    reasons = [fields[b"reason"].decode() for _id, fields in engine.client.xrange(f"relay:{STREAM}:dlq")]
    assert [reason for _fields, reason in MALFORMED_REASONS][5:] == [
        "the event nests deeper than 64 levels", "event is 2097178 bytes, over MAX_EVENT_BYTES (1048576)",
        "the 'event' field is not UTF-8 text"]
    assert reasons[5:7] == [reason for _fields, reason in MALFORMED_REASONS][5:7]


@pytest.mark.parametrize(("index", "field", "value", "problem"), [
    (5, "reason", "the 'event' field is not valid JSON: too deep", "DLQ reason"),
    (6, "truncated", "false", "DLQ truncated"),
    (6, "event", "x" * 4096, "DLQ event"),
    (7, "event", "", "DLQ event"),
])
def test_a_wrong_dead_letter_fails_the_verdict(burst, index, field, value, problem):
    engine, ids = burst
    dlq = f"relay:{STREAM}:dlq"
    for entry_id, fields in engine.client.xrange(dlq):
        if fields[b"original_id"].decode() == ids[index]:
            engine.client.xdel(dlq, entry_id)
            engine.client.xadd(dlq, {**fields, field.encode(): value.encode()})
    verdict = judge(client=engine.client, produced={}, output_paths=[], hostnames=["worker-1"])
    assert [text for text in verdict.problems if text.startswith(f"malformed entry {ids[index]}: {problem}")]


# --- the limited functions: measured from the handlers' own lines -------------------


def _output(tmp_path, lines):
    path = tmp_path / "worker.out"
    path.write_text("".join(f'relay: function "x" handler "handler.record" message "1-0": {line}\n'
                            for line in lines))
    return [path]


def test_the_rate_is_measured_per_window_and_its_bound_holds_outside_faults(tmp_path):
    from tests.fleet.verdict import Verdict, judge_limits, most_in_window

    assert most_in_window([0.0, 0.5, 0.99, 1.0, 1.5], 1.0) == 3
    steady = [f"FLEET-START fleet-rated {seq} {1000 + seq * 0.1001:.6f}" for seq in range(300)]   # 10/s
    verdict = Verdict()
    judge_limits(verdict, _output(tmp_path, steady), fault_windows=())
    assert verdict.problems == [] and verdict.rated_starts == 300 and verdict.rate_max == {1.0: 10, 10.0: 100}
    burst = steady + [f"FLEET-START fleet-rated {seq} {1015.0 + seq / 1000:.6f}" for seq in range(300, 330)]
    verdict = Verdict()
    judge_limits(verdict, _output(tmp_path, burst), fault_windows=())
    assert verdict.problems == ["fleet-rated started 130 times in 10s outside the faults; rate_limit 10/s allows 110"]
    verdict = Verdict()
    judge_limits(verdict, _output(tmp_path, burst), fault_windows=[(1014.0, 1016.0)])   # Redis was down: open
    assert verdict.problems == [] and verdict.rate_max[10.0] == 130


def test_one_account_running_twice_at_once_fails_outside_faults(tmp_path):
    from tests.fleet.verdict import Verdict, judge_limits

    spans = ["FLEET-SPAN fleet-keyed 1 acct-1 100.0 100.3", "FLEET-SPAN fleet-keyed 2 acct-1 100.3 100.6",
             "FLEET-SPAN fleet-keyed 3 acct-2 100.1 100.4"]
    verdict = Verdict()
    judge_limits(verdict, _output(tmp_path, spans), fault_windows=())
    assert verdict.problems == [] and (verdict.keyed_spans, verdict.key_concurrency) == (3, 1)
    overlapping = [*spans, "FLEET-SPAN fleet-keyed 4 acct-1 100.5 100.8"]
    verdict = Verdict()
    judge_limits(verdict, _output(tmp_path, overlapping), fault_windows=())
    assert verdict.key_concurrency == 2
    assert verdict.problems == ["fleet-keyed ran one account twice at once 1 times outside the faults"]
    verdict = Verdict()
    judge_limits(verdict, _output(tmp_path, overlapping), fault_windows=[(95.0, 99.5)])
    assert verdict.problems == [] and verdict.key_concurrency == 2


# --- under Sentinel: both data nodes agree at the end --------------------------------


@pytest.mark.integration
def test_the_replica_must_be_linked_and_hold_what_the_primary_holds(tmp_path):
    from tests.fleet.verdict import Verdict, judge_replicas
    from tests.support.sentinel import SentinelRedis

    redis = SentinelRedis(tmp_path).start()
    try:
        primary, replica = redis.client(), redis.client(redis.replica())
        for seq in range(5):
            primary.xadd("events", {"seq": seq})
        verdict = Verdict()
        judge_replicas(verdict, primary, replica, streams=("events",))
        assert verdict.problems == []

        replica.config_set("replica-read-only", "no")
        replica.xadd("events", {"seq": "only on the replica"})
        verdict = Verdict()
        judge_replicas(verdict, primary, replica, streams=("events",))
        assert verdict.problems == ["events: 5 entries on the primary, 6 on the replica"]

        replica.execute_command("REPLICAOF", "NO", "ONE")
        verdict = Verdict()
        judge_replicas(verdict, primary, replica, streams=("events",))
        assert verdict.problems == ["the replica is not a linked replica (role 'master', link None)"]
    finally:
        redis.stop()


# --- entries never delivered: from the ids, not Redis's lag -------------------------


def test_undelivered_goes_by_the_last_delivered_id_when_the_lag_is_wrong(redis_client):
    from tests.fleet.verdict import undelivered

    ids = [redis_client.xadd("events", {"seq": seq}) for seq in range(5)]
    redis_client.xgroup_create("events", "relay", id="0")
    assert undelivered(redis_client, "events", "relay") == 5
    redis_client.xreadgroup("relay", "worker-1", {"events": ">"})
    assert undelivered(redis_client, "events", "relay") == 0
    # what a promoted replica may hold (redis/redis#12898): all delivered, entries-read behind
    redis_client.execute_command("XGROUP", "SETID", "events", "relay", ids[-1], "ENTRIESREAD", 1)
    assert redis_client.xinfo_groups("events")[0]["lag"] == 4
    assert undelivered(redis_client, "events", "relay") == 0
    # and the other way: two entries not delivered, entries-read ahead
    redis_client.execute_command("XGROUP", "SETID", "events", "relay", ids[2], "ENTRIESREAD", 5)
    assert redis_client.xinfo_groups("events")[0]["lag"] == 0
    assert undelivered(redis_client, "events", "relay") == 2
    assert undelivered(redis_client, "events", "nobody") == -1


def test_every_marked_execution_has_at_most_one_run_record_and_lost_ones_are_counted(redis_client):
    from collections import Counter

    from relay.runs.record import Run, RunStatus
    from tests.fleet.verdict import Verdict, judge_ledger

    def record(entry, function, status):
        redis_client.xadd("relay:events:runs", Run(entry=entry, function=function, handler="handler.record",
                                                   status=status).fields())

    record("1-0", "fleet-py", RunStatus.SUCCEEDED)
    record("2-0", "fleet-poison", RunStatus.FAILED)
    record("2-0", "fleet-poison", RunStatus.FAILED)
    record("2-0", "fleet-hang", RunStatus.TIMED_OUT)       # cut off before it printed a mark
    record("3-0", "fleet-py", RunStatus.NOT_STARTED)       # no handler ran
    marks = {("1-0", "fleet-py"): Counter(ok=1), ("2-0", "fleet-poison"): Counter(fail=2),
             ("3-0", "fleet-py"): Counter(ok=1)}           # 3-0's run was on another worker, killed before its settle
    verdict = Verdict()
    judge_ledger(verdict, redis_client, "events", marks)
    assert (verdict.problems, verdict.runs_recorded, verdict.runs_unrecorded) == ([], 4, 1)
    record("1-0", "fleet-py", RunStatus.SUCCEEDED)         # a success on record twice, run once
    verdict = Verdict()
    judge_ledger(verdict, redis_client, "events", marks)
    assert verdict.problems == ["1-0: 2 successes of fleet-py on record, 1 ran"]


# --- duplicates: a share of the executions, each put down to the fault it met -------


def _marks(tmp_path, worker, lines):
    """A worker's output with mark lines: (message id, function, outcome, handler time)."""
    path = tmp_path / worker / "run1.out"
    path.parent.mkdir(exist_ok=True)
    path.write_text("".join(f'relay: function "{function}" handler "handler.record" message "{message}": '
                            f"FLEET-MARK {function} 1 {outcome} {at:.3f}\n"
                            for message, function, outcome, at in lines))
    return path


def test_each_mark_tells_its_entry_function_outcome_time_and_worker(tmp_path):
    from tests.fleet.duplicates import Execution
    from tests.fleet.verdict import parse_executions, parse_marks

    paths = [_marks(tmp_path, "fleet-a", [("1-0", "fleet-py", "ok", 1000.25)]),
             _marks(tmp_path, "fleet-b", [("1-0", "fleet-py", "ok", 1070.5), ("1-0", "fleet-flaky", "fail", 1071.0)])]
    old = tmp_path / "fleet-c.out"     # a mark as handlers printed it before they told the time
    old.write_text('relay: function "fleet-py" handler "handler.record" message "2-0": FLEET-MARK fleet-py 2 ok\n')
    assert parse_executions([*paths, old]) == [
        Execution("1-0", "fleet-py", "ok", 1000.25, "fleet-a"), Execution("1-0", "fleet-py", "ok", 1070.5, "fleet-b"),
        Execution("1-0", "fleet-flaky", "fail", 1071.0, "fleet-b"),
        Execution("2-0", "fleet-py", "ok", None, tmp_path.name)]
    assert parse_marks(parse_executions(paths)) == {("1-0", "fleet-py"): {"ok": 2}, ("1-0", "fleet-flaky"): {"fail": 1}}


def test_a_duplicate_is_put_down_to_the_latest_fault_whose_window_holds_its_first_execution():
    from tests.fleet.duplicates import NO_FAULT, Execution, account, by_fault, fault_of
    from tests.fleet.faults import FaultWindow

    windows = [FaultWindow("SIGKILL a worker", 1025.0, 1027.0, 25.0, host="fleet-b"),
               FaultWindow("Redis DEBUG SLEEP 8", 1050.0, 1058.0, 50.0),
               FaultWindow("Redis SIGKILL + restart (AOF)", 1105.0, 1108.0, 105.0)]

    def ran(at, worker="fleet-a"):
        return Execution("1-0", "fleet-py", "ok", at, worker)

    assert fault_of(ran(1026.0, "fleet-b"), windows) == "SIGKILL a worker fleet-b at 25s"
    assert fault_of(ran(1026.0, "fleet-a"), windows) == NO_FAULT       # the SIGKILL only cut fleet-b's runs
    assert fault_of(ran(1046.0), windows) == "Redis DEBUG SLEEP 8 at 50s"     # its settle met the sleep
    assert fault_of(ran(1060.0, "fleet-b"), windows) == "Redis DEBUG SLEEP 8 at 50s"   # later than the SIGKILL
    assert fault_of(ran(1099.0), windows) == "Redis DEBUG SLEEP 8 at 50s"     # within 70 s of its end
    assert fault_of(ran(1101.0), windows) == "Redis SIGKILL + restart (AOF) at 105s"   # 5 s before: its settle
    assert fault_of(ran(1178.0), windows) == "Redis SIGKILL + restart (AOF) at 105s"   # 70 s after its end
    assert fault_of(ran(1178.5), windows) == NO_FAULT
    assert fault_of(ran(None), windows) == NO_FAULT

    executions = [ran(1106.0, "fleet-c"), ran(1170.0, "fleet-a"), ran(1200.0, "fleet-b"),   # three successes
                  Execution("2-0", "fleet-py", "ok", 1026.5, "fleet-b"), Execution("2-0", "fleet-py", "ok", 1090.0),
                  Execution("3-0", "fleet-flaky", "fail", 1030.0, "fleet-a"),
                  Execution("3-0", "fleet-flaky", "ok", 1090.0, "fleet-a")]
    duplicates = account(executions, [("1-0", "fleet-py"), ("2-0", "fleet-py")], windows)
    assert [(duplicate.first.at, duplicate.again.at, duplicate.fault) for duplicate in duplicates] == [
        (1106.0, 1170.0, "Redis SIGKILL + restart (AOF) at 105s"),
        (1170.0, 1200.0, "Redis SIGKILL + restart (AOF) at 105s"),   # the pair's first ran in its window
        (1026.5, 1090.0, "SIGKILL a worker fleet-b at 25s")]
    assert duplicates[0].describe(origin=1000.0) == (
        "1-0 fleet-py: ran at 106.0s on fleet-c, again at 170.0s on fleet-a: Redis SIGKILL + restart (AOF) at 105s")
    assert by_fault(duplicates, windows) == (
        "SIGKILL a worker fleet-b at 25s: 1, Redis SIGKILL + restart (AOF) at 105s: 2, no fault: 0")
    assert by_fault([], windows) == "no fault: 0"


def test_duplicates_over_the_allowed_share_of_executions_fail_the_run():
    from tests.fleet.verdict import Verdict, judge_duplicates

    verdict = Verdict(executions=2000, duplicates=6)
    assert verdict.duplicate_share == 0.3
    judge_duplicates(verdict, 0.3)
    judge_duplicates(verdict, None)
    assert verdict.passed
    verdict.duplicates = 7
    judge_duplicates(verdict, None)
    assert verdict.passed
    judge_duplicates(verdict, 0.3)
    assert verdict.problems == ["7 duplicates, 0.35 % of 2000 executions: more than the 0.3 % allowed"]
    assert Verdict().duplicate_share == 0.0
