"""The fleet's summary table, and its place in docs/fleet.md: each mode (plain, cold, Sentinel) has its own."""

import os
import platform
import re
import time
from pathlib import Path

from tests.fleet.duplicates import by_fault

BEGIN = "<!-- fleet-summary:begin -->"
END = "<!-- fleet-summary:end -->"
COLD_BEGIN = "<!-- fleet-cold-summary:begin -->"
COLD_END = "<!-- fleet-cold-summary:end -->"
SENTINEL_BEGIN = "<!-- fleet-sentinel-summary:begin -->"
SENTINEL_END = "<!-- fleet-sentinel-summary:end -->"
SECTIONS = {"plain": (BEGIN, END), "cold": (COLD_BEGIN, COLD_END), "sentinel": (SENTINEL_BEGIN, SENTINEL_END)}
COLUMNS = ("Run", "Events", "Entries", "Malformed", "Executions", "Duplicates (% of executions)", "Producer dup.",
           "Runs on record (unrecorded)", "DLQ (expected)", "Lost", "Worker restarts (exits)",
           "Rated starts: most in 1s / 10s", "Keyed: most per account at once", "Drain", "Total", "Verdict")
SENTINEL_COLUMNS = (*COLUMNS[:8], "Re-adds (WAIT 0)", "Failovers: kill → promoted", "Rejoined as replica",
                    *COLUMNS[8:])


def summary_table(reports):
    sentinel = any(report.sentinel for report in reports)
    columns = SENTINEL_COLUMNS if sentinel else COLUMNS
    rows = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for number, report in enumerate(reports, 1):
        verdict = report.verdict
        cells = [number, verdict.events, verdict.entries, verdict.malformed, verdict.executions,
                 f"{verdict.duplicates} ({verdict.duplicate_share:.2f} %)", verdict.producer_duplicates,
                 f"{verdict.runs_recorded} ({verdict.runs_unrecorded})", f"{verdict.dlq} ({verdict.dlq_expected})",
                 verdict.lost, f"{report.restarts} ({report.exits})",
                 f"{verdict.rate_max.get(1.0, 0)} / {verdict.rate_max.get(10.0, 0)}",
                 f"{verdict.key_concurrency}", f"{report.drain_seconds:.0f}s",
                 f"{report.seconds:.0f}s",
                 "passed" if verdict.passed else f"FAILED ({len(verdict.problems)})"]
        if sentinel:
            cells[8:8] = [f"{report.retried_adds} ({report.unconfirmed_adds})",
                          " / ".join(f"{failover.seconds:.1f}s" for failover in report.failovers) or "none",
                          " / ".join(f"{failover.rejoined:.1f}s" for failover in report.failovers) or "none"]
        rows.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(rows)


def duplicates_line(number, report):
    """"Run 1, duplicates by fault: SIGKILL a worker fleet-b at 27s: 3, no fault: 0", or "Run 2: no duplicates"."""
    if not report.verdict.duplicate_account:
        return f"Run {number}: no duplicates"
    return f"Run {number}, duplicates by fault: {by_fault(report.verdict.duplicate_account, report.fault_windows)}"


def duplicates_by_run(reports):
    """One duplicates_line per run, as a markdown list to go under the table."""
    return "\n".join(f"- {duplicates_line(number, report)}" for number, report in enumerate(reports, 1))


def machine():
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    return f"{cpu}, {os.cpu_count()} cores, Linux {platform.release()}"


def write_section(path, text, command, mode="plain"):
    """Replace the summary section of *path* of the runs' *mode* ("plain", "cold" or "sentinel")."""
    begin, end = SECTIONS[mode]
    document = Path(path).read_text()
    if begin not in document or end not in document:
        raise SystemExit(f"{path} has no {begin} … {end} section to replace")
    section = (f"{begin}\n{text}\n\nMachine: {machine()}. Date: {time.strftime('%Y-%m-%d')}. "
               f"Command: `{command}`.\n{end}")
    Path(path).write_text(re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: section, document,
                                 flags=re.S))
