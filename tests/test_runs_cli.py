"""``relay runs`` and inspect's last runs against a real redis-server, run as an operator would
(``python -m relay``, the entry point relay.pyz runs too)."""

import itertools
import json
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from relay.commands import function as function_command
from relay.runs.record import SETTLEMENT, Run, RunStatus, Settled
from relay.stream.keys import runs_stream
from relay.view.records import Stats
from tests.support.commands import view_command
from tests.support.relay_process import ROOT, base_env, relay_command, run_relay
from tests.test_views import STATS, write_database

LEDGER = runs_stream("events")
HOSTILE = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202e\x7f\r\x00"   # title, clear screen, C1 CSI, bidi override, DEL


@pytest.fixture
def env(redis_server):
    return base_env(REDIS_URI=redis_server.address, REDIS_STREAM="events")


@pytest.fixture
def runs(env, redis_client):
    """relay runs with *args* against this server's stream "events"; the CompletedProcess."""

    def run(*args):
        return run_relay("runs", *args, env=env)

    return run


def write(client, run):
    return client.xadd(LEDGER, run.fields()).decode()


def attempt(entry, number=1, status=RunStatus.SUCCEEDED, function="orders", **extra):
    return Run(entry=entry, event_id="evt_1", function=function, handler="app.handler",
               rule=f"{function}/app.handler", attempt=number, key="ab" * 16, host="worker-a", pid=4242,
               mode="cold", container="3f2a9c1b", started_ms=int(time.time() * 1000) - 2000, duration_ms=1234.5,
               status=status, exit_code=0 if status is RunStatus.SUCCEEDED else 1, stdout="hello\n",
               stderr="" if status is RunStatus.SUCCEEDED else "Traceback (most recent call last):\nValueError\n",
               **extra)


_entries = itertools.count(1)


def entry_id(client):
    """A new entry id of the source stream: a few seconds old, so that no run id the ledger gives is the same."""
    return f"{int(time.time() * 1000) - 5000}-{next(_entries)}"


def rows(result):
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return [line.split("  ") for line in result.stdout.splitlines()[1:]]


def test_ls_lists_the_newest_first_one_line_a_run(runs, redis_client):
    assert runs("ls").stdout == "TIME  FUNCTION  ATTEMPT  OUTCOME  DURATION  WORKER  ENTRY\n"
    first, second = entry_id(redis_client), entry_id(redis_client)
    write(redis_client, attempt(first, status=RunStatus.FAILED, settled=Settled.RETRY_DUE,
                                retry_at_ms=int(time.time() * 1000) + 10_000))
    write(redis_client, attempt(second, function="users"))
    write(redis_client, attempt(first, number=2, status=RunStatus.TIMED_OUT, settled=Settled.DEAD_LETTERED,
                                reason="attempts exhausted for orders/app.handler"))
    result = runs("ls")
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["TIME", "FUNCTION", "ATTEMPT", "OUTCOME", "DURATION", "WORKER", "ENTRY"]
    assert [line.split()[1:] for line in lines[1:]] == [
        ["orders/app.handler", "2", "timed", "out,", "dead-lettered", "1.23s", "worker-a/4242", first],
        ["users/app.handler", "1", "succeeded", "1.23s", "worker-a/4242", second],
        ["orders/app.handler", "1", "failed,", "retry", "due", "1.23s", "worker-a/4242", first]]
    assert all(len(line.split()[0]) == 20 and line.split()[0].endswith("Z") for line in lines[1:])
    assert [row[-1] for row in rows(runs("ls", "--function=orders", "--status=failed,timed-out"))] == [first, first]
    assert [row[-1] for row in rows(runs("ls", "--status=dead-lettered"))] == [first]
    assert [row[-1] for row in rows(runs("ls", "--entry", second))] == [second]
    assert len(rows(runs("ls", "--limit=1"))) == 1
    assert len(rows(runs("ls", "--since=1h", "--until=now", "--event-id=evt_1", "--handler=app.handler"))) == 3
    assert rows(runs("ls", "--until=2020-01-01T00:00:00Z")) == []


def test_ls_json_is_run_to_json_one_object_a_line(runs, redis_client):
    entry = entry_id(redis_client)
    run_id = write(redis_client, attempt(entry))
    result = runs("ls", "--json")
    [record] = [json.loads(line) for line in result.stdout.splitlines()]
    assert record["run_id"] == run_id and record["entry"] == entry and record["status"] == "succeeded"
    assert record["stdout"] == "hello\n" and record["duration_ms"] == 1234.5 and record["pid"] == 4242
    assert set(record) == set(attempt(entry).to_json())


def test_show_by_entry_or_by_run_id_prints_every_attempt_with_both_tails(runs, redis_client):
    entry = entry_id(redis_client)
    first = write(redis_client, attempt(entry, status=RunStatus.FAILED, settled=Settled.RETRY_DUE))
    write(redis_client, attempt(entry_id(redis_client), function="users"))
    second = write(redis_client, attempt(entry, number=2, status=RunStatus.FAILED, settled=Settled.DEAD_LETTERED,
                                         reason="attempts exhausted for orders/app.handler"))
    by_entry = runs("show", entry)
    assert (by_entry.returncode, by_entry.stderr) == (0, "")
    text = by_entry.stdout
    assert text.startswith(f"Entry:           {entry}\nEvent ID:        evt_1\nSettled:         dead-lettered: "
                           f"attempts exhausted for orders/app.handler (recorded ")
    assert "Runs:            2 attempts\n" in text
    assert text.index(f"\nRun {first}\n") < text.index(f"\nRun {second}\n")
    assert "  Outcome:         failed (exit code 1)\n" in text and "users" not in text
    assert text.count("  Stdout (last 4 KiB):\n    hello\n") == 2
    assert text.count("  Stderr (last 4 KiB):\n    Traceback (most recent call last):\n    ValueError\n") == 2
    by_run = runs("show", second)
    assert by_run.stdout == text.replace(f"\nRun {second}\n", f"\nRun {second} (the run asked for)\n")
    shown = json.loads(runs("show", first, "--json").stdout)
    assert shown["entry"] == entry and [run["run_id"] for run in shown["runs"]] == [first, second]
    assert shown["runs"][1]["settled"] == "dead-lettered"


def test_an_id_that_is_an_entry_s_and_a_run_s_shows_the_entry_and_names_the_other(runs, redis_client):
    """The ledger and the stream number their entries apart: in one millisecond both can have a 5-0."""
    entry, other_entry, shared = entry_id(redis_client), entry_id(redis_client), entry_id(redis_client)
    redis_client.xadd(LEDGER, attempt(entry).fields(), id=entry)            # a run of its own entry, same id
    redis_client.xadd(LEDGER, attempt(other_entry).fields(), id=shared)     # a run of another entry
    write(redis_client, attempt(entry, number=2))
    write(redis_client, attempt(shared))
    own = runs("show", entry)
    assert (own.stderr, own.stdout.count("\nRun ")) == ("", 2) and "asked for" not in own.stdout
    both = runs("show", shared)
    assert both.returncode == 0 and both.stdout.startswith(f"Entry:           {shared}\n")
    assert both.stderr == (f"relay runs show: {shared} is also the id of a run of entry {other_entry}; "
                           f"'relay runs show {other_entry}' shows that one\n")


def test_show_of_a_settlement_only_entry(runs, redis_client):
    entry = entry_id(redis_client)
    write(redis_client, Run(kind=SETTLEMENT, entry=entry, function="orders", handler="app.handler",
                            host="worker-b", pid=7, settled=Settled.DEAD_LETTERED,
                            reason="older than max_event_age (1h): 3h12m"))
    text = runs("show", entry).stdout
    assert "Settled:         dead-lettered: older than max_event_age (1h): 3h12m (recorded " in text
    assert "Runs:            0 attempts\n" in text and "\nSettlement " in text


@pytest.mark.parametrize(("args", "error"), [
    (("show", "1-1"), "relay runs show: no run and no entry 1-1 in relay:events:runs: the id is of neither, or the "
                      "ledger no longer keeps its records (RUNS_MAX_AGE, RUNS_MAX_ENTRIES)"),
    (("show", "bogus"), "relay runs show: 'bogus' is not a run id or an entry id (a stream entry id such as "
                        "1733479200000-0)"),
    (("ls", "--status=oops"), "relay runs ls: --status='oops' is not a run outcome; use one of succeeded, failed, "
                              "timed-out, killed, not-started, expired, dead-lettered (several joined by commas)"),
    (("ls", "--limit=0"), "relay runs ls: --limit='0' is not a positive whole number"),
    (("ls", "--entry=x"), "relay runs ls: 'x' is not an entry id (a stream entry id such as 1733479200000-0)"),
    (("ls", "--since=yesterday"), "relay runs ls: --since='yesterday' is not an RFC 3339 time such as "
                                  "2026-12-06T10:00:00Z, nor a duration ago such as 90m or 1h30m"),
    (("follow", "--status=nope"), "relay runs follow: --status='nope' is not a run outcome; "),
])
def test_a_bad_request_is_one_line_and_exit_1(runs, args, error):
    result = runs(*args)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith(error) and result.stderr.count("\n") == 1, result.stderr


def test_an_unreachable_redis_and_missing_settings_are_one_line(tmp_path, redis_server, redis_client):
    result = run_relay("runs", "ls", env=base_env(REDIS_URI="127.0.0.1:1", REDIS_STREAM="events"))
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("relay runs ls: Redis at redis://127.0.0.1:1/0 is unreachable")
    missing = run_relay("runs", "show", "1-0", "--env-file=/dev/null", env=base_env())
    assert missing.stderr == "relay runs show: REDIS_URI is required and must not be empty\n"
    settings = tmp_path / "relay.env"
    settings.write_text(f"REDIS_URI={redis_server.address}\nREDIS_STREAM=events\n")
    write(redis_client, attempt("1-0"))
    from_file = run_relay("runs", "ls", f"--env-file={settings}", env=base_env())
    assert from_file.returncode == 0 and len(from_file.stdout.splitlines()) == 2


def test_every_field_a_writer_wrote_is_escaped_on_the_terminal(runs, redis_client, env):
    entry = entry_id(redis_client)
    hostile = {"kind": "run", "entry": entry, "event_id": f"evt{HOSTILE}", "function": f"orders{HOSTILE}",
               "handler": f"h{HOSTILE}", "host": f"w{HOSTILE}", "pid": "1", "status": f"odd{HOSTILE}",
               "error": f"bad{HOSTILE}", "stdout": f"out{HOSTILE}\nnext", "stderr": b"\xff\xfe\x1b[31m",
               "settled": "dead-lettered", "reason": f"why{HOSTILE}", "container": HOSTILE, "mode": HOSTILE}
    run_id = redis_client.xadd(LEDGER, hostile).decode()
    for result in (runs("ls"), runs("show", entry), runs("show", run_id)):
        assert (result.returncode, result.stderr) == (0, "")
        assert all(line.isprintable() for line in result.stdout.split("\n")), result.stdout
        assert "orders\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\u202e\\x7f\\r\\x00" in result.stdout
    shown = runs("show", entry).stdout
    assert "    out\\x1b]0;owned" in shown and "\n    next\n" in shown and "    \ufffd\ufffd\\x1b[31m\n" in shown
    record = json.loads(runs("ls", "--json").stdout)
    assert record["function"] == f"orders{HOSTILE}" and record["status"] == f"odd{HOSTILE}"


def test_follow_prints_new_runs_until_ctrl_c(env, redis_client):
    """A real process: it prints each run as it is recorded, and Ctrl-C ends it with no traceback."""
    write(redis_client, attempt("1-0"))                            # before it started: not shown
    process = subprocess.Popen(relay_command("runs", "follow", "--function=orders"), cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        written = set()
        line = ""
        while not line and time.monotonic() < deadline:              # until it has started and seen one
            written.add(write(redis_client, attempt(f"{len(written) + 2}-0")))
            write(redis_client, attempt("0-1", function="users"))   # another function: never shown
            time.sleep(0.2)
            line = _readline(process, 0.3)
        assert line.split()[1:3] == ["orders/app.handler", "1"], line
        last = entry_id(redis_client)
        write(redis_client, attempt(last, status=RunStatus.KILLED))
        seen = [line]
        while last not in seen[-1] and time.monotonic() < deadline:
            seen.append(_readline(process, 5))
        assert "killed" in seen[-1] and not any("users" in text for text in seen)
        process.send_signal(signal.SIGINT)
        assert process.wait(10) == 0
        assert process.stderr.read() == ""
    finally:
        process.kill()
        process.wait()


def _readline(process, timeout):
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        return process.stdout.readline() if selector.select(timeout) else ""


def test_follow_json_since_prints_the_backlog_first(env, redis_client):
    run_id = write(redis_client, attempt("5-0"))
    process = subprocess.Popen(relay_command("runs", "follow", "--since=1h", "--json"), cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _readline(process, 30)
        assert json.loads(line)["run_id"] == run_id
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(10) == 0
        process.kill()


def test_runs_imports_nothing_heavy_but_redis(env, redis_client):
    probe = ("import sys\nfrom relay.entry import main\ncode = main(['runs', 'ls'])\n"
             "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('gevent', 'docker', 'yaml'))\n"
             "print('HEAVY', heavy, code, file=sys.stderr)\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert "HEAVY [] 0" in result.stderr, result.stderr


# --- relay function inspect -------------------------------------------------------------


@pytest.fixture
def database(tmp_path):
    path = tmp_path / "db.sqlite3"
    write_database(path, Stats(STATS, 1, 2.0, datetime.now(UTC)))
    return path


def inspect(database, environ, *extra):
    args = {"ls": False, "<name>": "user-events-python", "--json": "--json" in extra, "--env-file": None}
    return function_command.run(args, database, environ)


def test_inspect_shows_the_function_s_last_ten_runs(database, redis_server, redis_client, capsys):
    entries = [entry_id(redis_client) for _ in range(12)]
    for entry in entries:
        write(redis_client, attempt(entry, function="user-events-python"))
    write(redis_client, attempt(entry_id(redis_client), function="welcome-email-node"))
    environ = {"REDIS_URI": redis_server.address, "REDIS_STREAM": "events"}
    assert inspect(database, environ) == 0
    captured = capsys.readouterr()
    section = captured.out.split("\nLast runs:\n", 1)[1].splitlines()
    assert section[0].split() == ["TIME", "HANDLER", "ATTEMPT", "OUTCOME", "DURATION", "ENTRY"]
    assert [line.split()[-1] for line in section[1:]] == entries[::-1][:10]
    assert section[1].split()[1:5] == ["app.handler", "1", "succeeded", "1.23s"] and captured.err == ""
    assert inspect(database, environ, "--json") == 0
    inspected = json.loads(capsys.readouterr().out)
    assert [run["entry"] for run in inspected["runs"]] == entries[::-1][:10]
    assert inspected["runs_unavailable"] is None


def test_inspect_without_runs_says_so_in_one_line(database, redis_client, redis_server, capsys):
    assert inspect(database, {"REDIS_URI": redis_server.address, "REDIS_STREAM": "events"}) == 0
    assert capsys.readouterr().out.endswith("\nLast runs:\n  none in the run ledger (relay:events:runs)\n")


@pytest.mark.parametrize(("environ", "why"), [
    ({}, "REDIS_URI and REDIS_STREAM are not set (in the environment or the service's environment file; "
         "--env-file names another)"),
    ({"REDIS_URI": "127.0.0.1:1"}, "REDIS_STREAM is not set"),
    ({"REDIS_URI": "127.0.0.1:1", "REDIS_STREAM": "events"}, "Redis at redis://127.0.0.1:1/0 is unreachable: "),
    ({"REDIS_URI": "bogus://x", "REDIS_STREAM": "events"}, "REDIS_URI"),
])
def test_inspect_still_works_when_the_runs_cannot_be_read(database, capsys, environ, why):
    assert inspect(database, environ) == 0
    captured = capsys.readouterr()
    assert "Fingerprint:" in captured.out and captured.err == ""
    last = captured.out.split("\nLast runs:\n", 1)[1]
    assert last.startswith(f"  not shown: {why}") and last.count("\n") == 1
    assert inspect(database, environ, "--json") == 0
    inspected = json.loads(capsys.readouterr().out)
    assert inspected["runs"] is None and inspected["runs_unavailable"].startswith(why)


def test_the_real_inspect_with_redis_unconfigured(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    write_database(state / "db.sqlite3", Stats(STATS, 17, 134.0, datetime.now(UTC)))
    result = view_command(state, "function", "inspect", "user-events-python", "--env-file=/dev/null")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.endswith("\nLast runs:\n  not shown: REDIS_STREAM is not set (in the environment or the "
                                  "service's environment file; --env-file names another)\n")


def test_relay_pyz_runs_ls_and_show_with_redis_only(pyz, env, redis_client, tmp_path):
    """A plain python3 without Relay's dependencies, run from elsewhere than the source tree."""
    import shutil

    entry = entry_id(redis_client)
    write(redis_client, attempt(entry, status=RunStatus.FAILED))
    command = [shutil.which("python3"), str(pyz), "runs"]
    variables = {**env, "RELAY_PYZ_CACHE": str(tmp_path / "cache")}
    listed = subprocess.run([*command, "ls"], cwd=tmp_path, env=variables, capture_output=True, text=True,
                            timeout=120)
    assert (listed.returncode, listed.stderr) == (0, "") and listed.stdout.splitlines()[1].endswith(entry)
    shown = subprocess.run([*command, "show", entry], cwd=tmp_path, env=variables, capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0 and "    ValueError\n" in shown.stdout
