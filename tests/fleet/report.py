"""The fleet's summary table, and its place in docs/fleet.md."""

import os
import platform
import re
import time
from pathlib import Path

BEGIN = "<!-- fleet-summary:begin -->"
END = "<!-- fleet-summary:end -->"
SENTINEL_BEGIN = "<!-- fleet-sentinel-summary:begin -->"
SENTINEL_END = "<!-- fleet-sentinel-summary:end -->"
COLUMNS = ("Run", "Events", "Entries", "Malformed", "Executions", "Duplicates", "Producer dup.",
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
                 verdict.duplicates, verdict.producer_duplicates,
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


def machine():
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    return f"{cpu}, {os.cpu_count()} cores, Linux {platform.release()}"


def write_section(path, table, command, sentinel=False):
    """Replace the summary section of *path* (under Sentinel, the Sentinel runs' own section)."""
    begin, end = (SENTINEL_BEGIN, SENTINEL_END) if sentinel else (BEGIN, END)
    text = Path(path).read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"{path} has no {begin} … {end} section to replace")
    section = (f"{begin}\n{table}\n\nMachine: {machine()}. Date: {time.strftime('%Y-%m-%d')}. "
               f"Command: `{command}`.\n{end}")
    Path(path).write_text(re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: section, text, flags=re.S))
