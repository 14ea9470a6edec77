"""``relay function ls`` and ``relay function inspect <name>``: the loaded functions, from the state database.

They read the state database file, so they work while Relay or Redis is
down. ``inspect`` also shows the function's last runs from the run ledger
(relay.runs) when REDIS_URI and REDIS_STREAM are set, in the environment or
the service's environment file; when they are not, or Redis does not
answer, it says so in one line where the runs would be and shows the rest.
Redis is imported only then, so the state views stay light.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from relay.errors import RelayError, UnknownFunction
from relay.runs.report import LastRuns
from relay.view import json_report
from relay.view.database import DB_PATH
from relay.view.reader import StateReader
from relay.view.report import now, print_report, render_function, render_function_list

if TYPE_CHECKING:
    from relay.commands import Arguments
    from relay.view.records import FunctionRecord


LAST_RUNS = 10


def run(args: Arguments, path: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None) -> int:
    """Run ``relay function ls | inspect <name>`` from docopt's *args*; return the exit code.

    *environ* is where inspect finds REDIS_URI and REDIS_STREAM (default: the
    environment, then the service's environment file).
    """
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
        runs = last_runs(name, args.get("--env-file"), environ)
        return json_report.function(record, stats, runs) if as_json else render_function(record, stats, now(), runs)

    return print_report(command, inspect)


def last_runs(name: str, env_file: str | None, environ: Mapping[str, str] | None = None) -> LastRuns:
    """The last LAST_RUNS runs of function *name* from the ledger, or why they cannot be read."""
    try:
        if environ is None:
            from relay.envfile import command_environment

            environ = command_environment(env_file, os.environ)
        unset = [variable for variable in ("REDIS_URI", "REDIS_STREAM") if not environ.get(variable, "").strip()]
        if unset:
            return LastRuns(missing=f"{' and '.join(unset)} {'is' if len(unset) == 1 else 'are'} not set (in the "
                                    "environment or the service's environment file; --env-file names another)")
        return _read_runs(name, environ)
    except RelayError as error:
        return LastRuns(missing=str(error))


def _read_runs(name: str, environ: Mapping[str, str]) -> LastRuns:
    import redis

    from relay.commands import connect_stream
    from relay.runs.reader import RunFilter, Runs

    client, stream = connect_stream(environ)
    try:
        runs = Runs(client, stream)
        return LastRuns(tuple(runs.newest(RunFilter(function=name), LAST_RUNS)), ledger=runs.key)
    except redis.RedisError as error:
        return LastRuns(missing=f"Redis failed: {error}")
    finally:
        client.close()
