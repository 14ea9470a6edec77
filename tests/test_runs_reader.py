"""relay.runs.reader against a real redis-server: filters, order, limits, pages, an entry's records, follow,
and records written by anyone."""

import threading
import time
from dataclasses import replace

import pytest

from relay.errors import RunsError
from relay.runs import reader as reader_module
from relay.runs.reader import FIELD_BYTES, RunFilter, Runs
from relay.runs.record import SETTLEMENT, Run, RunStatus, Settled
from relay.stream.keys import runs_stream

LEDGER = runs_stream("events")


def write(client, run=None, id="*", **fields):
    """A record as the ledger writes it (Run.fields), or *fields* as anyone could; its run id."""
    values = run.fields() if run is not None else fields
    return client.xadd(LEDGER, values, id=id).decode()


def attempt(entry="1-0", function="orders", handler="app.handler", number=1, status=RunStatus.SUCCEEDED, **extra):
    return Run(entry=entry, event_id=extra.pop("event_id", "evt_1"), function=function, handler=handler,
               rule=f"{function}/{handler}", attempt=number, host="worker-a", pid=42, mode="cold",
               started_ms=extra.pop("started_ms", 1_700_000_000_000), duration_ms=12.5, status=status,
               stdout="out\n", stderr="err\n", **extra)


@pytest.fixture
def runs(redis_client):
    return Runs(redis_client, "events")


def ids(found):
    return [run.run_id for run in found]


def test_newest_first_with_a_limit_and_every_field_read_back(runs, redis_client):
    written = [write(redis_client, attempt(entry=f"{n}-0")) for n in range(5)]
    assert ids(runs.newest(limit=3)) == written[::-1][:3]
    assert ids(runs.newest(limit=50)) == written[::-1]
    [newest] = runs.newest(limit=1)
    assert newest == replace(attempt(entry="4-0"), run_id=written[-1], status_text="succeeded")
    assert runs.newest() == runs.newest(limit=20)


def test_an_empty_or_missing_ledger_has_no_runs(runs):
    assert runs.newest() == [] and runs.get("1-0") is None and runs.of_entry("1-0") == []


def test_each_filter_and_their_combination(runs, redis_client):
    orders_ok = write(redis_client, attempt(entry="1-0"))
    users_failed = write(redis_client, attempt(entry="2-0", function="users", status=RunStatus.FAILED,
                                               event_id="evt_2"))
    orders_timed_out = write(redis_client, attempt(entry="3-0", handler="app.other", status=RunStatus.TIMED_OUT,
                                                   settled=Settled.DEAD_LETTERED, reason="attempts exhausted"))
    settled = write(redis_client, Run(kind=SETTLEMENT, entry="4-0", function="users", handler="app.handler",
                                      settled=Settled.DEAD_LETTERED, reason="older than max_event_age"))
    killed = write(redis_client, attempt(entry="5-0", status=RunStatus.KILLED, exit_code=137))

    def found(**filters):
        return ids(runs.newest(RunFilter(**filters), limit=100))

    assert found(function="orders") == [killed, orders_timed_out, orders_ok]
    assert found(function="users") == [settled, users_failed]
    assert found(handler="app.other") == [orders_timed_out]
    assert found(function="orders", handler="app.handler") == [killed, orders_ok]
    assert found(outcomes=("failed",)) == [users_failed]
    assert found(outcomes=("dead-lettered",)) == [settled, orders_timed_out]
    assert found(outcomes=("timed out", "killed")) == [killed, orders_timed_out]
    assert found(function="users", outcomes=("dead-lettered",)) == [settled]
    assert found(event_id="evt_2") == [users_failed]
    assert found(entry="3-0") == [orders_timed_out]
    assert found(function="nobody") == []


def test_since_and_until_select_by_the_time_the_record_was_written(runs, redis_client):
    old = write(redis_client, attempt(entry="1-0"), id="1000000-0")
    middle = write(redis_client, attempt(entry="2-0"), id="2000000-0")
    middle_too = write(redis_client, attempt(entry="2-0"), id="2000000-7")
    new = write(redis_client, attempt(entry="3-0"), id="3000000-0")
    assert ids(runs.newest(RunFilter(since_ms=2_000_000))) == [new, middle_too, middle]
    assert ids(runs.newest(RunFilter(until_ms=2_000_000))) == [middle_too, middle, old]
    assert ids(runs.newest(RunFilter(since_ms=1_500_000, until_ms=2_500_000))) == [middle_too, middle]
    assert ids(runs.newest(RunFilter(since_ms=3_000_001))) == []
    assert ids(runs.newest(RunFilter(since_ms=-5, until_ms=-1))) == []


def test_a_scan_goes_page_by_page_and_a_limit_stops_it(runs, redis_client, monkeypatch):
    """Few matches among many records: each script call scans at most PAGE of them."""
    monkeypatch.setattr(reader_module, "PAGE", 7)
    wanted = []
    for number in range(60):
        failed = number % 10 == 0
        run_id = write(redis_client, attempt(entry=f"{number + 1}-0",
                                             status=RunStatus.FAILED if failed else RunStatus.SUCCEEDED))
        if failed:
            wanted.append(run_id)
    calls = []
    original = runs._page
    monkeypatch.setattr(runs, "_page", lambda *args, **kwargs: calls.append(args) or original(*args, **kwargs))
    assert ids(runs.newest(RunFilter(outcomes=("failed",)), limit=100)) == wanted[::-1]
    assert len(calls) == 9                     # 60 records, 7 a page
    calls.clear()
    assert ids(runs.newest(RunFilter(outcomes=("failed",)), limit=2)) == wanted[::-1][:2]
    assert len(calls) == 3                     # the second match is in the third page: no further
    assert ids(runs.newest(limit=20)) == ids(runs.newest(limit=100))[:20]


def test_get_reads_one_record_and_refuses_what_is_no_id(runs, redis_client):
    run_id = write(redis_client, attempt())
    assert runs.get(run_id).run_id == run_id
    assert runs.get("1-1") is None
    with pytest.raises(RunsError, match=r"^'bogus' is not a run id \(a stream entry id such as 1733479200000-0\)$"):
        runs.get("bogus")


def test_of_entry_is_every_record_of_it_oldest_first(runs, redis_client):
    entry = f"{int(time.time() * 1000)}-0"
    first = write(redis_client, attempt(entry=entry, status=RunStatus.FAILED, settled=Settled.RETRY_DUE))
    write(redis_client, attempt(entry="1-0", function="users"))
    second = write(redis_client, attempt(entry=entry, number=2, status=RunStatus.FAILED,
                                         settled=Settled.DEAD_LETTERED))
    assert ids(runs.of_entry(entry)) == [first, second]
    assert [run.attempt for run in runs.of_entry(entry)] == [1, 2]


def test_of_entry_allows_a_minute_of_clock_skew_and_no_more(runs, redis_client):
    entry_ms = 10_000_000
    write(redis_client, attempt(entry=f"{entry_ms}-0"), id=f"{entry_ms - 61_000}-0")   # a worker's clock far off
    skewed = write(redis_client, attempt(entry=f"{entry_ms}-0"), id=f"{entry_ms - 59_000}-0")
    later = write(redis_client, attempt(entry=f"{entry_ms}-0"), id=f"{entry_ms + 3_600_000}-0")
    assert ids(runs.of_entry(f"{entry_ms}-0")) == [skewed, later]


def test_follow_yields_the_records_written_after_it_started(runs, redis_client):
    write(redis_client, attempt(entry="1-0"))                     # before: never shown
    stream = runs.follow(RunFilter(function="orders"))
    seen = []
    done = threading.Event()

    def read():
        for run in stream:
            seen.append(run)
            if len(seen) == 2:
                done.set()
                return

    threading.Thread(target=read, daemon=True).start()
    time.sleep(0.3)
    first = write(redis_client, attempt(entry="2-0"))
    write(redis_client, attempt(entry="3-0", function="users"))   # another function: not shown
    second = write(redis_client, attempt(entry="4-0", status=RunStatus.FAILED))
    assert done.wait(10), seen
    assert ids(seen) == [first, second]


def test_follow_since_starts_with_the_records_since_then(runs, redis_client, monkeypatch):
    monkeypatch.setattr(reader_module, "PAGE", 3)
    write(redis_client, attempt(entry="1-0"), id="1000-0")
    backlog = [write(redis_client, attempt(entry=f"{n}-0"), id=f"{2000 + n}-0") for n in range(8)]
    stream = runs.follow(RunFilter(since_ms=2000))
    assert ids(next(stream) for _ in range(8)) == backlog


def test_follow_of_an_empty_ledger_waits_for_its_first_record(runs, redis_client):
    stream = runs.follow()
    timer = threading.Timer(0.5, lambda: write(redis_client, attempt()))
    timer.start()
    try:
        assert next(stream).entry == "1-0"
    finally:
        timer.cancel()


HOSTILE_RECORDS = [
    {"kind": "run"},                                                        # nothing else
    {"unrelated": "x"},                                                     # no field of a record
    {"function": b"\xff\xfe\x1b[2J", "status": b"\xc3", "attempt": "\u00b2", "pid": "-3", "started": "9" * 40,
     "duration": "1e9", "exit_code": "--1", "retry_at": "x", "settled": "maybe", "entry": "not an id"},
    {"stdout": "x" * (3 * FIELD_BYTES), "stderr": b"\x00" * 10, "function": "orders"},
    {**{f"field{n}": "v" for n in range(200)}, "function": "orders"},      # many unknown fields first
    {"function": "orders", "handler": "a"},
]


def test_records_anyone_wrote_never_fail_a_read(runs, redis_client):
    written = [write(redis_client, **fields) for fields in HOSTILE_RECORDS]
    found = runs.newest(limit=100)
    assert ids(found) == written[::-1]
    odd = next(run for run in found if run.run_id == written[2])
    assert odd.function == "\ufffd\ufffd\x1b[2J" and odd.attempt is None and odd.pid is None
    assert odd.started_ms is None and odd.status is None and odd.status_text == "\ufffd" and odd.settled is None
    huge = next(run for run in found if run.run_id == written[3])
    assert len(huge.stdout) == FIELD_BYTES                                   # cut in Redis: the reply is bounded
    assert ids(runs.newest(RunFilter(function="orders"), limit=100)) == [written[5], written[3]]
    assert runs.get(written[2]).entry == "not an id"
    assert runs.newest(RunFilter(outcomes=("succeeded",))) == []


def test_a_repeated_field_is_read_as_its_first(runs, redis_client):
    """XADD keeps both values of a field named twice; the script looks at the first, and so does the reply."""
    run_id = redis_client.execute_command("XADD", LEDGER, "*", "function", "orders", "function", "users").decode()
    assert ids(runs.newest(RunFilter(function="orders"))) == [run_id]
    assert runs.newest(RunFilter(function="users")) == []
    assert runs.get(run_id).function == "orders"


def test_a_ledger_of_another_type_is_a_redis_error(runs, redis_client):
    import redis

    redis_client.set(LEDGER, "not a stream")
    with pytest.raises(redis.ResponseError):
        runs.newest()
