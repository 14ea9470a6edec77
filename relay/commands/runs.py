"""``relay runs ls | show | follow``: the run ledger, for an operator.

They read REDIS_URI and REDIS_STREAM (the ledger is ``relay:<REDIS_STREAM>:runs``)
from the environment, or from the service's environment file
(relay.envfile), and need neither Docker nor gevent. Any problem -- a bad
time or outcome, Redis unreachable, an id that is in no record -- is one
line on stderr and exit status 1.

Every field of a record is whatever a worker, a handler or anyone who can
write to Redis put there: the human output shows each through
relay.runs.report, which escapes what a terminal could act on. ``--json``
is JSON's own (Run.to_json): one object a line for ls and follow, one
object for show.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

from relay.errors import RelayError, RunsError
from relay.quoting import printable
from relay.runs import report
from relay.runs.reader import RunFilter, checked_id, parse_outcomes
from relay.runs.times import parse_time

if TYPE_CHECKING:
    from relay.commands import Arguments
    from relay.runs.reader import Runs
    from relay.runs.record import Run

DEFAULT_LIMIT = 20


def run(args: Arguments, environ: Mapping[str, str] | None = None, stdout: TextIO | None = None) -> int:
    """Run one ``relay runs`` command from docopt's *args*; return the exit code."""
    import redis

    stdout = sys.stdout if stdout is None else stdout
    command = next(word for word in ("ls", "show", "follow") if args[word])
    try:
        filters = _filters(args) if command != "show" else RunFilter()
        if command == "show":
            checked_id(args["<id>"], "a run id or an entry id")
        if environ is None:
            from relay.envfile import command_environment

            environ = command_environment(args["--env-file"], os.environ)
        runs = _connect(environ)
        if command == "ls":
            return _ls(runs, filters, _limit(args["--limit"]), bool(args["--json"]), stdout)
        if command == "show":
            return _show(runs, args["<id>"], bool(args["--json"]), stdout)
        return _follow(runs, filters, bool(args["--json"]), stdout)
    except RelayError as error:
        print(f"relay runs {command}: {error}", file=sys.stderr)
        return 1
    except redis.RedisError as error:
        print(f"relay runs {command}: Redis failed: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if command == "follow":   # how follow ends
            return 0
        print(f"\nrelay runs {command}: interrupted", file=sys.stderr)
        return 130


def _connect(environ: Mapping[str, str]) -> Runs:
    from relay.commands import connect_stream
    from relay.runs.reader import Runs

    return Runs(*connect_stream(environ))


def _ls(runs: Runs, filters: RunFilter, limit: int, as_json: bool, stdout: TextIO) -> int:
    found = runs.newest(filters, limit)
    if as_json:
        for record in found:
            stdout.write(_json(record) + "\n")
        return 0
    stdout.write(report.run_table(found))
    return 0


def _show(runs: Runs, wanted: str, as_json: bool, stdout: TextIO) -> int:
    """The entry *wanted* is the id of, else the entry of the run it is the id of.

    The ledger and the stream number their entries apart, so on a busy stream
    an id is often both an entry's and an unrelated run's. The entry wins (``ls``
    lists entry ids), and a line on stderr names the run's entry.
    """
    found = runs.of_entry(wanted)
    chosen = runs.get(wanted)
    if found:
        entry = wanted
        if chosen is not None and chosen.entry != wanted:
            print(f"relay runs show: {wanted} is also the id of a run of entry {printable(chosen.entry)}; "
                  f"'relay runs show {printable(chosen.entry)}' shows that one", file=sys.stderr)
        chosen = None
    elif chosen is not None:
        entry, found = chosen.entry, _of_entry(runs, chosen.entry)
        if chosen.run_id not in {record.run_id for record in found}:
            found = sorted([*found, chosen], key=lambda record: _order(record.run_id))
    else:
        raise RunsError(f"no run and no entry {wanted} in {runs.key}: the id is of neither, or the ledger "
                        "no longer keeps its records (RUNS_MAX_AGE, RUNS_MAX_ENTRIES)")
    if as_json:
        stdout.write(json.dumps({"entry": entry, "runs": [record.to_json() for record in found]},
                                ensure_ascii=False, indent=2) + "\n")
        return 0
    stdout.write(report.entry_report(entry, found, chosen.run_id if chosen is not None else ""))
    return 0


def _of_entry(runs: Runs, entry: str) -> list[Run]:
    """The records of *entry*; none when a writer put something that is not an entry id in the field."""
    try:
        return runs.of_entry(entry)
    except RunsError:
        return []


def _order(run_id: str) -> tuple[int, int]:
    first, _, second = run_id.partition("-")
    return int(first), int(second)


def _follow(runs: Runs, filters: RunFilter, as_json: bool, stdout: TextIO) -> int:
    for record in runs.follow(filters):
        stdout.write((_json(record) if as_json else report.run_line(record)) + "\n")
        stdout.flush()
    return 0


def _filters(args: Arguments) -> RunFilter:
    entry = args["--entry"]
    return RunFilter(
        function=args["--function"], handler=args["--handler"],
        outcomes=parse_outcomes(args["--status"]) if args["--status"] is not None else (),
        since_ms=parse_time(args["--since"], "--since") if args["--since"] is not None else None,
        until_ms=parse_time(args["--until"], "--until") if args.get("--until") is not None else None,
        event_id=args["--event-id"], entry=checked_id(entry, "an entry id") if entry is not None else None)


def _limit(text: str | None) -> int:
    if text is None:
        return DEFAULT_LIMIT
    if not (text.isascii() and text.isdigit() and len(text) <= 18) or int(text) < 1:
        raise RunsError(f"--limit={text!r} is not a positive whole number")
    return int(text)


def _json(record: Run) -> str:
    return json.dumps(record.to_json(), ensure_ascii=False)
