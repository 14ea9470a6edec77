"""What ``relay runs`` and inspect's "Last runs" print of the ledger's records: golden text, no Redis."""

from dataclasses import replace

import pytest

from relay.errors import RunsError
from relay.runs import report
from relay.runs.reader import OUTCOMES, RunFilter, checked_id, parse_outcomes
from relay.runs.record import Run, RunStatus, Settled
from relay.runs.report import LastRuns, duration, entry_report, function_runs, outcome, run_line, run_table

T = 1796601600000   # 2026-12-07T00:00:00Z
ENTRY = f"{T - 200}-0"
FAILED = Run(run_id=f"{T + 1500}-0", entry=ENTRY, event_id="evt_1", function="orders", handler="app.handler",
             rule="orders/app.handler", attempt=1, key="9f" * 16, host="worker-a", pid=4242, mode="cold",
             container="3f2a9c1b", started_ms=T, duration_ms=1234.5678, status=RunStatus.FAILED, exit_code=1,
             error="exited with code 1", stdout="starting\n", stderr="Traceback (most recent call last):\n"
             "ValueError: bad\n", settled=Settled.RETRY_DUE, retry_at_ms=T + 11500)
TIMED_OUT = Run(run_id=f"{T + 20000}-0", entry=ENTRY, event_id="evt_1", function="orders", handler="app.handler",
                rule="orders/app.handler", attempt=2, key="9f" * 16, host="worker-b", pid=77, mode="warm",
                container="77aa", started_ms=T + 14000, duration_ms=6000.2, status=RunStatus.TIMED_OUT,
                stderr="slow\n", settled=Settled.DEAD_LETTERED, reason="attempts exhausted for orders/app.handler")
SETTLEMENT = Run(kind="settlement", run_id=f"{T + 30000}-1", entry=f"{T + 29000}-0", function="users",
                 handler="a.h", host="worker-c", pid=9, settled=Settled.ACKNOWLEDGED)
HOSTILE = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202e\x7f\r\n\x00"   # title, clear screen, C1 CSI, bidi, DEL, CR LF


def test_ls_is_one_aligned_line_a_record_under_a_header():
    """Its time is when the record was written (the lists' order, and what --since selects by)."""
    assert run_table([SETTLEMENT, TIMED_OUT, FAILED]) == """\
TIME                  FUNCTION            ATTEMPT  OUTCOME                   DURATION  WORKER         ENTRY
2026-12-07T00:00:30Z  users/a.h           -        acknowledged              -         worker-c/9     1796601629000-0
2026-12-07T00:00:20Z  orders/app.handler  2        timed out, dead-lettered  6.00s     worker-b/77    1796601599800-0
2026-12-07T00:00:01Z  orders/app.handler  1        failed, retry due         1.23s     worker-a/4242  1796601599800-0
"""


def test_ls_of_nothing_is_the_header():
    assert run_table([]) == "TIME  FUNCTION  ATTEMPT  OUTCOME  DURATION  WORKER  ENTRY\n"


def test_follow_lines_have_fixed_minimum_columns():
    assert run_line(TIMED_OUT) == ("2026-12-07T00:00:20Z  orders/app.handler                2        "
                                   "timed out, dead-lettered  6.00s      worker-b/77           1796601599800-0")


def test_show_prints_the_entry_then_every_record_with_both_tails():
    assert entry_report(ENTRY, [FAILED, TIMED_OUT], chosen=TIMED_OUT.run_id) == """\
Entry:           1796601599800-0
Event ID:        evt_1
Settled:         dead-lettered: attempts exhausted for orders/app.handler (recorded 2026-12-07T00:00:20Z)
Runs:            2 attempts

Run 1796601601500-0
  Function:        orders/app.handler
  Attempt:         1
  Outcome:         failed (exit code 1)
  Started:         2026-12-07T00:00:00Z
  Duration:        1.23s
  Worker:          worker-a/4242, cold, container 3f2a9c1b
  Idempotency key: 9f9f9f9f9f9f9f9f9f9f9f9f9f9f9f9f
  Error:           exited with code 1
  Settled:         retry due at 2026-12-07T00:00:11Z
  Stdout (last 4 KiB):
    starting
  Stderr (last 4 KiB):
    Traceback (most recent call last):
    ValueError: bad

Run 1796601620000-0 (the run asked for)
  Function:        orders/app.handler
  Attempt:         2
  Outcome:         timed out
  Started:         2026-12-07T00:00:14Z
  Duration:        6.00s
  Worker:          worker-b/77, warm, container 77aa
  Idempotency key: 9f9f9f9f9f9f9f9f9f9f9f9f9f9f9f9f
  Settled:         dead-lettered: attempts exhausted for orders/app.handler
  Stdout: (empty)
  Stderr (last 4 KiB):
    slow
"""


def test_show_of_a_settlement_and_of_an_entry_nothing_settled_yet():
    text = entry_report(SETTLEMENT.entry, [SETTLEMENT])
    assert "Settled:         acknowledged (recorded 2026-12-07T00:00:30Z)\nRuns:            0 attempts\n" in text
    assert ("\nSettlement 1796601630000-1\n  Function:        users/a.h\n"
            "  Recorded:        2026-12-07T00:00:30Z\n") in text
    assert "Stdout" not in text
    pending = entry_report(ENTRY, [replace(FAILED, settled=None)])
    assert "Settled:         not yet recorded\nRuns:            1 attempt\n" in pending


def test_a_replayed_entry_names_what_it_replays():
    assert "\nReplay of:       1700000000000-0\n" in entry_report(ENTRY, [replace(FAILED, replay_of="1700000000000-0")])


def test_inspect_lists_the_last_runs_or_says_in_one_line_why_not():
    assert function_runs(LastRuns((TIMED_OUT, FAILED), ledger="relay:events:runs")) == [
        "TIME                  HANDLER      ATTEMPT  OUTCOME                   DURATION  ENTRY",
        "2026-12-07T00:00:20Z  app.handler  2        timed out, dead-lettered  6.00s     1796601599800-0",
        "2026-12-07T00:00:01Z  app.handler  1        failed, retry due         1.23s     1796601599800-0"]
    assert function_runs(LastRuns(ledger="relay:events:runs")) == ["none in the run ledger (relay:events:runs)"]
    assert function_runs(LastRuns(missing="REDIS_URI is not set")) == ["not shown: REDIS_URI is not set"]


def test_inspect_renders_the_section_last_and_only_when_asked():
    from datetime import UTC, datetime

    from relay.view.records import FunctionStats
    from relay.view.report import render_function
    from tests.test_views import USER_EVENTS

    now = datetime(2026, 12, 7, 0, 1, tzinfo=UTC)
    plain = render_function(USER_EVENTS, FunctionStats(), now)
    assert "Last runs" not in plain
    shown = render_function(USER_EVENTS, FunctionStats(), now, LastRuns(missing="Redis at x is unreachable"))
    assert shown == plain + "\nLast runs:\n  not shown: Redis at x is unreachable\n"


@pytest.mark.parametrize(("milliseconds", "text"), [
    (None, "-"), (0.0, "0.0ms"), (12.345, "12.3ms"), (999.96, "1.00s"), (1234.5, "1.23s"), (59_994.0, "59.99s"),
    (59_996.0, "1m0s"), (61_234.5, "1m1.2s"), (7_200_001.0, "2h0m0s")])
def test_durations(milliseconds, text):
    assert duration(milliseconds) == text


def test_outcomes_name_the_settlement_only_when_it_is_news():
    assert outcome(replace(FAILED, settled=Settled.PENDING)) == "failed"
    assert outcome(replace(FAILED, status=None, status_text="exploded")) == "exploded, retry due"
    assert outcome(replace(FAILED, status=None, status_text="", settled=None)) == "-"
    assert outcome(replace(SETTLEMENT, settled=Settled.DEAD_LETTERED)) == "dead-lettered"


def test_every_field_a_writer_wrote_is_escaped_and_a_cell_is_cut():
    hostile = Run(run_id=f"{T}-0", entry=f"1-0{HOSTILE}", event_id=f"evt{HOSTILE}", function=f"orders{HOSTILE}",
                  handler="h" * 500, host=f"host{HOSTILE}", pid=1, mode=HOSTILE, container=HOSTILE,
                  started_ms=10 ** 17, status=None, status_text=f"odd{HOSTILE}", error=f"bad{HOSTILE}",
                  stdout=f"out{HOSTILE}\nline 2", stderr=HOSTILE, settled=Settled.DEAD_LETTERED,
                  reason=f"why{HOSTILE}", key=HOSTILE, rule=HOSTILE, replay_of=HOSTILE)
    texts = [run_table([hostile]), run_line(hostile), entry_report(hostile.entry, [hostile], chosen=hostile.run_id),
             "\n".join(function_runs(LastRuns((hostile,))))]
    for text in texts:
        assert all(line.isprintable() for line in text.split("\n")), text
    table = run_table([hostile]).splitlines()[1]
    assert table.startswith("2026-12-07T00:00:00Z  ")
    assert "\n  Started:         -\n" in texts[2]   # a start past the year 9999 is no time
    assert "orders\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\u202e\\x7f\\r\\n\\x00" in table
    assert "/hh...  " in table and "hhh" not in table   # the 500-character handler, cut
    assert len(table) <= 7 * (report.CELL_CHARS + 2) + len(", dead-lettered")   # no cell is longer
    shown = texts[2]
    assert "    out\\x1b]0;owned" in shown and "\n    line 2\n" in shown
    assert "Outcome:         odd\\x1b]0;owned" in shown


def test_status_filters_take_the_outcomes_as_a_person_writes_them():
    assert parse_outcomes("timed-out") == ("timed out",)
    assert parse_outcomes("Timed Out, not_started,failed,failed") == ("timed out", "not started", "failed")
    assert parse_outcomes("dead-lettered") == ("dead-lettered",)
    assert OUTCOMES == ("succeeded", "failed", "timed-out", "killed", "not-started", "expired", "dead-lettered")
    with pytest.raises(RunsError, match=r"^--status='oops' is not a run outcome; use one of succeeded, failed, "
                                        r"timed-out, killed, not-started, expired, dead-lettered"):
        parse_outcomes("oops")


def test_filters_become_a_range_of_ids_and_fields():
    assert (RunFilter().low(), RunFilter().high()) == ("-", "+")
    assert RunFilter(since_ms=5000, until_ms=9000).low() == "5000-0"
    assert RunFilter(until_ms=9000).high() == f"9000-{2 ** 64 - 1}"
    assert RunFilter(entry="100000-3").low() == "40000-0"              # a minute of skew before the entry
    assert RunFilter(entry="100000-3", since_ms=70000).low() == "70000-0"
    assert RunFilter(entry="10-0").low() == "0-0"
    assert RunFilter(function="f", handler="h", event_id="e", entry="1-0").required() == [
        ("function", "f"), ("handler", "h"), ("event_id", "e"), ("entry", "1-0")]
    assert RunFilter(outcomes=("failed", "dead-lettered")).either() == [("status", "failed"),
                                                                         ("settled", "dead-lettered")]


@pytest.mark.parametrize("text", ["bogus", "1-", "-1", "1-0-0", "01x-0", f"{2 ** 64}-0", "1-0\n", "\u0661-0"])
def test_an_id_that_is_no_stream_id_is_refused(text):
    with pytest.raises(RunsError, match="is not a run id"):
        checked_id(text, "a run id")


def test_show_gives_a_container_id_as_docker_ps_does():
    container = "b99eb8a9e845932a9a05a710ee510537819769aa22881d58dcd6e2da6b72d07f"
    text = entry_report("1-0", [Run(run_id="2-0", entry="1-0", function="f", handler="h", attempt=1, host="w", pid=1,
                                    mode="cold", container=container, status=RunStatus.SUCCEEDED)])
    assert "Worker:          w/1, cold, container b99eb8a9e845\n" in text
