"""relay.console.charts: the console's SVG charts, drawn on the server from ledger records."""

import xml.etree.ElementTree as ET

import pytest

from relay.console.charts import (
    counts_per_minute,
    duration_chart,
    duration_percentiles,
    outcome_class,
    percentile,
    runs_chart,
)
from relay.console.pages import offset_text, timeline
from relay.runs.record import SETTLEMENT, Run, RunStatus, Settled

SVG = "{http://www.w3.org/2000/svg}"
MINUTE = 60_000
NOW = 1_796_552_820_000 + 30_000      # 2026-12-06T10:27:30Z: half-way through the minute 10:27 (UTC)
THIS_MINUTE = NOW - NOW % MINUTE


def run(at, status=RunStatus.SUCCEEDED, duration=None, **fields):
    return Run(run_id=f"{at + 500}-0", started_ms=at, status=status, duration_ms=duration, **fields)


def parse(svg):
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" and root.get("viewBox")
    return root


def bars(svg):
    """Each bar of a runs chart: its hover text and its segments' (class, height), bottom first."""
    return [(group.find(f"{SVG}title").text,
             [(rect.get("class"), float(rect.get("height"))) for rect in group.findall(f"{SVG}rect")])
            for group in parse(svg).findall(f"{SVG}g") if group.find(f"{SVG}title") is not None]


def test_runs_are_counted_in_the_minute_they_started_and_by_outcome():
    runs = [run(THIS_MINUTE), run(THIS_MINUTE + 59_999, RunStatus.FAILED), run(THIS_MINUTE - 1, RunStatus.FAILED),
            run(THIS_MINUTE - 59 * MINUTE), run(THIS_MINUTE - 59 * MINUTE, RunStatus.KILLED)]
    counts = counts_per_minute(runs, NOW)
    assert len(counts) == 60
    assert counts[-1] == {RunStatus.SUCCEEDED: 1, RunStatus.FAILED: 1}
    assert counts[-2] == {RunStatus.FAILED: 1}
    assert counts[0] == {RunStatus.SUCCEEDED: 1, RunStatus.KILLED: 1}
    assert sum(sum(minute.values()) for minute in counts) == 5


def test_what_falls_outside_the_hour_or_has_no_outcome_is_left_out():
    runs = [run(THIS_MINUTE - 60 * MINUTE),                         # the minute before the first
            run(THIS_MINUTE + MINUTE),                              # a worker's clock ahead of ours
            run(THIS_MINUTE, status=None, status_text="exploded"),  # a status no RunStatus names
            Run(kind=SETTLEMENT, run_id=f"{THIS_MINUTE}-0", settled=Settled.ACKNOWLEDGED),
            Run(run_id="not-a-time", status=RunStatus.FAILED)]     # no time at all
    assert not any(counts_per_minute(runs, NOW))


def test_a_run_without_a_start_counts_at_its_record_time():
    counts = counts_per_minute([Run(run_id=f"{THIS_MINUTE - 5 * MINUTE + 7}-3", status=RunStatus.EXPIRED)], NOW)
    assert counts[-6] == {RunStatus.EXPIRED: 1}


def test_a_bar_stacks_its_outcomes_in_order_with_heights_in_proportion():
    runs = [run(THIS_MINUTE, RunStatus.FAILED)] * 2 + [run(THIS_MINUTE)] * 6 + [run(THIS_MINUTE, RunStatus.TIMED_OUT)]
    runs += [run(THIS_MINUTE - 3 * MINUTE)]
    (older, older_parts), (hover, parts) = bars(runs_chart(runs, NOW))
    assert hover == "10:27 UTC: 9 runs, 6 succeeded, 2 failed, 1 timed out"
    assert older == "10:24 UTC: 1 run, 1 succeeded"
    assert [css for css, _ in parts] == ["outcome-succeeded", "outcome-failed", "outcome-timed-out"]
    heights = [height for _, height in parts]
    assert heights[0] == pytest.approx(3 * heights[1], abs=0.2) == pytest.approx(6 * heights[2], abs=0.2)
    assert older_parts[0][1] == pytest.approx(heights[2], abs=0.1)


def test_the_runs_chart_has_axes_a_legend_and_classes_not_styles():
    svg = runs_chart([run(THIS_MINUTE - 10 * MINUTE, status) for status in RunStatus], NOW)
    root = parse(svg)
    texts = [text.text for text in root.iter(f"{SVG}text")]
    assert {"60 min ago", "30 min ago", "now", "0", "5", "10"} <= set(texts)
    assert [status.value for status in RunStatus] == texts[-len(RunStatus):]       # the legend
    assert root.find(f"{SVG}title").text.startswith("runs per minute by outcome, 09:28 to 10:27 UTC")
    assert "style" not in svg
    assert {outcome_class(status) for status in RunStatus} <= {element.get("class") for element in root.iter()}
    assert outcome_class(RunStatus.NOT_STARTED) == "outcome-not-started"


def test_percentiles_are_nearest_rank():
    values = list(range(1, 101))
    assert (percentile(values, 50), percentile(values, 95)) == (50, 95)
    assert percentile([7.5], 95) == 7.5
    assert (percentile([3, 1, 2], 50), percentile([3, 1, 2], 95)) == (2, 3)


def test_durations_are_summed_up_per_five_minutes():
    base = THIS_MINUTE - THIS_MINUTE % (5 * MINUTE)                  # 10:25, the last bucket's start
    runs = [run(base + index, duration=float(index + 1)) for index in range(20)]
    runs += [run(base - 5 * MINUTE, duration=400.0), run(base - 5 * MINUTE, RunStatus.FAILED, duration=100.0),
             run(base - 10 * MINUTE)]                                # no duration: not in a percentile
    buckets = duration_percentiles(runs, NOW)
    assert len(buckets) == 12
    assert buckets[-1] == (10.0, 19.0, 20)
    assert buckets[-2] == (100.0, 400.0, 2)
    assert buckets[:-2] == [None] * 10


def test_the_duration_chart_draws_two_lines_broken_where_a_bucket_has_no_runs():
    base = THIS_MINUTE - THIS_MINUTE % (5 * MINUTE)
    runs = [run(base - minutes * MINUTE, duration=100.0 * (1 + minutes)) for minutes in (0, 5, 20)]
    root = parse(duration_chart(runs, NOW))
    lines = [(line.get("class"), len(line.get("points").split())) for line in root.iter(f"{SVG}polyline")]
    assert lines == [("duration-p50", 1), ("duration-p50", 2), ("duration-p95", 1), ("duration-p95", 2)]
    hovers = [rect.find(f"{SVG}title").text for rect in root.iter(f"{SVG}rect")
              if rect.get("class") == "chart-hover"]
    assert hovers[-1] == "10:25–10:30 UTC: 1 run, p50 100.0ms, p95 100.0ms"
    assert len(hovers) == 3
    texts = [text.text for text in root.iter(f"{SVG}text")]
    assert {"0 ms", "2.5 s", "5 s", "p50", "p95"} <= set(texts)


def test_a_title_is_escaped_and_so_is_a_control_character():
    title = '<script>alert(1)</script>"><img onerror=x>&\x1b[31m'
    for chart in (runs_chart([run(THIS_MINUTE)], NOW, title=title),
                  duration_chart([run(THIS_MINUTE, duration=5.0)], NOW, title=title),
                  runs_chart([], NOW, title=title)):
        assert "<script" not in chart and "<img" not in chart and "\x1b" not in chart
        shown = parse(chart).find(f"{SVG}title").text
        assert shown.startswith('<script>alert(1)</script>"><img onerror=x>&\\x1b[31m: ')


@pytest.mark.parametrize("chart", [runs_chart, duration_chart])
def test_nothing_in_the_hour_gives_a_small_svg_that_says_so(chart):
    root = parse(chart([run(THIS_MINUTE - 2 * 60 * MINUTE, duration=3.0)], NOW))
    assert root.get("class") == "chart chart-empty" and root.get("viewBox") == "0 0 600 40"
    assert [text.text for text in root.iter(f"{SVG}text")] == ["no runs in the last hour"]
    assert parse(chart([], NOW, 30)).find(f"{SVG}text").text == "no runs in the last 30 minutes"


def test_a_window_must_be_whole_buckets():
    with pytest.raises(ValueError, match="not a whole number of 7-minute buckets"):
        duration_chart([], NOW, 60, 7)


# --- relay.console.pages.timeline: an entry's attempts on the run page -------------------------


def test_a_timeline_has_an_axis_from_the_first_start_in_offsets_from_it():
    attempts = [run(THIS_MINUTE, duration=2_000.0, attempt=1, handler="app.h", status=RunStatus.FAILED),
                run(THIS_MINUTE + MINUTE, duration=3_000.0, attempt=2, handler="app.h"),
                run(THIS_MINUTE + 3 * MINUTE, duration=1_500.0, attempt=3, handler="app.h")]
    root = parse(timeline(attempts))
    ticks = [text.text for text in root.findall(f"{SVG}text") if text.get("class") == "tl-tick"]
    assert ticks == ["10:27:00", "+1 min", "+2 min", "+3 min"]     # 181.5 s: a minute a step, at most five
    axis = [line for line in root.findall(f"{SVG}line") if line.get("class") == "tl-axis"]
    bars = root.findall(f"{SVG}rect")
    assert float(axis[0].get("x1")) == float(bars[0].get("x"))
    assert float(axis[0].get("x2")) == pytest.approx(float(bars[2].get("x")) + float(bars[2].get("width")), abs=0.1)
    assert [float(line.get("x1")) for line in axis[1:]][:2] == [float(bars[0].get("x")), float(bars[1].get("x"))]
    assert float(axis[0].get("y1")) > max(float(bar.get("y")) + 14 for bar in bars)
    assert float(root.get("height")) >= float(axis[0].get("y1")) + 16


@pytest.mark.parametrize(("milliseconds", "text"), [
    (5, "5 ms"), (500, "500 ms"), (1_500, "1.5 s"), (15_000, "15 s"), (90_000, "90 s"), (120_000, "2 min"),
    (3_600_000, "1 h"), (5_400_000, "90 min"),
])
def test_timeline_offsets_are_written_in_the_largest_whole_unit(milliseconds, text):
    assert offset_text(milliseconds) == text


def test_a_single_short_attempt_still_gets_an_axis():
    root = parse(timeline([run(THIS_MINUTE, duration=0.4, attempt=1, handler="app.h")]))
    assert [text.text for text in root.findall(f"{SVG}text") if text.get("class") == "tl-tick"][0] == "10:27:00"
