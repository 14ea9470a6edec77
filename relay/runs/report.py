"""What ``relay runs`` and ``relay function inspect`` print of the ledger's records.

Plain functions of records, tested as golden text. Every field of a record
is whatever a worker, a handler or anyone who can write to Redis put there,
so each is shown through ``printable`` (a character a terminal could act on
becomes an escape such as \\x1b), and the fields of a table row are cut to
CELL_CHARS so that no record can stretch a row. Times are RFC 3339 in UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from relay.durations import MILLISECOND, format_duration
from relay.quoting import printable, shorten
from relay.runs.record import RUN, Run, Settled
from relay.runs.times import format_time

CELL_CHARS = 60      # of one field in a table row
CONTAINER_CHARS = 12  # of a container id in a report, as docker ps shows it (--json has it whole)
LABEL_WIDTH = 17     # show: "Idempotency key: "
# ls: the columns, and the function that renders each from a record
LS_HEADER = ("TIME", "FUNCTION", "ATTEMPT", "OUTCOME", "DURATION", "WORKER", "ENTRY")
INSPECT_HEADER = ("TIME", "HANDLER", "ATTEMPT", "OUTCOME", "DURATION", "ENTRY")
FOLLOW_WIDTHS = (20, 32, 7, 24, 9, 20, 0)   # follow's columns: no table to measure, so fixed minimums
_SHOWN_SETTLEMENTS = (Settled.DEAD_LETTERED, Settled.RETRY_DUE)   # ls names these after the run's status
_LAST_MS = 253402300799999   # 9999-12-31T23:59:59.999Z: a later "time" a writer put in a record is shown as -


@dataclass(frozen=True, slots=True)
class LastRuns:
    """A function's last runs for ``relay function inspect``, or why they could not be read."""

    runs: tuple[Run, ...] = ()
    missing: str = ""        # why the ledger was not read; "" when it was
    ledger: str = ""         # its key, when it was read


# --- one record -------------------------------------------------------------------------


def written_ms(run: Run) -> int | None:
    """When the record was written (its id's time), in unix milliseconds."""
    first = run.run_id.partition("-")[0]
    return int(first) if first.isascii() and first.isdigit() and len(first) <= 18 else None


def recorded(run: Run) -> str:
    """When the record was written: at the end of the run's dispatch, with the entry's settlement. The lists
    show this time, as they are in its order and ``--since`` and ``--until`` select by it."""
    return time_text(written_ms(run))


def started(run: Run) -> str:
    return time_text(run.started_ms)


def time_text(unix_ms: int | None) -> str:
    """*unix_ms* in RFC 3339 (UTC), or ``-`` when unknown or past the year 9999."""
    return format_time(unix_ms) if unix_ms is not None and unix_ms <= _LAST_MS else "-"


def outcome(run: Run) -> str:
    """How the attempt ended (``failed``), with what became of the entry when that is news (``, dead-lettered``);
    for a settlement record, how the entry was settled."""
    if run.kind != RUN:
        return run.settled.value if run.settled is not None else (_cell(run.kind) or "-")
    text = status(run)
    if run.settled in _SHOWN_SETTLEMENTS and run.settled is not None:
        text += f", {run.settled.value}"
    return text


def status(run: Run) -> str:
    """The run's status: a RunStatus value, or the field as a writer wrote it (escaped, cut)."""
    return run.status.value if run.status is not None else (_cell(run.status_text) or "-")


def duration(milliseconds: float | None) -> str:
    """``850.2ms``, ``1.25s``, ``2m3.5s``; ``-`` when unknown."""
    if milliseconds is None:
        return "-"
    if round(milliseconds, 1) < 1000:
        return f"{milliseconds:.1f}ms"
    if round(milliseconds / 1000, 2) < 60:
        return f"{milliseconds / 1000:.2f}s"
    return format_duration(round(milliseconds / 100) * 100 * MILLISECOND)


def attempt(run: Run) -> str:
    return str(run.attempt) if run.attempt is not None else "-"


# --- tables -----------------------------------------------------------------------------


def run_table(runs: Sequence[Run]) -> str:
    """``relay runs ls``: a header, then one aligned line a record."""
    return _table(LS_HEADER, [_ls_row(run) for run in runs])


def run_line(run: Run) -> str:
    """One line of ``relay runs follow``: the columns of ls, at least FOLLOW_WIDTHS wide (no header)."""
    return _row(_ls_row(run), FOLLOW_WIDTHS)


def _ls_row(run: Run) -> tuple[str, ...]:
    return (recorded(run), _cell(run.target) or "-", attempt(run), outcome(run), duration(run.duration_ms),
            _cell(run.worker) or "-", _cell(run.entry) or "-")


def function_runs(last: LastRuns) -> list[str]:
    """The lines of inspect's "Last runs" section (unindented)."""
    if last.missing:
        return [f"not shown: {printable(last.missing)}"]
    if not last.runs:
        return [f"none in the run ledger ({printable(last.ledger)})" if last.ledger else "none in the run ledger"]
    rows = [(recorded(run), _cell(run.handler) or "-", attempt(run), outcome(run), duration(run.duration_ms),
             _cell(run.entry) or "-") for run in last.runs]
    return _table(INSPECT_HEADER, rows).splitlines()


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    return "".join(_row(row, widths) + "\n" for row in [header, *rows])


def _row(row: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip()


def _cell(text: str) -> str:
    return shorten(printable(text), CELL_CHARS)


# --- one entry --------------------------------------------------------------------------


def entry_report(entry: str, runs: Sequence[Run], chosen: str = "") -> str:
    """``relay runs show``: the entry, how it was settled, then each record oldest first with both tails.

    *chosen* is the run id asked for, when a run id was; its record says so.
    """
    event_ids = list(dict.fromkeys(run.event_id for run in runs if run.event_id))
    replays = list(dict.fromkeys(run.replay_of for run in runs if run.replay_of))
    attempts = sum(1 for run in runs if run.kind == RUN)
    lines = [_field("Entry", printable(entry))]
    if event_ids:
        lines.append(_field("Event ID", printable(", ".join(event_ids))))
    if replays:
        lines.append(_field("Replay of", printable(", ".join(replays))))
    lines += [_field("Settled", settlement(runs)), _field("Runs", f"{attempts} attempt{'s' * (attempts != 1)}")]
    for run in runs:
        lines += ["", *_record(run, chosen)]
    return "".join(line + "\n" for line in lines)


def settlement(runs: Sequence[Run]) -> str:
    """What the latest record that says so says became of the entry."""
    last = next((run for run in reversed(runs) if run.settled is not None), None)
    if last is None or last.settled is None:
        return "not yet recorded"
    return f"{_settled(last)} (recorded {time_text(written_ms(last))})"


def _record(run: Run, chosen: str) -> list[str]:
    title = ("Run " if run.kind == RUN else "Settlement ") + printable(run.run_id)
    if chosen and run.run_id == chosen:
        title += " (the run asked for)"
    fields: list[tuple[str, str]] = []
    if run.target:
        fields.append(("Function", printable(run.target)))
    if run.rule and run.rule != run.target:
        fields.append(("Rule", printable(run.rule)))
    if run.kind == RUN:
        fields += [("Attempt", attempt(run)), ("Outcome", status(run) + _exit(run)), ("Started", started(run)),
                   ("Duration", duration(run.duration_ms))]
    else:
        fields.append(("Recorded", time_text(written_ms(run))))
    worker = ", ".join(printable(part) for part in (run.worker, run.mode) if part)
    if run.container:
        worker += f", container {printable(run.container[:CONTAINER_CHARS])}"
    if worker:
        fields.append(("Worker", worker))
    if run.key:
        fields.append(("Idempotency key", printable(run.key)))
    if run.error:
        fields.append(("Error", _one_line(run.error)))
    if run.settled is not None:
        fields.append(("Settled", _settled(run)))
    elif run.reason:
        fields.append(("Reason", _one_line(run.reason)))
    lines = [title, *(f"  {_field(name, value)}" for name, value in fields)]
    if run.kind == RUN:
        lines += [*_tail("Stdout", run.stdout), *_tail("Stderr", run.stderr)]
    return lines


def _settled(run: Run) -> str:
    """``dead-lettered: <reason>``, ``retry due at <time>``, ``acknowledged``."""
    text = run.settled.value if run.settled is not None else "-"
    if run.settled is Settled.RETRY_DUE:
        text += f" at {time_text(run.retry_at_ms)}"
    return text + (f": {_one_line(run.reason)}" if run.reason else "")


def _exit(run: Run) -> str:
    return f" (exit code {run.exit_code})" if run.exit_code is not None else ""


def _tail(name: str, text: str) -> list[str]:
    if not text:
        return [f"  {name}: (empty)"]
    return [f"  {name} (last 4 KiB):", *(f"    {printable(line)}" for line in text.rstrip("\n").split("\n"))]


def _field(name: str, value: str) -> str:
    return f"{name + ':':<{LABEL_WIDTH}}{value}"


def _one_line(text: str) -> str:
    return printable(" ".join(text.split()))
