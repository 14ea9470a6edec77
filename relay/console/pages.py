"""The console's pages: bottle SimpleTemplates, whose ``{{value}}`` escapes for HTML.

Every value a producer or a handler wrote (event fields, output tails,
errors, reasons, names) reaches a page only through ``{{...}}``, after
``shown`` has written the characters a terminal could act on as escapes
(relay.quoting.printable, line by line). The only raw insertions
(``{{!...}}``) are the pages' own rendered bodies and the SVG that
relay.console.charts and ``timeline`` draw, which escape what they hold.
No page carries a script or a style attribute: the Content-Security-Policy
forbids both (relay.console.app).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from bottle import SimpleTemplate

from relay.quoting import printable
from relay.runs.record import Run

NAV = (("/fleet", "Fleet"), ("/functions", "Functions"), ("/runs", "Runs"), ("/dead-letters", "Dead letters"),
       ("/replay", "Replay"))

_LAYOUT = SimpleTemplate("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{title}} · Relay console</title>
<link rel="icon" href="/assets/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/assets/console.css"><script src="/assets/console.js" defer></script></head>
<body><header><span class="brand">Relay</span><nav>
% for href, name in nav:
<a href="{{href}}"{{!' class="here"' if href == here else ''}}>{{name}}</a>
% end
</nav><span class="who">
% if signed_in:
<form method="post" action="/logout"><input type="hidden" name="csrf" value="{{csrf}}"><button>Log out</button></form>
% elif can_login:
<a href="/login">Log in</a>
% end
</span></header>
<main><h1>{{title}}</h1>
% if notice:
<p class="notice">{{notice}}</p>
% end
{{!body}}</main></body></html>
""")


def layout(title: str, body: str, *, here: str = "", signed_in: bool = False, can_login: bool = False,
           csrf: str = "", notice: str = "") -> str:
    return _LAYOUT.render(title=title, body=body, nav=NAV, here=here, signed_in=signed_in, can_login=can_login,
                          csrf=csrf, notice=notice)


def render(template: SimpleTemplate, **values: Any) -> str:
    return template.render(shown=shown, when=when, age=age, duration=duration, url=url, **values)


def url(text: str) -> str:
    """*text* as one segment or query value of a URL."""
    return quote(text, safe="")


# --- how values are written ------------------------------------------------------------


def shown(text: object) -> str:
    """Someone else's text with every character a terminal could act on as an escape, its lines kept."""
    return "\n".join(printable(line) for line in str(text).split("\n"))


def when(unix_ms: int | None) -> str:
    if unix_ms is None:
        return "-"
    return datetime.fromtimestamp(unix_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = max(0, int(seconds))
    if whole >= 86400:
        return f"{whole // 86400}d{whole % 86400 // 3600}h"
    if whole >= 3600:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    if whole >= 60:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole}s"


def duration(milliseconds: float | None) -> str:
    if milliseconds is None:
        return "-"
    return f"{milliseconds:.0f} ms" if milliseconds < 10_000 else f"{milliseconds / 1000:.1f} s"


def run_time(run: Run) -> int | None:
    """When a record was written: its id's time (unix ms)."""
    head = run.run_id.partition("-")[0]
    return int(head) if head.isdigit() else None


def outcome(run: Run) -> str:
    if run.settled is not None and run.settled.value == "dead-lettered":
        return f"{run.status.value if run.status else run.kind} · dead-lettered"
    return run.status.value if run.status is not None else (run.status_text or run.kind)


def outcome_class(run: Run) -> str:
    if run.settled is not None and run.settled.value == "dead-lettered":
        return "bad"
    if run.status is None:
        return "muted"
    return "good" if run.ok else "bad"


# --- the timeline of an entry's attempts: SVG, no style attributes ---------------------


# Axis steps for a timeline: the first that leaves at most TIMELINE_TICKS intervals over the span.
TIMELINE_STEPS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000,
                     120_000, 300_000, 600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000, 86_400_000)
TIMELINE_TICKS = 5
TIMELINE_LEFT = 170      # where the bars begin, right of the labels


def timeline(runs: Sequence[Run], width: int = 720) -> str:
    """One bar per attempt, placed by when it started and how long it ran, over the span of them all,
    above an axis from the first start (its UTC time) in offsets from it."""
    spans = [(run.started_ms, run.duration_ms or 0.0, run) for run in runs if run.started_ms is not None]
    if not spans:
        return ""
    first = min(start for start, _, _ in spans)
    span = max(max(start + length for start, length, _ in spans) - first, 1.0)
    scale = (width - TIMELINE_LEFT - 10) / span
    rows = []
    for index, (start, length, run) in enumerate(spans):
        y = 8 + index * 22
        x = TIMELINE_LEFT + (start - first) * scale
        label = html.escape(shown(f"#{run.attempt if run.attempt is not None else '-'} {run.handler}")[:28])
        rows.append(f'<text x="4" y="{y + 12}" class="tl-label">{label}</text>'
                    f'<rect x="{x:.1f}" y="{y}" width="{max(length * scale, 2):.1f}" height="14" '
                    f'class="tl-{outcome_class(run)}"><title>{html.escape(shown(outcome(run)))}, '
                    f'{html.escape(duration(run.duration_ms))}</title></rect>')
    axis_y = 12 + 22 * len(spans)
    rows.append(_timeline_axis(first, span, scale, axis_y))
    height = axis_y + 22
    return (f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="attempts over time">{"".join(rows)}</svg>')


def _timeline_axis(first_ms: int, span_ms: float, scale: float, y: int) -> str:
    """The axis line, a tick at each step, and the labels: the first start's clock time, then offsets."""
    step = next((step for step in TIMELINE_STEPS_MS if span_ms / step <= TIMELINE_TICKS), TIMELINE_STEPS_MS[-1])
    end = TIMELINE_LEFT + span_ms * scale
    parts = [f'<line x1="{TIMELINE_LEFT}" y1="{y}" x2="{end:.1f}" y2="{y}" class="tl-axis"/>']
    for offset in range(0, int(span_ms) + 1, step):
        x = TIMELINE_LEFT + offset * scale
        text = when(first_ms)[11:] if offset == 0 else f"+{offset_text(offset)}"
        anchor = "start" if offset == 0 else "middle"
        parts.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" class="tl-axis"/>'
                     f'<text x="{x:.1f}" y="{y + 16}" text-anchor="{anchor}" class="tl-tick">{text}</text>')
    return "".join(parts)


def offset_text(milliseconds: int) -> str:
    """A timeline offset: ``500 ms``, ``1.5 s``, ``90 s``, ``2 min``, ``6 h``."""
    if milliseconds >= 3_600_000 and milliseconds % 3_600_000 == 0:
        return f"{milliseconds // 3_600_000} h"
    if milliseconds >= 60_000 and milliseconds % 60_000 == 0:
        return f"{milliseconds // 60_000} min"
    return f"{milliseconds / 1000:g} s" if milliseconds >= 1_000 else f"{milliseconds} ms"


# --- the pages -------------------------------------------------------------------------


FLEET = SimpleTemplate("""
<section><h2>Backlog</h2>
<dl class="facts">
<dt>Pending</dt><dd>{{backlog.pending if backlog.pending is not None else 'no group yet'}}</dd>
<dt>Oldest pending</dt><dd>{{age(backlog.oldest_pending_age_s)}}</dd>
<dt>Not yet delivered (lag)</dt><dd>{{backlog.lag if backlog.lag is not None else '-'}}</dd>
<dt>Stream length</dt><dd>{{backlog.stream_length}}</dd>
<dt>Dead letters</dt><dd><a href="/dead-letters">{{backlog.dead_letters}}</a></dd>
<dt>Run records</dt><dd><a href="/runs">{{backlog.ledger_length}}</a></dd>
</dl></section>
<section><h2>Workers</h2>
% if not workers:
<p class="muted">No worker has sent a heartbeat in the last hour.</p>
% else:
<table><thead><tr><th>Worker</th><th>State</th><th>Version</th><th>Up</th><th>Last beat</th><th>Functions</th>
<th>Warm containers</th><th>In flight</th><th>Buffered</th></tr></thead><tbody>
% for worker in workers:
% state = 'stopped' if worker.stopped else ('gone' if worker.gone(now_ms) else 'alive')
<tr class="{{state}}"><td>{{shown(worker.worker)}}</td><td><span class="badge {{state}}">{{state}}</span></td>
<td>{{shown(worker.version)}}</td><td>{{age(worker.uptime_s())}}</td>
<td>{{age((now_ms - worker.beat_ms) / 1000 if worker.beat_ms else None)}} ago</td>
<td>{{worker.functions_loaded if worker.functions_loaded is not None else '-'}}</td>
<td>{{worker.warm_containers if worker.warm_containers is not None else '-'}}</td>
<td>{{worker.in_flight if worker.in_flight is not None else '-'}}</td>
<td>{{worker.buffered if worker.buffered is not None else '-'}}</td></tr>
% end
</tbody></table>
% end
</section>
""")

FUNCTIONS = SimpleTemplate("""
% if not recent.complete:
<p class="notice">The charts show the newest {{recent.read}} runs of the last hour; older ones in that hour are left out.</p>
% end
% if not functions:
<p class="muted">No worker reports a function, and the ledger has no run in the last hour.</p>
% end
% for function in functions:
<section class="function" id="fn-{{shown(function.name)}}"><h2>{{shown(function.name)}}
% if function.state is None:
<span class="badge muted">no live worker reports it</span>
% elif function.state.ready:
<span class="badge good">ready</span>
% else:
<span class="badge bad">not ready</span>
% end
<a class="small" href="/runs?function={{url(function.name)}}">runs</a></h2>
% if function.state is not None and function.state.outcome == 'failed':
<p class="error">Last load failed: {{shown(function.state.error)}}</p>
% end
% if function.state is not None:
<table class="rules"><thead><tr><th>Handler</th><th>Pattern or schedule</th></tr></thead><tbody>
% for handler, pattern in function.state.rules:
<tr><td>{{shown(handler)}}</td><td><code>{{shown(pattern)}}</code></td></tr>
% end
% for handler, cron, zone in function.state.schedules:
<tr><td>{{shown(handler)}}</td><td><code>{{shown(cron)}}</code> ({{shown(zone)}})</td></tr>
% end
</tbody></table>
% end
% if function.count:
<div class="charts"><figure>{{!function.runs_chart}}<figcaption>Runs per minute by outcome, last hour ({{function.count}})</figcaption></figure>
<figure>{{!function.duration_chart}}<figcaption>p50 and p95 duration, last hour</figcaption></figure></div>
% else:
<p class="muted">No runs in the last hour.</p>
% end
</section>
% end
""")

RUNS = SimpleTemplate("""
<form class="filters" method="get" action="/runs">
<label>Function <input name="function" value="{{query.get('function', '')}}"></label>
<label>Handler <input name="handler" value="{{query.get('handler', '')}}"></label>
<label>Outcome <select name="outcome"><option value="">any</option>
% for name in outcomes:
<option{{!' selected' if query.get('outcome') == name else ''}}>{{name}}</option>
% end
</select></label>
<label>Since <input name="since" value="{{query.get('since', '')}}" placeholder="90m or RFC 3339"></label>
<label>Until <input name="until" value="{{query.get('until', '')}}" placeholder="now"></label>
<label>Event id <input name="event_id" value="{{query.get('event_id', '')}}"></label>
<button>Filter</button> <a href="/runs">clear</a></form>
% if error:
<p class="error">{{error}}</p>
% end
<table><thead><tr><th>Recorded</th><th>Function</th><th>Handler</th><th>Attempt</th><th>Outcome</th><th>Exit</th>
<th>Duration</th><th>Worker</th><th>Entry</th></tr></thead>
<tbody id="runs" data-poll="{{poll}}" data-after="{{after}}">
% for run in runs:
{{!row(run)}}
% end
</tbody></table>
% if not runs:
<p class="muted">No run matches{{' among the records scanned' if cursor else ''}}.</p>
% end
% if cursor:
<p><a href="{{older}}">Older runs</a></p>
% end
""")

ROW = SimpleTemplate("""<tr><td><a href="/runs/{{run.run_id}}">{{when(time)}}</a></td><td>{{shown(run.function)}}</td>
<td>{{shown(run.handler)}}</td><td>{{run.attempt if run.attempt is not None else '-'}}</td>
<td><span class="badge {{css}}">{{shown(outcome)}}</span></td>
<td>{{run.exit_code if run.exit_code is not None else '-'}}</td><td>{{duration(run.duration_ms)}}</td>
<td>{{shown(run.worker)}}</td><td><a href="/runs/{{url(run.entry)}}">{{shown(run.entry)}}</a></td></tr>""")


def row(run: Run) -> str:
    return render(ROW, run=run, time=run_time(run), outcome=outcome(run), css=outcome_class(run))


def row_json(run: Run) -> dict[str, object]:
    """A run for the runs page's script, every text already as the page shows it (the script sets textContent)."""
    return {"run_id": run.run_id, "recorded": when(run_time(run)), "function": shown(run.function),
            "handler": shown(run.handler), "attempt": "-" if run.attempt is None else str(run.attempt),
            "outcome": shown(outcome(run)), "class": outcome_class(run),
            "exit_code": "-" if run.exit_code is None else str(run.exit_code), "duration": duration(run.duration_ms),
            "worker": shown(run.worker), "entry": run.entry}


RUN = SimpleTemplate("""
<dl class="facts"><dt>Entry</dt><dd>{{shown(entry)}}</dd>
% if first is not None:
<dt>Event id</dt><dd>{{shown(first.event_id) or '-'}}</dd>
% if first.replay_of:
<dt>Replay of</dt><dd><a href="/runs/{{url(first.replay_of)}}">{{shown(first.replay_of)}}</a></dd>
% end
% end
</dl>
<section><h2>Event</h2>
% if event is None:
<p class="muted">The stream no longer holds this entry (retention trimmed it, or it was deleted).</p>
% else:
<pre class="event">{{shown(event)}}</pre>
% end
</section>
<section><h2>Attempts</h2>
% if not runs:
<p class="muted">The ledger has no record of this entry{{' among the records scanned' if partial else ''}}.</p>
% end
{{!svg}}
<ol class="attempts">
% for run in runs:
<li id="run-{{run.run_id}}"><h3>{{'Settled' if run.kind == 'settlement' else 'Attempt ' + (str(run.attempt) if run.attempt is not None else '-')}}
· {{shown(run.target)}} <span class="badge {{css(run)}}">{{shown(outcome(run))}}</span></h3>
<dl class="facts"><dt>Recorded</dt><dd>{{when(time(run))}} (run {{shown(run.run_id)}})</dd>
<dt>Started</dt><dd>{{when(run.started_ms)}}</dd><dt>Duration</dt><dd>{{duration(run.duration_ms)}}</dd>
<dt>Worker</dt><dd>{{shown(run.worker) or '-'}} {{shown(run.mode)}} {{shown(run.container[:12])}}</dd>
<dt>Exit code</dt><dd>{{run.exit_code if run.exit_code is not None else '-'}}</dd>
% if run.settled is not None:
<dt>Entry settled</dt><dd>{{run.settled.value}}</dd>
% end
% if run.error:
<dt>Error</dt><dd class="error">{{shown(run.error)}}</dd>
% end
% if run.reason:
<dt>Reason</dt><dd>{{shown(run.reason)}}</dd>
% end
</dl>
% if run.stdout:
<details open><summary>stdout (its end)</summary><pre class="tail">{{shown(run.stdout)}}</pre></details>
% end
% if run.stderr:
<details open><summary>stderr (its end)</summary><pre class="tail">{{shown(run.stderr)}}</pre></details>
% end
</li>
% end
</ol></section>
""")

DEAD_LETTERS = SimpleTemplate("""
% if error:
<p class="error">{{error}}</p>
% end
% if not letters:
<p class="muted">The dead-letter stream is empty.</p>
% else:
<form method="post" action="/dead-letters/redrive"><input type="hidden" name="csrf" value="{{csrf}}">
<p class="actions"><button>Redrive selected</button>
<button formaction="/dead-letters/purge" data-confirm="Delete the selected dead letters?">Purge selected</button>
% if not can_act:
<span class="muted">Log in to redrive or purge.</span>
% end
</p>
<table><thead><tr><th></th><th>Dead-lettered</th><th>Original entry</th><th>Functions</th><th>Attempts</th><th>Reason</th>
<th>Last attempt</th><th></th></tr></thead><tbody>
% for letter in letters:
<tr><td><input type="checkbox" name="ids" value="{{letter.dlq_id}}" aria-label="select {{letter.dlq_id}}"></td>
<td class="nowrap"><a href="/dead-letters/{{letter.dlq_id}}">{{when(letter.dead_lettered_ms)}}</a></td>
<td class="nowrap"><a href="/runs/{{url(letter.original_id)}}">{{shown(letter.original_id)}}</a></td>
<td>{{shown(', '.join(letter.targets)) or '-'}}</td>
<td>{{letter.attempts if letter.attempts is not None else shown(letter.attempts_text[:40]) or '-'}}</td>
<td>{{shown(letter.cause)}}</td>
<td>
% if letter.run_status:
{{shown(letter.run_status)}}{{', exit code %d' % letter.exit_code if letter.exit_code is not None else ''}}
% if letter.stderr:
<details><summary>stderr</summary><pre class="tail">{{shown(letter.stderr)}}</pre></details>
% end
% else:
-
% end
</td>
<td class="row-actions"><button name="one" value="{{letter.dlq_id}}">Redrive</button>
<button name="one" value="{{letter.dlq_id}}" formaction="/dead-letters/purge" data-confirm="Delete this dead letter?">Purge</button></td></tr>
% end
</tbody></table></form>
% if more:
<p class="muted">The newest {{len(letters)}} are shown.</p>
% end
% end
""")

DEAD_LETTER = SimpleTemplate("""
<dl class="facts"><dt>Dead-letter id</dt><dd>{{letter.dlq_id}}</dd>
<dt>Original</dt><dd>{{shown(letter.original_stream)}} <a href="/runs/{{url(letter.original_id)}}">{{shown(letter.original_id)}}</a></dd>
<dt>Consumer</dt><dd>{{shown(letter.group)}} / {{shown(letter.consumer)}}</dd>
<dt>Dead-lettered</dt><dd>{{when(letter.dead_lettered_ms)}}</dd>
<dt>Attempts</dt><dd>{{letter.attempts if letter.attempts is not None else shown(letter.attempts_text[:40]) or '-'}}</dd>
<dt>Reason</dt><dd>{{shown(letter.reason)}}</dd>
% if letter.schedule:
<dt>Schedule</dt><dd>{{shown(letter.schedule)}}</dd>
% end
% if letter.run_status:
<dt>Last attempt</dt><dd>{{shown(letter.run_status)}}{{', exit code %d' % letter.exit_code if letter.exit_code is not None else ''}}
% if letter.run_id:
(<a href="/runs/{{url(letter.run_id)}}">run {{shown(letter.run_id)}}</a>)
% end
</dd>
% end
% if letter.truncated:
<dt>Truncated</dt><dd>the event was too big to keep whole; it cannot be redriven</dd>
% end
</dl>
<form method="post" action="/dead-letters/redrive"><input type="hidden" name="csrf" value="{{csrf}}">
<input type="hidden" name="ids" value="{{letter.dlq_id}}"><button>Redrive</button>
<button formaction="/dead-letters/purge" data-confirm="Delete this dead letter?">Purge</button></form>
<h2>Event</h2><pre class="event">{{shown(event)}}</pre>
% if letter.stderr:
<h2>stderr of the last attempt (its end)</h2><pre class="tail">{{shown(letter.stderr)}}</pre>
% end
""")

REPLAY = SimpleTemplate("""
<p>Sends a time range of the stream through a function again, as new entries (as <code>relay replay</code> does).
Nothing is added before you have seen the count.</p>
% if error:
<p class="error">{{error}}</p>
% end
<form method="post" action="/replay" class="filters"><input type="hidden" name="csrf" value="{{csrf}}">
<label>Since <input name="since" required value="{{form.get('since', '')}}" placeholder="1h, RFC 3339 or an entry id"></label>
<label>Until <input name="until" value="{{form.get('until', '')}}" placeholder="now"></label>
<label>Function <input name="function" value="{{form.get('function', '')}}" placeholder="every matching function"></label>
<label>Handler <input name="handler" value="{{form.get('handler', '')}}"></label>
<label class="check"><input type="checkbox" name="failed_only" value="1"{{!' checked' if form.get('failed_only') else ''}}> failed only</label>
<button>Count (dry run)</button></form>
% if jobs:
<h2>Recent replays</h2><ul>
% for job in jobs:
<li><a href="/replay/{{job.job_id}}">#{{job.job_id}}</a> since {{shown(job.request.since)}}: {{job.state}}</li>
% end
</ul>
% end
""")

REPLAY_JOB = SimpleTemplate("""
<dl class="facts" id="replay" data-poll="/api/replay/{{job.job_id}}" data-state="{{job.state}}">
<dt>Range</dt><dd>since {{shown(job.request.since)}} until {{shown(job.request.until)}}</dd>
<dt>For</dt><dd>{{shown(job.request.function or 'every function whose rules match')}}{{'/' + shown(job.request.handler) if job.request.handler else ''}}{{' (failed only)' if job.request.failed_only else ''}}</dd>
<dt>State</dt><dd data-field="state">{{job.state}}</dd>
<dt>Entries read</dt><dd data-field="read">{{job.tally.read}}</dd>
<dt>Entries to replay</dt><dd data-field="entries">{{job.tally.entries}}</dd>
<dt>Copies to add</dt><dd data-field="copies">{{job.tally.total}}</dd>
<dt>Added</dt><dd data-field="added">{{job.added}}</dd>
<dt>Skipped</dt><dd>{{job.tally.schedules}} schedule occurrences, {{job.tally.replays}} earlier copies,
{{job.tally.unreadable}} unreadable{{', %d not failed' % job.tally.not_failed if job.request.failed_only else ''}}</dd>
% if job.error:
<dt>Error</dt><dd class="error">{{job.error}}</dd>
% end
</dl>
% if job.state == 'counted' and job.tally.total:
<form method="post" action="/replay/{{job.job_id}}/add"><input type="hidden" name="csrf" value="{{csrf}}">
<button>Add {{job.tally.total}} {{'copy' if job.tally.total == 1 else 'copies'}} to the stream</button></form>
% elif job.state == 'counted':
<p class="muted">Nothing to add.</p>
% end
""")

LOGIN = SimpleTemplate("""
% if not can_login:
<p class="error">No console token is set: set one with <code>relay secret set console-token</code> on this host.</p>
% else:
% if failed:
<p class="error">That is not the console token.</p>
% end
<form method="post" action="/login" class="login"><input type="hidden" name="next" value="{{next}}">
<input type="text" name="username" value="relay" autocomplete="username" hidden>
<label>Console token <input type="password" name="token" autocomplete="current-password" autofocus required></label>
<button>Log in</button></form>
% end
""")

MESSAGE = SimpleTemplate("""<p class="{{kind}}">{{text}}</p><p><a href="{{back}}">Back</a></p>""")
