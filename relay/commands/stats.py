"""``relay stats``: the latest operational statistics, from the state database."""

from relay.view import json_report
from relay.view.database import DB_PATH, StateReader
from relay.view.report import now, print_report, render_stats


def run(args, path=None):
    """Run ``relay stats``; return the exit code."""
    reader = StateReader(path or DB_PATH)
    render = json_report.stats if args.get("--json") else (lambda snapshot: render_stats(snapshot, now()))
    return print_report("relay stats", lambda: render(reader.stats()), reader)
