"""``relay stats``: the latest operational statistics, from the state database."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from relay.view import json_report
from relay.view.database import DB_PATH
from relay.view.reader import StateReader
from relay.view.report import now, print_report, render_stats

if TYPE_CHECKING:
    from relay.commands import Arguments
    from relay.view.records import Stats


def run(args: Arguments, path: str | os.PathLike[str] | None = None) -> int:
    """Run ``relay stats``; return the exit code."""
    reader = StateReader(path or DB_PATH)
    render: Callable[[Stats], str] = (
        json_report.stats if args.get("--json") else (lambda snapshot: render_stats(snapshot, now())))
    return print_report("relay stats", lambda: render(reader.stats()), reader)
