"""The summary table and its sections in docs/fleet.md: the Sentinel runs have their own."""

from pathlib import Path

from tests.fleet.faults import Failover
from tests.fleet.report import BEGIN, END, SENTINEL_BEGIN, SENTINEL_END, summary_table, write_section
from tests.fleet.run import RunReport
from tests.fleet.verdict import Verdict


def _report(retried_adds=0, **options):
    return RunReport(verdict=Verdict(events=600), seconds=480.0, drain_seconds=300.0, faults=[], exit_codes={},
                     restarts=2, exits=0, retried_adds=retried_adds, error_lines=0, run_dir=Path("run"), **options)


def test_a_sentinel_run_shows_its_failovers_and_re_adds():
    plain = summary_table([_report()])
    assert "Failovers" not in plain and plain.splitlines()[2].startswith("| 1 | 600 |")
    failovers = [Failover("redis-0", "redis-1", 3.2, 20.1), Failover("redis-1", "redis-0", 3.4, 19.8)]
    table = summary_table([_report(40, sentinel=True, failovers=failovers, unconfirmed_adds=12)]).splitlines()
    row = dict(zip(table[0].strip("| ").split(" | "), table[2].strip("| ").split(" | "), strict=True))
    assert (row["Re-adds (WAIT 0)"], row["Failovers: kill → promoted"], row["Rejoined as replica"]) == (
        "40 (12)", "3.2s / 3.4s", "20.1s / 19.8s")
    assert (row["Events"], row["Lost"], row["Verdict"]) == ("600", "0", "passed")


def test_the_sentinel_runs_write_their_own_section(tmp_path):
    path = tmp_path / "fleet.md"
    path.write_text(f"a\n{BEGIN}\nplain\n{END}\nb\n{SENTINEL_BEGIN}\nold\n{SENTINEL_END}\nc\n")
    write_section(path, "| sentinel |", "python -m tests.fleet --sentinel", sentinel=True)
    text = path.read_text()
    assert f"{BEGIN}\nplain\n{END}" in text and "old" not in text
    assert text.split(SENTINEL_BEGIN)[1].startswith("\n| sentinel |\n")
    write_section(path, "| plain |", "python -m tests.fleet")
    assert "| sentinel |" in path.read_text() and "\nplain\n" not in path.read_text()
