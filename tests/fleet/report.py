"""The fleet's summary table, and its place in docs/fleet.md."""

import os
import platform
import re
import time
from pathlib import Path

BEGIN = "<!-- fleet-summary:begin -->"
END = "<!-- fleet-summary:end -->"
COLUMNS = ("Run", "Events", "Entries", "Malformed", "Executions", "Duplicates", "Producer dup.",
           "DLQ (expected)", "Lost", "Worker restarts (exits)", "Rated starts: most in 1s / 10s",
           "Keyed: most per account at once", "Drain", "Total", "Verdict")


def summary_table(reports):
    rows = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for number, report in enumerate(reports, 1):
        verdict = report.verdict
        cells = (number, verdict.events, verdict.entries, verdict.malformed, verdict.executions,
                 verdict.duplicates, verdict.producer_duplicates, f"{verdict.dlq} ({verdict.dlq_expected})",
                 verdict.lost, f"{report.restarts} ({report.exits})",
                 f"{verdict.rate_max.get(1.0, 0)} / {verdict.rate_max.get(10.0, 0)}",
                 f"{verdict.key_concurrency}", f"{report.drain_seconds:.0f}s",
                 f"{report.seconds:.0f}s",
                 "passed" if verdict.passed else f"FAILED ({len(verdict.problems)})")
        rows.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(rows)


def machine():
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    return f"{cpu}, {os.cpu_count()} cores, Linux {platform.release()}"


def write_section(path, table, command):
    text = Path(path).read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path} has no {BEGIN} … {END} section to replace")
    section = (f"{BEGIN}\n{table}\n\nMachine: {machine()}. Date: {time.strftime('%Y-%m-%d')}. "
               f"Command: `{command}`.\n{END}")
    Path(path).write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: section, text, flags=re.S))
