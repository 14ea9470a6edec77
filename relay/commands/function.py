"""``relay function ls`` and ``relay function inspect <name>``: the loaded functions, from the state database.

They read the state database file and nothing else, so they work while
Relay or Redis is down.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from relay.errors import UnknownFunction
from relay.view import json_report
from relay.view.database import DB_PATH
from relay.view.reader import StateReader
from relay.view.report import now, print_report, render_function, render_function_list

if TYPE_CHECKING:
    from relay.commands import Arguments
    from relay.view.records import FunctionRecord


def run(args: Arguments, path: str | os.PathLike[str] | None = None) -> int:
    """Run ``relay function ls | inspect <name>`` from docopt's *args*; return the exit code."""
    reader = StateReader(path or DB_PATH)
    as_json = args.get("--json")
    if args["ls"]:
        render: Callable[[Sequence[FunctionRecord]], str] = (
            json_report.function_list if as_json else (lambda records: render_function_list(records, now())))
        return print_report("relay function ls", lambda: render(reader.functions()), reader)
    name = args["<name>"]
    command = "relay function inspect"

    def inspect() -> str:
        record = reader.function(name)
        if record is None:
            raise UnknownFunction(f'{command}: unknown function "{name}": Relay has not loaded it '
                                  f"(state database {reader.path}; 'relay function ls' lists the loaded functions)")
        stats = reader.function_stats(name)
        return json_report.function(record, stats) if as_json else render_function(record, stats, now())

    return print_report(command, inspect)
