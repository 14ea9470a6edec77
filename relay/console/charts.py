"""The console's charts: SVG drawn on the server from ledger records, no script in the browser.

Pure functions of a sequence of relay.runs.record.Run and the time now; each
returns one ``<svg>`` element as text, to put in a page as it is:

    runs_chart       runs per minute over the last hour, stacked by outcome
    duration_chart   p50 and p95 duration per 5 minutes over the last hour

A run counts at the minute it started (``started_ms``), or when that is
missing at its record's time (the run id's first part). Only run records with
a known outcome count: settlements and a status no RunStatus names are left
out. Buckets are whole minutes of the clock (UTC), the last one the minute
``now_ms`` falls in; a run later than that (a worker's clock ahead) is left
out. A window with nothing to draw gives a small SVG that says so.

The page's Content-Security-Policy forbids inline styles, so the charts have
no ``style`` attribute: every colour comes from the console's stylesheet,
through these classes (CHART_CSS holds the defaults):

    chart, chart-runs, chart-duration, chart-empty   the <svg> element
    chart-axis      the axis lines           chart-grid     the horizontal grid lines
    chart-label     axis and legend text     chart-hover    the invisible hover target of a bucket
    outcome-succeeded, outcome-failed, outcome-timed-out, outcome-killed, outcome-not-started,
    outcome-expired                          the bars' segments and their legend swatches
    duration-p50, duration-p95               the lines, their points and their legend swatches

Each bar and each duration bucket has a ``<title>`` (the browser's hover
text) with its time and numbers. Every text that reaches the SVG is escaped,
control characters first (relay.quoting.printable), then XML's five.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from html import escape

from relay.quoting import printable
from relay.runs.record import RUN, Run, RunStatus
from relay.runs.report import duration, written_ms

MINUTE_MS = 60_000
OUTCOMES = tuple(RunStatus)   # bottom of a bar first
PERCENTILES = (50, 95)

# The drawing, in viewBox units: the plot area, the axis labels below it and the legend under them.
WIDTH, HEIGHT = 600, 200
LEFT, RIGHT, TOP, BOTTOM = 56, 592, 10, 150
LABEL_Y, LEGEND_Y = 166, 190
EMPTY_HEIGHT = 40

CHART_CSS = """\
.chart { width: 100%; height: auto; font: 11px sans-serif; }
.chart-label { fill: #555; }
.chart-axis { stroke: #888; stroke-width: 1; }
.chart-grid { stroke: #ddd; stroke-width: 1; }
.chart-hover { fill: transparent; }
.chart-hover:hover { fill: rgba(0, 0, 0, 0.06); }
.outcome-succeeded { fill: #2e7d32; }
.outcome-failed { fill: #c62828; }
.outcome-timed-out { fill: #ef6c00; }
.outcome-killed { fill: #6a1b9a; }
.outcome-not-started { fill: #757575; }
.outcome-expired { fill: #bdbdbd; }
polyline.duration-p50, polyline.duration-p95 { fill: none; stroke-width: 2; }
.duration-p50 { stroke: #1565c0; fill: #1565c0; }
.duration-p95 { stroke: #c62828; fill: #c62828; }
"""


def outcome_class(status: RunStatus) -> str:
    """The CSS class of *status*'s colour: ``outcome-timed-out``."""
    return "outcome-" + status.value.replace(" ", "-")


# --- the numbers ------------------------------------------------------------------------


def run_time(run: Run) -> int | None:
    """When *run* counts: it started, or else its record was written (unix milliseconds)."""
    return run.started_ms if run.started_ms is not None else written_ms(run)


def counts_per_minute(runs: Iterable[Run], now_ms: int, minutes: int = 60) -> list[dict[RunStatus, int]]:
    """How many runs ended in each outcome, a dict a minute, oldest minute first; the last is now's."""
    counts: list[dict[RunStatus, int]] = [{} for _ in range(minutes)]
    for index, run in _bucketed(runs, now_ms, minutes, 1):
        if run.status is not None:
            counts[index][run.status] = counts[index].get(run.status, 0) + 1
    return counts


def duration_percentiles(runs: Iterable[Run], now_ms: int, minutes: int = 60,
                         bucket_minutes: int = 5) -> list[tuple[float, float, int] | None]:
    """(p50, p95, how many) of the runs' durations in milliseconds per bucket, oldest first; None for a
    bucket without a run that says how long it took."""
    durations: list[list[float]] = [[] for _ in range(_buckets(minutes, bucket_minutes))]
    for index, run in _bucketed(runs, now_ms, minutes, bucket_minutes):
        if run.duration_ms is not None and math.isfinite(run.duration_ms):
            durations[index].append(run.duration_ms)
    return [(percentile(values, 50), percentile(values, 95), len(values)) if values else None
            for values in durations]


def percentile(values: Sequence[float], rank: float) -> float:
    """The nearest-rank *rank*-th percentile of *values* (not empty): the smallest value that at least
    *rank* % of them do not exceed."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(rank / 100 * len(ordered)) - 1)]


def _buckets(minutes: int, bucket_minutes: int) -> int:
    if bucket_minutes < 1 or minutes < bucket_minutes or minutes % bucket_minutes:
        raise ValueError(f"{minutes} minutes are not a whole number of {bucket_minutes}-minute buckets")
    return minutes // bucket_minutes


def _first_bucket(now_ms: int, minutes: int, bucket_minutes: int) -> int:
    """The number of the oldest bucket: buckets are counted from the epoch, *bucket_minutes* long."""
    return now_ms // (bucket_minutes * MINUTE_MS) - _buckets(minutes, bucket_minutes) + 1


def _bucketed(runs: Iterable[Run], now_ms: int, minutes: int, bucket_minutes: int) -> Iterable[tuple[int, Run]]:
    """(bucket index, run) for each run record with an outcome whose time falls in the window."""
    count = _buckets(minutes, bucket_minutes)
    first = _first_bucket(now_ms, minutes, bucket_minutes)
    for run in runs:
        when = run_time(run)
        if run.kind != RUN or run.status is None or when is None:
            continue
        index = when // (bucket_minutes * MINUTE_MS) - first
        if 0 <= index < count:
            yield index, run


# --- the drawings -----------------------------------------------------------------------


def runs_chart(runs: Iterable[Run], now_ms: int, minutes: int = 60, *, title: str = "") -> str:
    """Runs per minute over the last *minutes*, a bar a minute stacked by outcome (succeeded at the bottom).
    *title* (a function's name, say) starts the chart's accessible title."""
    counts = counts_per_minute(runs, now_ms, minutes)
    caption = _caption(title, "runs per minute by outcome", now_ms, minutes, 1)
    if not any(counts):
        return _empty(caption, minutes)
    top = _nice_ceiling(max(sum(minute.values()) for minute in counts))
    first = _first_bucket(now_ms, minutes, 1)
    slot = (RIGHT - LEFT) / minutes
    parts = [_open("chart chart-runs", caption), *_y_axis(top, _count, whole=True), *_x_axis(minutes)]
    for index, minute in enumerate(counts):
        if not minute:
            continue
        start_ms = (first + index) * MINUTE_MS
        total = sum(minute.values())
        hover = f"{_clock(start_ms)} UTC: {total} run{'s' if total != 1 else ''}, " + ", ".join(
            f"{minute[status]} {status.value}" for status in OUTCOMES if status in minute)
        x, width = LEFT + index * slot + slot * 0.1, slot * 0.8
        parts.append(f"<g><title>{_text(hover)}</title>")
        below = 0
        for status in OUTCOMES:
            if status not in minute:
                continue
            y_top = _y(below + minute[status], top)
            parts.append(f'<rect class="{outcome_class(status)}" x="{_n(x)}" y="{_n(y_top)}" '
                         f'width="{_n(width)}" height="{_n(_y(below, top) - y_top)}"/>')
            below += minute[status]
        parts.append("</g>")
    parts += _legend([(outcome_class(status), status.value) for status in OUTCOMES])
    return "".join(parts) + "</svg>"


def duration_chart(runs: Iterable[Run], now_ms: int, minutes: int = 60, bucket_minutes: int = 5, *,
                   title: str = "") -> str:
    """p50 and p95 of the runs' durations per *bucket_minutes* over the last *minutes*, as two lines
    with a point a bucket; a bucket without runs breaks the lines."""
    buckets = duration_percentiles(runs, now_ms, minutes, bucket_minutes)
    caption = _caption(title, "p50 and p95 duration", now_ms, minutes, bucket_minutes)
    if not any(buckets):
        return _empty(caption, minutes)
    top = _nice_ceiling(max(bucket[1] for bucket in buckets if bucket is not None))
    first = _first_bucket(now_ms, minutes, bucket_minutes)
    slot = (RIGHT - LEFT) / len(buckets)
    parts = [_open("chart chart-duration", caption), *_y_axis(top, _milliseconds), *_x_axis(minutes)]
    for rank_index, rank in enumerate(PERCENTILES):
        css = f"duration-p{rank}"
        for run_of_points in _runs_of_points(buckets):
            points = " ".join(f"{_n(LEFT + (index + 0.5) * slot)},{_n(_y(values[rank_index], top))}"
                              for index, values in run_of_points)
            parts.append(f'<polyline class="{css}" fill="none" points="{points}"/>')
        for index, values in enumerate(buckets):
            if values is not None:
                parts.append(f'<circle class="{css}" cx="{_n(LEFT + (index + 0.5) * slot)}" '
                             f'cy="{_n(_y(values[rank_index], top))}" r="2.5"/>')
    for index, values in enumerate(buckets):
        if values is None:
            continue
        start_ms = (first + index) * bucket_minutes * MINUTE_MS
        p50, p95, count = values
        hover = (f"{_clock(start_ms)}–{_clock(start_ms + bucket_minutes * MINUTE_MS)} UTC: {count} "
                 f"run{'s' if count != 1 else ''}, p50 {duration(p50)}, p95 {duration(p95)}")
        parts.append(f'<rect class="chart-hover" x="{_n(LEFT + index * slot)}" y="{TOP}" width="{_n(slot)}" '
                     f'height="{BOTTOM - TOP}"><title>{_text(hover)}</title></rect>')
    parts += _legend([(f"duration-p{rank}", f"p{rank}") for rank in PERCENTILES])
    return "".join(parts) + "</svg>"


Bucket = tuple[float, float, int]   # p50, p95, how many runs


def _runs_of_points(buckets: Sequence[Bucket | None]) -> list[list[tuple[int, Bucket]]]:
    """The buckets that have values, as runs of neighbours: a line is drawn through each run."""
    runs: list[list[tuple[int, Bucket]]] = []
    for index, values in enumerate(buckets):
        if values is None:
            continue
        if runs and runs[-1][-1][0] == index - 1:
            runs[-1].append((index, values))
        else:
            runs.append([(index, values)])
    return runs


def _open(css: str, caption: str, height: int = HEIGHT) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="{css}" viewBox="0 0 {WIDTH} {height}" '
            f'role="img"><title>{_text(caption)}</title>')


def _empty(caption: str, minutes: int) -> str:
    span = "hour" if minutes == 60 else f"{minutes} minutes"
    return (_open("chart chart-empty", caption, EMPTY_HEIGHT)
            + f'<text class="chart-label" x="{WIDTH // 2}" y="{EMPTY_HEIGHT // 2 + 4}" text-anchor="middle">'
            f"no runs in the last {span}</text></svg>")


def _caption(title: str, what: str, now_ms: int, minutes: int, bucket_minutes: int) -> str:
    start_ms = _first_bucket(now_ms, minutes, bucket_minutes) * bucket_minutes * MINUTE_MS
    return (f"{title}: " if title else "") + f"{what}, {_clock(start_ms)} to {_clock(now_ms)} UTC"


def _y_axis(top: float, label: Callable[[float], str], whole: bool = False) -> list[str]:
    """The axes' lines, and grid lines with labels at 0, half and *top* (only whole numbers when *whole*)."""
    parts = [f'<line class="chart-axis" x1="{LEFT}" y1="{BOTTOM}" x2="{RIGHT}" y2="{BOTTOM}"/>',
             f'<line class="chart-axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{BOTTOM}"/>']
    for value in (0, top / 2, top):
        if whole and value != int(value):
            continue
        y = _n(_y(value, top))
        if value:
            parts.append(f'<line class="chart-grid" x1="{LEFT}" y1="{y}" x2="{RIGHT}" y2="{y}"/>')
        parts.append(f'<text class="chart-label" x="{LEFT - 4}" y="{y}" dy="4" text-anchor="end">'
                     f"{_text(label(value))}</text>")
    return parts


def _x_axis(minutes: int) -> list[str]:
    ticks = ((LEFT, "start", f"{minutes} min ago"), ((LEFT + RIGHT) / 2, "middle", f"{minutes / 2:g} min ago"),
             (RIGHT, "end", "now"))
    return [f'<text class="chart-label" x="{_n(x)}" y="{LABEL_Y}" text-anchor="{anchor}">{_text(text)}</text>'
            for x, anchor, text in ticks]


def _legend(items: Sequence[tuple[str, str]]) -> list[str]:
    parts, x = ['<g class="chart-legend">'], float(LEFT)
    for css, name in items:
        parts.append(f'<rect class="{css}" x="{_n(x)}" y="{LEGEND_Y - 9}" width="10" height="10"/>'
                     f'<text class="chart-label" x="{_n(x + 14)}" y="{LEGEND_Y}">{_text(name)}</text>')
        x += 24 + 6.5 * len(name)
    return [*parts, "</g>"]


def _y(value: float, top: float) -> float:
    return BOTTOM - (BOTTOM - TOP) * value / top


def _nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is at least *value* (1 for nothing)."""
    if value <= 0:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def _count(value: float) -> str:
    return f"{value:g}"


def _milliseconds(value: float) -> str:
    """An axis label: ``250 ms``, ``1.5 s``."""
    return f"{value:g} ms" if value < 1000 else f"{value / 1000:g} s"


def _clock(unix_ms: int) -> str:
    return datetime.fromtimestamp(unix_ms / 1000, UTC).strftime("%H:%M")


def _n(value: float) -> str:
    """A coordinate: at most one decimal, none when whole."""
    return f"{round(value, 1):g}"


def _text(text: str) -> str:
    return escape(printable(text), quote=True)
