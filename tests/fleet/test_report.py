"""The summary table and its sections in docs/fleet.md: the cold and the Sentinel runs have their own."""

from pathlib import Path

from tests.fleet.duplicates import Duplicate, Execution
from tests.fleet.faults import Failover, FaultWindow
from tests.fleet.report import (
    BEGIN,
    COLD_BEGIN,
    COLD_END,
    END,
    SENTINEL_BEGIN,
    SENTINEL_END,
    duplicates_by_run,
    summary_table,
    write_section,
)
from tests.fleet.run import RunReport
from tests.fleet.verdict import Verdict


def _report(retried_adds=0, verdict=None, **options):
    return RunReport(verdict=verdict or Verdict(events=600), seconds=480.0, drain_seconds=300.0, faults=[],
                     exit_codes={}, restarts=2, exits=0, retried_adds=retried_adds, error_lines=0,
                     run_dir=Path("run"), **options)


def _row(table):
    lines = table.splitlines()
    return dict(zip(lines[0].strip("| ").split(" | "), lines[2].strip("| ").split(" | "), strict=True))


def test_a_sentinel_run_shows_its_failovers_and_re_adds():
    plain = summary_table([_report()])
    assert "Failovers" not in plain and plain.splitlines()[2].startswith("| 1 | 600 |")
    failovers = [Failover("redis-0", "redis-1", 3.2, 20.1), Failover("redis-1", "redis-0", 3.4, 19.8)]
    row = _row(summary_table([_report(40, sentinel=True, failovers=failovers, unconfirmed_adds=12)]))
    assert (row["Re-adds (WAIT 0)"], row["Failovers: kill → promoted"], row["Rejoined as replica"]) == (
        "40 (12)", "3.2s / 3.4s", "20.1s / 19.8s")
    assert (row["Events"], row["Lost"], row["Verdict"]) == ("600", "0", "passed")


def test_the_sentinel_runs_write_their_own_section(tmp_path):
    path = tmp_path / "fleet.md"
    path.write_text(f"a\n{BEGIN}\nplain\n{END}\nb\n{SENTINEL_BEGIN}\nold\n{SENTINEL_END}\nc\n")
    write_section(path, "| sentinel |", "python -m tests.fleet --sentinel", mode="sentinel")
    text = path.read_text()
    assert f"{BEGIN}\nplain\n{END}" in text and "old" not in text
    assert text.split(SENTINEL_BEGIN)[1].startswith("\n| sentinel |\n")
    write_section(path, "| plain |", "python -m tests.fleet")
    assert "| sentinel |" in path.read_text() and "\nplain\n" not in path.read_text()


def test_the_cold_runs_write_their_own_section(tmp_path):
    path = tmp_path / "fleet.md"
    path.write_text(f"{BEGIN}\nwarm\n{END}\n{COLD_BEGIN}\nstale\n{COLD_END}\n{SENTINEL_BEGIN}\nsentinel\n{SENTINEL_END}\n")
    write_section(path, "| cold |", "python -m tests.fleet --cold", mode="cold")
    text = path.read_text()
    assert text.split(COLD_BEGIN)[1].startswith("\n| cold |\n") and "stale" not in text
    assert f"{BEGIN}\nwarm\n{END}" in text and f"{SENTINEL_BEGIN}\nsentinel\n{SENTINEL_END}" in text


def test_duplicates_show_as_a_share_of_executions_and_by_the_fault_they_met():
    window = FaultWindow("Redis SIGKILL + restart (AOF)", 1105.0, 1108.0, 104.6)
    first, again = Execution("1-0", "fleet-py", "ok", 1106.0, "fleet-a"), Execution("1-0", "fleet-py", "ok", 1170.0)
    account = [Duplicate(first, again, window.label)] * 2 + [Duplicate(first, again, "no fault")]
    verdict = Verdict(events=600, executions=1700, duplicates=3, duplicate_account=account)
    report = _report(verdict=verdict, fault_windows=[window])
    assert _row(summary_table([report]))["Duplicates (% of executions)"] == "3 (0.18 %)"
    assert _row(summary_table([_report()]))["Duplicates (% of executions)"] == "0 (0.00 %)"
    assert duplicates_by_run([report, _report()]) == (
        "- Run 1, duplicates by fault: Redis SIGKILL + restart (AOF) at 105s: 2, no fault: 1\n"
        "- Run 2: no duplicates")
