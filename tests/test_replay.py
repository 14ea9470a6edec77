"""``relay replay`` against a real redis-server: what it reads, chooses and adds, what it says, and the
consumer running the copies (through the engine harness: only the named function, new keys)."""

import io
import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
from docopt import docopt

from relay.cli import COMMANDS
from relay.commands import replay as command
from relay.runs.record import Run, RunStatus, Settled
from relay.runs.replay import Adder, parse_rate, window
from relay.stream.keys import runs_stream
from tests.support.engine import AUDIT, ORDERS, STREAM, Engine
from tests.support.relay_process import ROOT, base_env, relay_command
from tests.support.workers import write_function

pytestmark = pytest.mark.integration

ORDERS_TEMPLATE = """\
runtime: python3.14
events:
  - handler: first.handler
    pattern: {kind: [order]}
    retries: 2
  - handler: second.handler
    pattern: {kind: [order]}
    retries: 0
"""
AUDIT_TEMPLATE = """\
runtime: node24
events:
  - handler: audit.handler
    pattern: {kind: [order, refund]}
"""
ORDER, REFUND, OTHER = (json.dumps({"kind": kind}) for kind in ("order", "refund", "other"))


def at(second):
    """RFC 3339 for *second* seconds after the epoch: the explicit ids below are those times."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def functions(tmp_path):
    root = tmp_path / "functions"
    write_function(root, "orders", ORDERS_TEMPLATE, {})
    write_function(root, "audit", AUDIT_TEMPLATE, {})
    return root


@pytest.fixture
def replay(redis_server, functions):
    """relay replay in this process with *argv*: (exit code, stdout, stderr)."""

    def run(*argv, stdin=None, stderr=None, environ=None):
        args = docopt(COMMANDS["replay"], argv=["replay", *argv, f"--dir={functions}"])
        stdout, stderr = io.StringIO(), stderr or io.StringIO()
        environ = environ or {"REDIS_URI": redis_server.address, "REDIS_STREAM": STREAM}
        code = command.run(args, environ=environ, stdin=stdin or io.StringIO(), stdout=stdout, stderr=stderr)
        return code, stdout.getvalue(), stderr.getvalue()

    return run


def fill(client, *events, second=1):
    """Add *events* with the ids <second>000-0, <second+1>000-0, ...; their ids."""
    return [client.xadd(STREAM, {"event": event} if isinstance(event, str) else event,
                        id=f"{(second + index) * 1000}-0").decode() for index, event in enumerate(events)]


def copies(client, after="1000000000000"):
    """The entries replay added (ids after *after*): (replay_of, replay_for, event) each."""
    return [(fields[b"replay_of"].decode(), fields[b"replay_for"].decode(), fields[b"event"].decode())
            for _id, fields in client.xrange(STREAM, f"({after}", "+")]


# --- which entries, for which functions -------------------------------------------------


def test_a_range_is_replayed_for_the_named_function_with_the_entries_own_event(replay, redis_client):
    ids = fill(redis_client, ORDER, ORDER, REFUND, ORDER, ORDER)
    code, out, err = replay(f"--since={at(2)}", f"--until={at(4)}", "--function=orders", "--yes")
    assert (code, err) == (0, "")
    assert copies(redis_client) == [(ids[1], "orders", ORDER), (ids[3], "orders", ORDER)]
    assert "read 3 entries; 2 entries to add: 2 for orders\n" in out
    assert out.splitlines()[0] == "replaying events from 1970-01-01T00:00:02.000Z to 1970-01-01T00:00:04.000Z"
    assert "the stream reaches back to 1970-01-01T00:00:01.000Z (entry 1000-0)" in out
    assert out.splitlines()[-1].startswith("added 2 entries to events, ")


def test_until_takes_the_whole_millisecond_and_since_an_entry_id_starts_after_it(replay, redis_client):
    first = redis_client.xadd(STREAM, {"event": ORDER}, id="5000-0").decode()
    second = redis_client.xadd(STREAM, {"event": ORDER}, id="5000-1").decode()
    redis_client.xadd(STREAM, {"event": ORDER}, id="5001-0")
    assert replay(f"--since={first}", "--until=1970-01-01T00:00:05.000Z", "--function=orders", "--yes")[0] == 0
    assert [source for source, _, _ in copies(redis_client)] == [second]


def test_a_handler_narrows_the_copies_to_it(replay, redis_client):
    ids = fill(redis_client, ORDER, REFUND)
    assert replay(f"--since={at(1)}", f"--until={at(2)}", "--function=orders", "--handler=second.handler",
                  "--yes")[0] == 0
    assert copies(redis_client) == [(ids[0], "orders/second.handler", ORDER)]


def test_without_a_function_each_matching_function_gets_its_own_copy(replay, redis_client):
    ids = fill(redis_client, ORDER, REFUND, OTHER)
    code, out, _ = replay(f"--since={at(1)}", f"--until={at(3)}", "--yes")
    assert code == 0 and "3 entries to add: 2 for audit, 1 for orders\n" in out
    assert copies(redis_client) == [(ids[0], "audit", ORDER), (ids[0], "orders", ORDER), (ids[1], "audit", REFUND)]


def test_schedule_occurrences_replays_and_unreadable_entries_are_skipped_and_counted(replay, redis_client):
    fill(redis_client, ORDER, {"event": ORDER, "schedule": "schedule:orders:first.handler:2026-01-01T00:00:00Z"},
         {"event": ORDER, "replay_of": "1-0", "replay_for": "orders"}, "{not json", {"other": "x"})
    code, out, _ = replay(f"--since={at(1)}", f"--until={at(5)}", "--function=orders", "--yes")
    assert code == 0 and len(copies(redis_client)) == 1
    assert out.splitlines()[2:-1] == [
        "read 5 entries; 1 entry to add: 1 for orders",
        "skipped 1 schedule occurrence: an occurrence runs only as Relay's scheduler publishes it",
        "skipped 1 copy an earlier replay added: a copy is never copied again",
        "skipped 2 unreadable entries: Relay dead-letters them (relay dlq ls)"]


def test_a_second_replay_of_a_range_holding_the_first_one_s_copies_adds_no_copies_of_copies(replay, redis_client):
    fill(redis_client, ORDER)
    assert replay(f"--since={at(1)}", "--function=orders", "--yes")[0] == 0
    code, out, _ = replay(f"--since={at(1)}", "--function=orders", "--yes")
    assert code == 0 and "skipped 1 copy an earlier replay added" in out
    assert [source for source, _, _ in copies(redis_client)] == ["1000-0", "1000-0"]


def ledger(client, **fields):
    client.xadd(runs_stream(STREAM), Run(**fields).fields())


def test_failed_only_takes_the_entries_whose_runs_failed_or_were_dead_lettered(replay, redis_client):
    ids = fill(redis_client, *[ORDER] * 6)
    rule = {"function": "orders", "handler": "first.handler", "rule": "orders/first.handler"}
    ledger(redis_client, entry=ids[0], status=RunStatus.FAILED, settled=Settled.DEAD_LETTERED, **rule)
    ledger(redis_client, entry=ids[1], status=RunStatus.FAILED, settled=Settled.RETRY_DUE, **rule)
    ledger(redis_client, entry=ids[1], status=RunStatus.SUCCEEDED, settled=Settled.ACKNOWLEDGED, **rule)
    ledger(redis_client, entry=ids[2], status=RunStatus.TIMED_OUT, settled=Settled.RETRY_DUE, **rule)  # still going
    ledger(redis_client, kind="settlement", entry=ids[3], settled=Settled.DEAD_LETTERED, reason="exhausted")
    ledger(redis_client, entry=ids[4], status=RunStatus.FAILED, settled=Settled.DEAD_LETTERED,
           function="audit", handler="audit.handler", rule="audit/audit.handler")
    ledger(redis_client, kind="settlement", entry=ids[5], function="audit,orders", settled=Settled.DEAD_LETTERED,
           reason="the 'schedule' field was not written by Relay's scheduler")   # names each function it had
    code, out, _ = replay(f"--since={at(1)}", "--function=orders", "--failed-only", "--yes")
    assert code == 0, out
    assert [(source, target) for source, target, _ in copies(redis_client)] == [
        (ids[0], "orders"), (ids[3], "orders"), (ids[5], "orders")]
    assert "3 entries to add: 3 for orders\nleft 3 entries whose runs did not fail (--failed-only)\n" in out


def test_failed_only_with_a_handler_counts_that_handler_s_runs(replay, redis_client):
    ids = fill(redis_client, ORDER, ORDER)
    ledger(redis_client, entry=ids[0], function="orders", handler="first.handler", rule="orders/first.handler",
           status=RunStatus.FAILED, settled=Settled.DEAD_LETTERED)
    ledger(redis_client, entry=ids[1], function="orders", handler="second.handler", rule="orders/second.handler",
           status=RunStatus.KILLED, settled=Settled.DEAD_LETTERED)
    code, _, _ = replay(f"--since={at(1)}", "--function=orders", "--handler=second.handler", "--failed-only", "--yes")
    assert code == 0 and copies(redis_client) == [(ids[1], "orders/second.handler", ORDER)]


# --- what it says, asks, and how it adds ------------------------------------------------


def test_a_dry_run_says_what_it_would_add_and_adds_nothing(replay, redis_client):
    ids = fill(redis_client, ORDER, REFUND)
    code, out, _ = replay(f"--since={at(1)}", "--dry-run")
    assert code == 0 and copies(redis_client) == []
    assert out.splitlines()[2:] == [
        f"would add {ids[0]} for audit", f"would add {ids[0]} for orders", f"would add {ids[1]} for audit",
        "read 2 entries; 3 entries to add: 2 for audit, 1 for orders", "dry run: nothing was added to events"]


def test_without_a_terminal_and_without_yes_it_refuses(replay, redis_client):
    fill(redis_client, ORDER)
    code, _, err = replay(f"--since={at(1)}", "--function=orders")
    assert code == 1 and copies(redis_client) == []
    assert err == "relay replay: would add 1 entry to events; add --yes to do it without a terminal\n"


@pytest.mark.parametrize(("answer", "added"), [("y\n", 1), ("n\n", 0), ("", 0)])
def test_on_a_terminal_it_asks(replay, redis_client, answer, added):
    fill(redis_client, ORDER)
    code, out, _ = replay(f"--since={at(1)}", "--function=orders", stdin=Terminal(answer))
    assert "Add 1 entry to events at 100/s (about 1s)? [y/N] " in out
    assert (code, len(copies(redis_client))) == ((0, 1) if added else (1, 0))


def test_it_says_plainly_when_since_is_older_than_the_stream(replay, redis_client):
    fill(redis_client, ORDER, second=50)
    code, out, _ = replay(f"--since={at(10)}", "--function=orders", "--dry-run")
    assert code == 0
    assert ("--since is older than that: the entries before 1970-01-01T00:00:50.000Z were trimmed "
            "(REDIS_STREAM_RETENTION, MAXLEN) and cannot be replayed") in out


def test_nothing_to_add_is_said_and_asks_nothing(replay, redis_client):
    fill(redis_client, OTHER)
    code, out, _ = replay(f"--since={at(1)}", "--function=orders")
    assert code == 0 and out.endswith("read 1 entry; 0 entries to add\nnothing to add\n")


def test_progress_goes_to_stderr_on_a_terminal(replay, redis_client):
    fill(redis_client, ORDER, ORDER)
    stderr = Terminal()
    code, out, _ = replay(f"--since={at(1)}", "--function=orders", "--yes", stderr=stderr)
    assert code == 0 and "added 1 of 2 entries (source entry 1000-0)" in stderr.getvalue()
    assert "added" not in out.splitlines()[0]


def test_the_rate_paces_the_additions(redis_client):
    clock, slept = [100.0], []

    def sleep(seconds):
        slept.append(seconds)
        clock[0] += seconds

    adder = Adder(redis_client, STREAM, rate=4, clock=lambda: clock[0], sleep=sleep)
    for n in range(5):
        adder.add(f"{n + 1}-0", b"{}", ["orders"] if n != 2 else ["orders", "audit"])
    assert slept == [0.25, 0.25, 0.5, 0.25]      # the third entry's two copies take two slots
    assert redis_client.xlen(STREAM) == 6


@pytest.mark.parametrize(("text", "rate"), [("100/s", 100.0), ("5", 5.0), ("0.5/s", 0.5), ("600/m", 10.0)])
def test_rates(text, rate):
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["0/s", "-1/s", "fast", "10/h", "1e3", ""])
def test_bad_rates(text):
    with pytest.raises(Exception, match="is not a rate such as 100/s or 600/m"):
        parse_rate(text)


def test_an_interrupted_replay_prints_the_command_that_continues_it(redis_server, redis_client, functions):
    ids = fill(redis_client, *[ORDER] * 40)
    env = base_env(REDIS_URI=redis_server.address, REDIS_STREAM=STREAM)
    args = [f"--since={at(1)}", "--function=orders", "--rate=20/s", "--yes", f"--dir={functions}"]
    process = subprocess.Popen(relay_command("replay", *args), cwd=ROOT, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while len(copies(redis_client)) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    done = copies(redis_client)
    assert 5 <= len(done) < 40
    lines = err.strip().splitlines()
    assert lines[0] == (f"relay replay: interrupted after adding {len(done)} entries; every entry up to "
                        f"{done[-1][0]} was replayed. To continue:")
    again = shlex.split(lines[1])
    assert again[:2] == ["relay", "replay"] and f"--since={done[-1][0]}" in again and "--rate=20/s" in again
    until = next(word for word in again if word.startswith("--until="))
    continued = subprocess.run(relay_command(*again[1:]), cwd=ROOT, env=env, text=True, capture_output=True,
                               timeout=60, input="")
    assert continued.returncode == 0, continued.stderr
    assert [source for source, _, _ in copies(redis_client)] == ids      # every entry once, none twice
    assert until.startswith("--until=20")     # the absolute end, not "now"


def test_a_redis_error_while_adding_says_where_it_stopped(replay, redis_client, functions, monkeypatch):
    import redis

    fill(redis_client, ORDER, ORDER, ORDER)
    real, calls = Adder.write, []

    def failing(self, entry_id, event, targets):
        calls.append(entry_id)
        if len(calls) == 3:
            raise redis.ConnectionError("Connection reset by peer")
        return real(self, entry_id, event, targets)

    monkeypatch.setattr(Adder, "write", failing)
    code, _, err = replay(f"--since={at(1)}", "--until=1970-01-01T00:00:09.500Z", "--function=orders", "--yes")
    assert code == 1 and len(copies(redis_client)) == 2
    assert err.splitlines()[1:] == [
        "relay replay: Redis failed: Connection reset by peer after adding 2 entries; every entry up to 2000-0 "
        "was replayed. To continue:",
        f"  relay replay --since=2000-0 --until=1970-01-01T00:00:09.500Z --function=orders --rate=100/s "
        f"--dir={functions} --yes"]


def test_a_ctrl_c_while_an_entry_is_written_waits_for_its_ids(replay, redis_client, monkeypatch):
    """Stopped between sending an entry's copies and reading their ids, the continuation would add it again."""
    fill(redis_client, ORDER, ORDER, ORDER)
    real, calls = Adder.write, []

    def interrupted(self, entry_id, event, targets):
        calls.append(entry_id)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)      # arrives while the copies are being written
            time.sleep(0.05)
        return real(self, entry_id, event, targets)

    monkeypatch.setattr(Adder, "write", interrupted)
    handler = signal.getsignal(signal.SIGINT)
    code, _, err = replay(f"--since={at(1)}", "--until=1970-01-01T00:00:09Z", "--function=orders", "--yes")
    assert code == 130 and [source for source, _, _ in copies(redis_client)] == ["1000-0", "2000-0"]
    assert "interrupted after adding 2 entries; every entry up to 2000-0 was replayed" in err
    assert signal.getsignal(signal.SIGINT) is handler       # put back


# --- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "message"), [
    (["--since=yesterday"], "--since='yesterday' is not an RFC 3339 time such as 2026-12-06T10:00:00Z, "
                            "nor a duration ago such as 90m or 1h30m"),
    ([f"--since={at(5)}", f"--until={at(2)}"], "--since='1970-01-01T00:00:05Z' is after "
                                               "--until='1970-01-01T00:00:02Z'; nothing is between them"),
    (["--since=1h", "--function=billing"], "there is no function 'billing' in "),
    (["--since=1h", "--function=orders", "--handler=gone.handler"],
     "function 'orders' has no rule with handler 'gone.handler'"),
    (["--since=1h", "--handler=first.handler"], "--handler needs --function: the function whose handler it is"),
    (["--since=1h", "--rate=fast"], "--rate='fast' is not a rate such as 100/s or 600/m"),
])
def test_errors_are_one_line_and_add_nothing(replay, redis_client, argv, message):
    fill(redis_client, ORDER)
    code, out, err = replay(*argv, "--yes")
    assert code == 1 and copies(redis_client) == []
    assert err.startswith(f"relay replay: {message}") and len(err.splitlines()) == 1, err


def test_an_unreachable_redis_is_one_line(replay):
    code, _, err = replay("--since=1h", "--yes", environ={"REDIS_URI": "redis://127.0.0.1:1/0",
                                                         "REDIS_STREAM": STREAM})
    assert code == 1 and len(err.splitlines()) == 1
    assert err.startswith("relay replay: Redis at redis://127.0.0.1:1/0 is unreachable")


def test_a_function_that_does_not_load_is_named(replay, functions):
    write_function(functions, "broken", "runtime: python3.14\nevents: []\n", {})
    code, _, err = replay("--since=1h", "--function=broken", "--yes")
    assert code == 1 and err.startswith("relay replay: function 'broken' does not load: ")


def test_what_a_producer_or_the_environment_wrote_is_escaped(replay, redis_client, redis_server):
    stream = "ev\x1b[2Jents"
    redis_client.xadd(stream, {"event": ORDER}, id="1000-0")
    code, out, _ = replay(f"--since={at(1)}", "--function=orders", "--dry-run",
                          environ={"REDIS_URI": redis_server.address, "REDIS_STREAM": stream})
    assert code == 0 and "\x1b" not in out and "replaying ev\\x1b[2Jents from" in out


def test_replay_imports_neither_gevent_nor_docker(redis_server, functions):
    probe = ("import sys\nfrom relay.entry import main\n"
             f"code = main(['replay', '--since=1h', '--dry-run', '--dir={functions}'])\n"
             "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('gevent', 'docker'))\n"
             "print('HEAVY', code, heavy, file=sys.stderr)\n")
    env = base_env(REDIS_URI=redis_server.address, REDIS_STREAM=STREAM)
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert "HEAVY 0 []" in result.stderr, result.stderr


def test_the_window_never_ends_in_the_future():
    """So the copies a replay adds (ids from now on) are never in its own window."""
    span = window("2h", "1h", now_ms=10_000_000)
    assert (span.start, span.since_ms, span.until_ms) == ("2800000", 2_800_000, 6_400_000)
    assert window("10s", "2999-01-01T00:00:00Z", now_ms=10_000_000).until_ms == 10_000_000


# --- the consumer running the copies ----------------------------------------------------


def test_a_replayed_range_runs_only_the_named_function_once_per_entry_with_new_keys(replay, redis_client):
    engine = Engine(redis_client, [ORDERS, AUDIT])
    originals = [engine.publish({"kind": "order", "n": n}) for n in range(3)]
    engine.read()
    first_keys = {(call.function, call.handler): [] for call in engine.executor.calls}
    for call in engine.executor.calls:
        first_keys[(call.function, call.handler)].append(call.idempotency_key)
    assert len(engine.executor.calls) == 9 and engine.pending() == 0
    engine.executor.calls.clear()

    code, out, err = replay("--since=5m", "--function=orders", "--yes")
    assert code == 0, err
    engine.read()
    calls = engine.executor.calls
    assert sorted((call.function, call.handler) for call in calls) == sorted(
        [("orders", "first.handler"), ("orders", "second.handler")] * 3)
    replayed_keys = [call.idempotency_key for call in calls]
    assert len(set(replayed_keys)) == 6 and not set(replayed_keys) & {
        key for keys in first_keys.values() for key in keys}
    assert sorted({json.loads(call.payload)["n"] for call in calls}) == [0, 1, 2]
    assert engine.pending() == 0 and engine.dlq() == [] and len(originals) == 3


def test_a_replayed_entry_of_a_removed_function_is_dead_lettered_with_a_reason(replay, redis_client):
    engine = Engine(redis_client, [ORDERS, AUDIT])
    original = engine.publish({"kind": "order"})
    engine.read()
    engine.executor.calls.clear()
    assert replay("--since=5m", "--function=orders", "--yes")[0] == 0
    engine.catalog.remove("orders")
    engine.read()
    assert engine.executor.calls == [] and engine.pending() == 0
    [letter] = engine.dlq()
    assert letter["reason"] == "replayed for function 'orders', which is not loaded"
    assert letter["original_id"] != original and letter["attempts"] == "0"


def test_replay_runs_from_relay_pyz_with_redis_only(redis_server, redis_client, functions, pyz):
    ids = fill(redis_client, ORDER)
    env = base_env(REDIS_URI=redis_server.address, REDIS_STREAM=STREAM, DOCKER_HOST="tcp://127.0.0.1:1")
    result = subprocess.run([sys.executable, str(pyz), "replay", f"--since={at(1)}", "--function=orders", "--yes",
                             f"--dir={functions}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert copies(redis_client) == [(ids[0], "orders", ORDER)]
