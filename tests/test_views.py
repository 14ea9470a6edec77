"""``relay function ls``, ``relay function inspect`` and ``relay stats``: golden output,
exit codes, and the real command reading /var/lib/relay/db.sqlite3 in a private
mount namespace (no Redis, Docker or /functions anywhere)."""

import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from relay.commands import function as function_command
from relay.commands import stats as stats_command
from relay.view import report
from relay.view.database import StateDatabase
from relay.view.records import (
    FAILED,
    PENDING,
    READY,
    SCHEDULE,
    SUCCESS,
    Counters,
    FunctionRecord,
    FunctionStats,
    HandlerRecord,
    LimitWaits,
    Stats,
    WarmRecord,
)
from relay.view.report import age, render_function, render_function_list, render_stats
from tests.support.commands import view_command

NOW = datetime(2026, 9, 8, 12, 0, 12, tzinfo=UTC)
PREPARED = datetime(2026, 9, 8, 12, 0, 0, tzinfo=UTC)
FINGERPRINT = "3f5a0c1e9b7d24680acf13579bdf02468ace13579bdf02468ace13579bdf0246"
IMAGE = "relay-fn-user-events-python:3f5a0c1e9b7d2468"

USER_EVENTS = FunctionRecord(
    name="user-events-python", runtime="python3.14", status=READY, updated_at=PREPARED, image=IMAGE,
    fingerprint=FINGERPRINT, prepared_at=PREPARED, last_reconcile_at=PREPARED, last_reconcile_status=SUCCESS,
    handlers=(HandlerRecord("events.created.handler", "6s"), HandlerRecord("events.updated.handler", "20s"),
              HandlerRecord("events.deleted.handler", "6s")))
WELCOME = FunctionRecord(
    name="welcome-email-node", runtime="node24", status=READY, updated_at=PREPARED,
    image="relay-fn-welcome-email-node:0011223344556677", fingerprint="0011223344556677" + "8" * 48,
    prepared_at=PREPARED, last_reconcile_at=PREPARED, last_reconcile_status=SUCCESS,
    handlers=(HandlerRecord("handler.handler", "6s"),))
BUILD_ERROR = ('building image relay-fn-reports:9a8b7c6d5e4f3a2b for function "reports" failed: The command '
               "'/bin/sh -c pip install -r requirements.txt' returned a non-zero code: 1\n"
               "last build output:\n"
               "  ERROR: No matching distribution found for reportlib==9.9")
STATS = Counters(12493, 12470, 23, 17, 2)
FUNCTION_STATS = FunctionStats(STATS)


def test_function_ls_matches_the_reference():
    assert render_function_list([USER_EVENTS, WELCOME], NOW) == (
        "NAME                  RUNTIME      STATUS    HANDLERS   UPDATED\n"
        "user-events-python    python3.14   ready     3          12s ago\n"
        "welcome-email-node    node24       ready     1          12s ago\n")


def test_function_ls_ages_pending_rows_and_long_names():
    long_name = "a-function-name-that-is-rather-long"
    rows = [
        FunctionRecord(name=long_name, runtime="node24", status=READY, updated_at=NOW - timedelta(days=40),
                       prepared_at=datetime(2026, 7, 30, 9, 0, tzinfo=UTC),
                       handlers=(HandlerRecord("h.a", "6s"), HandlerRecord("h.b", "6s", SCHEDULE, "* * * * *"))),
        FunctionRecord(name="reports", runtime="python3.14", status=PENDING, updated_at=NOW - timedelta(minutes=3),
                       last_reconcile_status=FAILED, last_reconcile_at=NOW - timedelta(minutes=3),
                       last_error=BUILD_ERROR, handlers=(HandlerRecord("jobs.report.handler", "6s"),) * 12),
        FunctionRecord(name="nightly", runtime="python3.14", status=READY, updated_at=NOW,
                       prepared_at=NOW - timedelta(hours=2, minutes=59)),
        FunctionRecord(name="weekly", runtime="python3.14", status=READY, updated_at=NOW,
                       prepared_at=NOW - timedelta(days=5, hours=23)),
    ]
    assert render_function_list(sorted(rows, key=lambda row: row.name), NOW) == (
        "NAME                                  RUNTIME      STATUS    HANDLERS   UPDATED\n"
        "a-function-name-that-is-rather-long   node24       ready     1          2026-07-30\n"
        "nightly                               python3.14   ready     0          2h ago\n"
        "reports                               python3.14   pending   12         3m ago\n"
        "weekly                                python3.14   ready     0          5d ago\n")


def test_function_ls_with_nothing_loaded_is_the_header():
    assert render_function_list([], NOW) == "NAME                  RUNTIME      STATUS    HANDLERS   UPDATED\n"


def test_inspect_a_ready_function():
    assert render_function(USER_EVENTS, FUNCTION_STATS, NOW) == f"""\
Name:              user-events-python
Runtime:           python3.14
Status:            ready
Image:             {IMAGE}
Fingerprint:       {FINGERPRINT}
Prepared:          2026-09-08T12:00:00Z (12s ago)
Last reconcile:    success (12s ago)

Events:
  events.created.handler   timeout=6s
  events.updated.handler   timeout=20s
  events.deleted.handler   timeout=6s

Stats:
  Events processed:    12493
  Handler successes:   12470
  Handler failures:    23
  Retries:             17
  DLQ entries:         2
"""


def test_inspect_a_pending_function_omits_image_fingerprint_and_prepared():
    pending = FunctionRecord(
        name="reports", runtime="python3.14", status=PENDING, updated_at=NOW - timedelta(minutes=3),
        last_reconcile_at=NOW - timedelta(minutes=3), last_reconcile_status=FAILED, last_error=BUILD_ERROR,
        handlers=(HandlerRecord("jobs.report.handler", "6s"),))
    assert render_function(pending, FunctionStats(), NOW) == """\
Name:              reports
Runtime:           python3.14
Status:            pending
Last reconcile:    failed (3m ago)
Last error:        building image relay-fn-reports:9a8b7c6d5e4f3a2b for function "reports" failed: The command \
'/bin/sh -c pip install -r requirements.txt' returned a non-zero code: 1
                   last build output:
                     ERROR: No matching distribution found for reportlib==9.9

Events:
  jobs.report.handler      timeout=6s

Stats:
  Events processed:    0
  Handler successes:   0
  Handler failures:    0
  Retries:             0
  DLQ entries:         0
"""


def test_inspect_a_pending_function_still_building_has_no_reconcile_line():
    building = FunctionRecord(name="reports", runtime="node24", status=PENDING, updated_at=NOW,
                              handlers=(HandlerRecord("handler.handler", "6s"),))
    text = render_function(building, FunctionStats(), NOW)
    assert text.startswith("Name:              reports\nRuntime:           node24\nStatus:            pending\n\n")
    assert "Last" not in text and "Image" not in text


def test_inspect_a_failed_reconcile_keeps_status_ready():
    failed = FunctionRecord(
        name="user-events-python", runtime="python3.14", status=READY, updated_at=NOW - timedelta(seconds=4),
        image=IMAGE, fingerprint=FINGERPRINT, prepared_at=PREPARED - timedelta(hours=2),
        last_reconcile_at=NOW - timedelta(seconds=4), last_reconcile_status=FAILED,
        last_error="/functions/user-events-python/template.yaml: 1 problem\n"
                   "  runtime: 'python9' is not supported; use one of python3.14, node24",
        handlers=(HandlerRecord("events.created.handler", "6s"),))
    assert render_function(failed, FunctionStats(Counters(3, 3, 0, 0, 0)), NOW) == f"""\
Name:              user-events-python
Runtime:           python3.14
Status:            ready
Image:             {IMAGE}
Fingerprint:       {FINGERPRINT}
Prepared:          2026-09-08T10:00:00Z (2h ago)
Last reconcile:    failed (4s ago)
Last error:        /functions/user-events-python/template.yaml: 1 problem
                     runtime: 'python9' is not supported; use one of python3.14, node24

Events:
  events.created.handler   timeout=6s

Stats:
  Events processed:    3
  Handler successes:   3
  Handler failures:    0
  Retries:             0
  DLQ entries:         0
"""


def test_inspect_with_schedules_environment_and_secrets():
    configured = FunctionRecord(
        name="user-events-python", runtime="python3.14", status=READY, updated_at=PREPARED, image=IMAGE,
        fingerprint=FINGERPRINT, prepared_at=PREPARED, last_reconcile_at=PREPARED, last_reconcile_status=SUCCESS,
        env={"API_URL": "https://api.example.com", "MODE": "a b=c"},
        secrets={"DATABASE_URL": "database-url"},
        handlers=(HandlerRecord("events.created.handler", "6s"),
                  HandlerRecord("jobs.cleanup.handler", "6s", SCHEDULE, "0 3 * * *", "UTC"),
                  HandlerRecord("jobs.report.handler", "20s", SCHEDULE, "0 8 * * 1-5", "Europe/Rome"),
                  HandlerRecord("jobs.tick.handler", "6s", SCHEDULE, "30 */5 * * * *", "UTC")))
    assert render_function(configured, FUNCTION_STATS, NOW) == f"""\
Name:              user-events-python
Runtime:           python3.14
Status:            ready
Image:             {IMAGE}
Fingerprint:       {FINGERPRINT}
Prepared:          2026-09-08T12:00:00Z (12s ago)
Last reconcile:    success (12s ago)

Events:
  events.created.handler   timeout=6s

Schedules:
  jobs.cleanup.handler                  cron="0 3 * * *" (At 03:00) timezone=UTC
  jobs.report.handler                   cron="0 8 * * 1-5" (At 08:00, Monday through Friday) timezone=Europe/Rome \
timeout=20s
  jobs.tick.handler                     cron="30 */5 * * * *" (At 30 seconds past the minute, every 5 minutes) \
timezone=UTC

Stats:
  Events processed:    12493
  Handler successes:   12470
  Handler failures:    23
  Retries:             17
  DLQ entries:         2

Environment:
  API_URL=https://api.example.com
  MODE=a b=c

Secrets:
  DATABASE_URL=database-url
"""


def test_inspect_a_warm_function_shows_its_settings_and_the_containers_running_now():
    warm = FunctionRecord(
        name="user-events-python", runtime="python3.14", status=READY, updated_at=PREPARED, image=IMAGE,
        fingerprint=FINGERPRINT, prepared_at=PREPARED, last_reconcile_at=PREPARED, last_reconcile_status=SUCCESS,
        env={"MODE": "fast"}, handlers=(HandlerRecord("events.created.handler", "6s"),
                                        HandlerRecord("jobs.cleanup.handler", "6s", SCHEDULE, "0 3 * * *", "UTC")),
        warm=WarmRecord(containers=2, max_invocations=1000, idle="10m0s", prestart=False))
    assert render_function(warm, FunctionStats(STATS, warm_containers=1), NOW) == f"""\
Name:              user-events-python
Runtime:           python3.14
Status:            ready
Image:             {IMAGE}
Fingerprint:       {FINGERPRINT}
Prepared:          2026-09-08T12:00:00Z (12s ago)
Last reconcile:    success (12s ago)

Events:
  events.created.handler   timeout=6s

Schedules:
  jobs.cleanup.handler                  cron="0 3 * * *" (At 03:00) timezone=UTC

Warm:
  containers:          2 per worker (running now: 1)
  max_invocations:     1000
  idle:                10m0s
  prestart:            false

Stats:
  Events processed:    12493
  Handler successes:   12470
  Handler failures:    23
  Retries:             17
  DLQ entries:         2

Environment:
  MODE=fast
"""
    prestarted = WarmRecord(containers=1, max_invocations=50, idle="30s", prestart=True)
    text = render_function(replace(warm, warm=prestarted), FunctionStats(), NOW)
    assert "\nWarm:\n  containers:          1 per worker (running now: 0)\n" in text
    assert "  prestart:            true\n\nStats:\n" in text


def test_inspect_a_cold_function_has_no_warm_section():
    assert "Warm" not in render_function(USER_EVENTS, FunctionStats(STATS, warm_containers=3), NOW)


def test_inspect_a_limited_function_shows_its_limits_and_this_worker_s_waits():
    limited = replace(WELCOME, rate_limit="20/s", concurrency_key="new_image.id",
                      warm=WarmRecord(containers=1, max_invocations=1000, idle="10m0s", prestart=False))
    waits = LimitWaits(rate_limit_waits=12, rate_limit_wait_seconds=3.41, concurrency_key_waits=3,
                       concurrency_key_wait_seconds=0.9)
    text = render_function(limited, FunctionStats(STATS, warm_containers=1, waits=waits), NOW)
    assert """
Warm:
  containers:          1 per worker (running now: 1)
  max_invocations:     1000
  idle:                10m0s
  prestart:            false

Limits:
  rate_limit:          20/s (waits: 12, 3.4s in all)
  concurrency_key:     new_image.id (waits: 3, 0.9s in all)

Stats:
""" in text
    only_key = render_function(replace(WELCOME, concurrency_key="id"), FunctionStats(), NOW)
    assert "\nLimits:\n  concurrency_key:     id (waits: 0, 0.0s in all)\n\nStats:\n" in only_key
    only_rate = render_function(replace(WELCOME, rate_limit="5/h"), FunctionStats(), NOW)
    assert "\nLimits:\n  rate_limit:          5/h (waits: 0, 0.0s in all)\n\nStats:\n" in only_rate


def test_inspect_a_function_without_limits_has_no_limits_section():
    assert "Limits" not in render_function(USER_EVENTS, FunctionStats(STATS, waits=LimitWaits(1, 1.0, 1, 1.0)), NOW)


def test_a_cron_without_a_description_is_shown_raw(monkeypatch):
    monkeypatch.setattr(report, "describe_cron", lambda expression: None)
    record = FunctionRecord(name="jobs", runtime="node24", status=PENDING, updated_at=NOW,
                            handlers=(HandlerRecord("jobs.run", "6s", SCHEDULE, "0 3 * * *", "UTC"),))
    assert '  jobs.run                              cron="0 3 * * *" timezone=UTC\n' in render_function(
        record, FunctionStats(), NOW)


def test_cron_descriptions_are_24_hour_and_never_fail():
    assert report.describe_cron("0 15 * * *") == "At 15:00"
    assert report.describe_cron("not a cron") is None
    assert report.describe_cron("") is None


def test_stats_matches_the_reference():
    stats = Stats(Counters(152934, 152801, 133, 82, 4), pending_entries=17, oldest_pending_age_seconds=134.9,
                  updated_at=NOW - timedelta(seconds=10))
    assert render_stats(stats, NOW) == """\
Events processed:    152934
Handler successes:   152801
Handler failures:    133
Retries:             82
DLQ entries:         4
Pending entries:     17
Oldest pending age:  2m14s
Updated:             10s ago
"""


def test_stats_of_a_fresh_database():
    assert render_stats(Stats(), NOW) == """\
Events processed:    0
Handler successes:   0
Handler failures:    0
Retries:             0
DLQ entries:         0
Pending entries:     0
Oldest pending age:  0s
Updated:             never
"""


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s ago"), (12, "12s ago"), (59, "59s ago"), (60, "1m ago"), (3599, "59m ago"), (3600, "1h ago"),
    (86399, "23h ago"), (86400, "1d ago"), (29 * 86400, "29d ago"), (30 * 86400, "2026-08-09"), (-5, "0s ago"),
])
def test_relative_ages(seconds, text):
    assert age(NOW - timedelta(seconds=seconds), NOW) == text


# --- the commands -------------------------------------------------------------------


WARM_WELCOME = replace(WELCOME, warm=WarmRecord(containers=2, max_invocations=1000, idle="10m0s", prestart=True))


def write_database(path, stats=None):
    per_function = {"user-events-python": FUNCTION_STATS, "welcome-email-node": FunctionStats(warm_containers=2)}
    StateDatabase(path).write([WARM_WELCOME, USER_EVENTS], stats, per_function if stats else None)


def test_commands_in_process(tmp_path, capsys):
    path = tmp_path / "db.sqlite3"
    write_database(path, Stats(STATS, 1, 2.0, datetime.now(UTC)))
    assert function_command.run({"ls": True, "<name>": None}, path) == 0
    listing = capsys.readouterr().out
    assert listing.splitlines()[1].startswith("user-events-python    python3.14   ready     3          ")
    assert function_command.run({"ls": False, "<name>": "user-events-python"}, path) == 0
    inspected = capsys.readouterr().out
    assert "  Events processed:    12493\n" in inspected and "Warm:" not in inspected
    assert function_command.run({"ls": False, "<name>": "welcome-email-node"}, path) == 0
    assert "\nWarm:\n  containers:          2 per worker (running now: 2)\n" in capsys.readouterr().out
    assert stats_command.run({}, path) == 0
    assert capsys.readouterr().out.endswith("Updated:             0s ago\n")


def test_inspect_of_an_unknown_function_exits_1(tmp_path, capsys):
    path = tmp_path / "db.sqlite3"
    write_database(path)
    assert function_command.run({"ls": False, "<name>": "nope"}, path) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith('relay function inspect: unknown function "nope"')
    assert "relay function ls" in captured.err and captured.err.count("\n") == 1


def test_a_broken_database_exits_1_with_the_reason(tmp_path, capsys):
    path = tmp_path / "db.sqlite3"
    path.write_bytes(b"garbage" * 1000)
    assert stats_command.run({}, path) == 1
    assert function_command.run({"ls": True, "<name>": None}, path) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("relay stats: cannot read the state database") and "file is not a database" in err[0]
    assert err[1].startswith("relay function ls: cannot read the state database")


@pytest.mark.integration  # runs Relay as a process
def test_the_real_commands_read_the_fixed_path_with_relay_and_redis_down(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    empty = view_command(state, "stats")
    assert empty.returncode == 0 and empty.stderr.count("\n") == 1
    assert empty.stderr.startswith("relay stats: there is no state database at /var/lib/relay/db.sqlite3: Relay "
                                   "has not run on this host")
    assert empty.stdout.endswith("Updated:             never\n") and not (state / "db.sqlite3").exists()

    write_database(state / "db.sqlite3", Stats(STATS, 17, 134.0, datetime.now(UTC)))
    listing = view_command(state, "function", "ls")
    assert listing.returncode == 0, listing.stderr
    assert [line.split()[:4] for line in listing.stdout.splitlines()] == [
        ["NAME", "RUNTIME", "STATUS", "HANDLERS"], ["user-events-python", "python3.14", "ready", "3"],
        ["welcome-email-node", "node24", "ready", "1"]]
    inspect = view_command(state, "function", "inspect", "user-events-python")
    assert inspect.returncode == 0 and f"Fingerprint:       {FINGERPRINT}\n" in inspect.stdout
    stats = view_command(state, "stats")
    assert "Pending entries:     17\nOldest pending age:  2m14s\n" in stats.stdout
    unknown = view_command(state, "function", "inspect", "nope")
    assert unknown.returncode == 1 and unknown.stdout == "" and 'unknown function "nope"' in unknown.stderr


def test_function_ls_counts_event_handlers_only_as_the_reference_does():
    """The reference lists user-events-python (three event handlers, two schedules) with HANDLERS 3."""
    from dataclasses import replace

    from relay.view.records import SCHEDULE

    scheduled = replace(USER_EVENTS, handlers=(*USER_EVENTS.handlers,
                                               HandlerRecord("jobs.nightly.handler", "1m", SCHEDULE, "0 2 * * *"),
                                               HandlerRecord("jobs.hourly.handler", "1m", SCHEDULE, "0 * * * *")))
    assert render_function_list([scheduled], NOW).splitlines()[1].split()[3] == "3"


def test_without_a_database_the_reports_are_empty_and_one_line_says_why(tmp_path, capsys):
    path = tmp_path / "db.sqlite3"
    assert function_command.run({"ls": True, "<name>": None}, path) == 0
    assert stats_command.run({}, path) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("NAME                  RUNTIME      STATUS    HANDLERS   UPDATED\n")
    assert captured.out.endswith("Updated:             never\n")
    assert captured.err.splitlines() == [
        f"relay function ls: there is no state database at {path}: Relay has not run on this host, or it runs in "
        f"a container (run the command there)",
        f"relay stats: there is no state database at {path}: Relay has not run on this host, or it runs in "
        f"a container (run the command there)"]


@pytest.mark.parametrize("user, named", [("nobody", "nobody"), ("4243", "uid 4243")])
@pytest.mark.parametrize("command", ["stats", "function ls", "function inspect x"])
def test_a_database_this_user_may_not_read_is_one_line_not_a_traceback(tmp_path, command, user, named):
    """As on the shipped unit: DynamicUser, StateDirectoryMode=0700, an operator who is not root; the user
    is named by uid, whatever $USER says, and a uid with no name (a DynamicUser's, seen from outside) works."""
    import subprocess
    import sys

    state = tmp_path / "state"
    state.mkdir()
    write_database(state / "db.sqlite3")
    state.chmod(0o700)
    tmp_path.chmod(0o755)
    words = command.split()
    args = ({} if words[0] == "stats" else {"ls": words[1] == "ls", "<name>": words[2] if len(words) > 2 else None})
    probe = (f"import sys; from relay.commands import {words[0]} as c; "
             f"sys.exit(c.run({args!r}, {str(state / 'db.sqlite3')!r}))")
    environment = {"PATH": os.environ["PATH"], "USER": "root", "LOGNAME": "root"}
    result = subprocess.run(["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups", sys.executable,
                             "-c", probe], cwd=Path(__file__).resolve().parent.parent, capture_output=True,
                            text=True, timeout=60, env=environment)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (f"relay {' '.join(words[:2]) if words[0] == 'function' else 'stats'}: the state "
                             f"database {state / 'db.sqlite3'} is not readable by user {named}: read it as root "
                             f"(sudo relay ...), or as a member of the group that owns {state}\n")


def test_json_forms_have_the_documented_shape(tmp_path, capsys):
    import json

    path = tmp_path / "db.sqlite3"
    write_database(path, Stats(STATS, 1, 2.0, datetime(2026, 9, 8, 12, 0, 0, tzinfo=UTC)))
    assert function_command.run({"ls": True, "<name>": None, "--json": True}, path) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing[0] == {"name": "user-events-python", "runtime": "python3.14", "status": "ready", "handlers": 3,
                          "schedules": 0, "updated_at": "2026-09-08T12:00:00Z"}
    assert [item["name"] for item in listing] == ["user-events-python", "welcome-email-node"]
    assert function_command.run({"ls": False, "<name>": "welcome-email-node", "--json": True}, path, {}) == 0
    inspected = json.loads(capsys.readouterr().out)
    assert inspected["warm"] == {"containers": 2, "max_invocations": 1000, "idle": "10m0s", "prestart": True,
                                 "running": 2}
    assert inspected["events"] == [{"handler": "handler.handler", "timeout": "6s"}]
    assert inspected["rate_limit"] is None and inspected["concurrency_key"] is None
    assert set(inspected) == {"name", "runtime", "status", "image", "fingerprint", "prepared_at",
                              "last_reconcile_at", "last_reconcile_status", "last_error", "env", "secrets",
                              "events", "schedules", "warm", "rate_limit", "concurrency_key", "counters",
                              "runs", "runs_unavailable"}
    assert inspected["runs"] is None
    assert inspected["runs_unavailable"].startswith("REDIS_URI and REDIS_STREAM are not set")
    StateDatabase(path).write([replace(WELCOME, rate_limit="20/s", concurrency_key="new_image.id")],
                              Stats(STATS, updated_at=NOW),
                              {"welcome-email-node": FunctionStats(waits=LimitWaits(12, 3.5, 3, 0.25))})
    assert function_command.run({"ls": False, "<name>": "welcome-email-node", "--json": True}, path) == 0
    limited = json.loads(capsys.readouterr().out)
    assert limited["rate_limit"] == {"rate": "20/s", "waits": 12, "wait_seconds": 3.5}
    assert limited["concurrency_key"] == {"field": "new_image.id", "waits": 3, "wait_seconds": 0.25}
    write_database(path, Stats(STATS, 1, 2.0, datetime(2026, 9, 8, 12, 0, 0, tzinfo=UTC)))
    assert stats_command.run({"--json": True}, path) == 0
    assert json.loads(capsys.readouterr().out) == {
        "events_processed": 12493, "handler_successes": 12470, "handler_failures": 23, "retries": 17,
        "dlq_entries": 2, "pending_entries": 1, "oldest_pending_age_seconds": 2.0,
        "updated_at": "2026-09-08T12:00:00Z"}
