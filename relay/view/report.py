"""What ``relay function ls``, ``relay function inspect <name>`` and ``relay stats`` print.

The commands (relay.commands.function, relay.commands.stats) read the state
database file and nothing else (no Redis, Docker or /functions), so they work
while Relay or Redis is down. Rendering is plain
functions of records and the current time, so the layouts are tested as
golden text. Imports stay light: sqlite3, and cron-descriptor only when a
function has schedules.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from relay.durations import SECOND, format_duration
from relay.errors import StateError, UnknownFunction

if TYPE_CHECKING:
    from relay.runs.report import LastRuns
    from relay.view.reader import StateReader
    from relay.view.records import FunctionRecord, FunctionStats, HandlerRecord, LimitWaits, Stats, WarmRecord

LABEL_WIDTH = 19        # inspect: "Last reconcile:    "
STATS_LABEL_WIDTH = 21  # stats: "Oldest pending age:  "
ABSOLUTE_AFTER_DAYS = 30
DEFAULT_TIMEOUT = "6s"  # a schedule's timeout is shown only when it is not the default

# ls: column -> minimum width (a wider value widens its column)
_LS_COLUMNS = (("NAME", 22), ("RUNTIME", 13), ("STATUS", 10), ("HANDLERS", 11), ("UPDATED", 0))
_EVENT_WIDTH = 25
_SCHEDULE_WIDTH = 38
_COUNTER_LABELS = (("Events processed:", "events_processed"), ("Handler successes:", "handler_successes"),
                   ("Handler failures:", "handler_failures"), ("Retries:", "retries"), ("DLQ entries:", "dlq_entries"))


# --- printing -------------------------------------------------------------------------


def print_report(command: str, render: Callable[[], str], reader: StateReader | None = None) -> int:
    """Print what *render* returns; an unknown name or an unreadable database is one line on stderr, exit 1.

    When *reader*'s database does not exist at all, the report is still
    printed as for a fresh database (zeroes, no functions) and one line on stderr says why.
    """
    try:
        text = render()
        missing = reader is not None and reader.missing
    except UnknownFunction as unknown:
        print(unknown, file=sys.stderr)
        return 1
    except StateError as error:
        print(f"{command}: {error}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    if missing and reader is not None:
        sys.stdout.flush()
        print(f"{command}: there is no state database at {reader.path}: Relay has not run on this host, "
              f"or it runs in a container (run the command there)", file=sys.stderr)
    return 0


def now() -> datetime:
    return datetime.now(UTC)


# --- rendering ------------------------------------------------------------------------


def render_function_list(records: Sequence[FunctionRecord], now: datetime) -> str:
    rows = [(record.name, record.runtime, record.status, str(len(record.events)),
             age(record.prepared_at or record.updated_at, now)) for record in records]
    widths = [max([minimum, *(len(row[index]) + 3 for row in rows)]) if minimum else 0
              for index, (_title, minimum) in enumerate(_LS_COLUMNS)]
    lines = [_columns([title for title, _minimum in _LS_COLUMNS], widths)]
    lines += [_columns(row, widths) for row in rows]
    return "".join(line.rstrip() + "\n" for line in lines)


def render_function(record: FunctionRecord, stats: FunctionStats, now: datetime,
                    last_runs: LastRuns | None = None) -> str:
    """``relay function inspect``: *record* (FunctionRecord) with its FunctionStats, and its last runs when
    *last_runs* is given (the ledger's, or why it was not read)."""
    lines = [_field("Name:", record.name), _field("Runtime:", record.runtime), _field("Status:", record.status)]
    if record.image:
        lines.append(_field("Image:", record.image))
    if record.fingerprint:
        lines.append(_field("Fingerprint:", record.fingerprint))
    if record.prepared_at:
        lines.append(_field("Prepared:", f"{_timestamp(record.prepared_at)} ({age(record.prepared_at, now)})"))
    if record.last_reconcile_status and record.last_reconcile_at:  # the writer sets both or neither
        outcome = f"{record.last_reconcile_status} ({age(record.last_reconcile_at, now)})"
        lines.append(_field("Last reconcile:", outcome))
    if record.last_error:
        first, *rest = record.last_error.splitlines() or [""]
        lines.append(_field("Last error:", first))
        lines += [" " * LABEL_WIDTH + line for line in rest]
    for title, items in _sections(record, stats):
        lines += ["", title, *(f"  {item}".rstrip() for item in items)]
    if last_runs is not None:
        from relay.runs.report import function_runs

        lines += ["", "Last runs:", *(f"  {item}".rstrip() for item in function_runs(last_runs))]
    return "".join(line + "\n" for line in lines)


def _sections(record: FunctionRecord, stats: FunctionStats) -> list[tuple[str, list[str]]]:
    """inspect's sections after the header, as (title, lines); a section with nothing to show is left out."""
    sections = []
    if record.events:
        width = max(_EVENT_WIDTH, *(len(item.handler) + 3 for item in record.events))
        sections.append(("Events:", [f"{item.handler:<{width}}timeout={item.timeout}" for item in record.events]))
    if record.schedules:
        width = max(_SCHEDULE_WIDTH, *(len(item.handler) + 3 for item in record.schedules))
        sections.append(("Schedules:", [f"{item.handler:<{width}}{_schedule(item)}" for item in record.schedules]))
    if record.warm:
        sections.append(("Warm:", _warm(record.warm, stats.warm_containers)))
    if record.rate_limit or record.concurrency_key:
        sections.append(("Limits:", _limits(record, stats.waits)))
    sections.append(("Stats:", [f"{label:<{STATS_LABEL_WIDTH}}{getattr(stats.counters, column)}"
                                for label, column in _COUNTER_LABELS]))
    if record.env:
        sections.append(("Environment:", [f"{key}={value}" for key, value in record.env.items()]))
    if record.secrets:
        sections.append(("Secrets:", [f"{key}={reference}" for key, reference in record.secrets.items()]))
    return sections


def render_stats(stats: Stats, now: datetime) -> str:
    counters = stats.counters
    values: list[tuple[str, object]] = [(label, getattr(counters, column)) for label, column in _COUNTER_LABELS]
    values += [("Pending entries:", stats.pending_entries),
               ("Oldest pending age:", format_duration(int(stats.oldest_pending_age_seconds) * SECOND)),
               ("Updated:", age(stats.updated_at, now) if stats.updated_at else "never")]
    return "".join(f"{label:<{STATS_LABEL_WIDTH}}{value}\n" for label, value in values)


def age(moment: datetime, now: datetime) -> str:
    """ "12s ago", "3m ago", "2h ago", "5d ago"; the date after about a month."""
    seconds = max(0, int((now - moment).total_seconds()))
    if seconds < 60:
        return f"{seconds}s ago"
    if seconds < 3600:
        return f"{seconds // 60}m ago"
    if seconds < 86400:
        return f"{seconds // 3600}h ago"
    if seconds < ABSOLUTE_AFTER_DAYS * 86400:
        return f"{seconds // 86400}d ago"
    return moment.astimezone(UTC).strftime("%Y-%m-%d")


def describe_cron(expression: str | None) -> str | None:
    """The cron in words with 24-hour times ("At 08:00, Monday through Friday"), or None."""
    try:
        from cron_descriptor import ExpressionDescriptor, Options

        options = Options(use_24hour_time_format=True, locale_code="en_US")
        return ExpressionDescriptor(expression, options).get_description() or None
    except Exception:  # display only: any failure means "no description", never a failed inspect
        return None


def _warm(warm: WarmRecord, running: int) -> list[str]:
    """The Warm section's lines: the template's keys, so they read like its ``warm:``."""
    values: tuple[tuple[str, object], ...] = (("containers:", f"{warm.containers} per worker (running now: {running})"),
              ("max_invocations:", warm.max_invocations), ("idle:", warm.idle),
              ("prestart:", "true" if warm.prestart else "false"))
    return [f"{label:<{STATS_LABEL_WIDTH}}{value}" for label, value in values]


def _limits(record: FunctionRecord, waits: LimitWaits) -> list[str]:
    """The Limits section's lines: each limit the template sets, with this worker's waits for it."""
    values: list[tuple[str, str, int, float]] = []
    if record.rate_limit:
        values.append(("rate_limit:", record.rate_limit, waits.rate_limit_waits, waits.rate_limit_wait_seconds))
    if record.concurrency_key:
        values.append(("concurrency_key:", record.concurrency_key, waits.concurrency_key_waits,
                       waits.concurrency_key_wait_seconds))
    return [f"{label:<{STATS_LABEL_WIDTH}}{value} (waits: {count}, {seconds:.1f}s in all)"
            for label, value, count, seconds in values]


def _schedule(item: HandlerRecord) -> str:
    description = describe_cron(item.cron)
    text = f'cron="{item.cron}"' + (f" ({description})" if description else "")
    text += f" timezone={item.timezone or 'UTC'}"
    if item.timeout != DEFAULT_TIMEOUT:
        text += f" timeout={item.timeout}"
    return text


def _field(label: str, value: str) -> str:
    return f"{label:<{LABEL_WIDTH}}{value}"


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _columns(values: Sequence[str], widths: Sequence[int]) -> str:
    return "".join(f"{value:<{width}}" for value, width in zip(values, widths, strict=True))
