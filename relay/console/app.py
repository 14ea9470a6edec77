"""The console's routes: a bottle app over one Redis client, every read bounded (relay.console.reads).

    GET  /fleet /functions /runs /runs/<id> /dead-letters /dead-letters/<id> /replay /replay/<job>
    GET  /api/runs?after=<run id>&<filters>   the runs page's new rows, as JSON
    GET  /api/replay/<job>                    a replay's progress, as JSON
    POST /dead-letters/redrive /dead-letters/purge /replay /replay/<job>/add   (login and CSRF token)
    GET  /login, POST /login /logout;  GET /assets/console.css /assets/console.js /assets/favicon.svg

Every answer carries a strict Content-Security-Policy (scripts and styles
from the console itself, no inline script or style, no framing) and the
headers that go with it, added by a wrapper around the whole app so that
error pages get them too. Who may read and act is relay.console.auth's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import bottle
import redis

from relay.console import pages, reads
from relay.console.auth import SESSION_COOKIE, SESSION_S, Auth
from relay.console.charts import CHART_CSS, duration_chart, runs_chart
from relay.console.heartbeat import FunctionState, read_workers
from relay.console.replays import ReplayRequest, Replays
from relay.errors import DeadLetterError, RelayError, RunsError
from relay.runs.reader import OUTCOMES, RunFilter, Runs, checked_id, parse_outcomes
from relay.runs.record import Run
from relay.runs.times import parse_time
from relay.stream.deadletters import DeadLetters

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = (("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
                    ("X-Frame-Options", "DENY"), ("Referrer-Policy", "no-referrer"),
                    ("Cross-Origin-Opener-Policy", "same-origin"))
ASSETS = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8",
          "favicon.svg": "image/svg+xml"}
RUNS_SHOWN = 50
DEAD_LETTERS_SHOWN = 200
POLL_LIMIT = 100


@dataclass(frozen=True)
class Site:
    """What the console reads and who may use it."""

    client: redis.Redis
    stream: str
    group: str
    auth: Auth
    replays: Replays
    clock: Callable[[], float] = time.time


@dataclass(frozen=True)
class FunctionView:
    name: str
    state: FunctionState | None
    count: int
    runs_chart: str
    duration_chart: str


def console_app(site: Site) -> WSGIApplication:
    """The console as one WSGI application, its security headers on every answer."""
    return secured(_routes(site))


def secured(app: WSGIApplication) -> WSGIApplication:
    def wrapped(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            names = {name.lower() for name, _ in SECURITY_HEADERS}
            kept = [(name, value) for name, value in headers if name.lower() not in names]
            return start_response(status, kept + list(SECURITY_HEADERS), exc_info)
        return app(environ, start)
    return wrapped


def charts(runs: list[Run], now_ms: int) -> tuple[str, str]:
    """The two charts of one function (relay.console.charts)."""
    return runs_chart(runs, now_ms), duration_chart(runs, now_ms)


def _routes(site: Site) -> bottle.Bottle:   # noqa: C901 -- one route a page, read top to bottom
    app = bottle.Bottle()
    auth = site.auth
    runs_ledger = Runs(site.client, site.stream)
    letters = DeadLetters(site.client, site.stream)

    def session() -> str | None:
        cookie = bottle.request.get_cookie(SESSION_COOKIE)
        return cookie if auth.session_valid(cookie) else None

    def page(title: str, body: str, here: str = "", notice: str = "", status: int = 200) -> str:
        cookie = session()
        bottle.response.status = status
        bottle.response.set_header("Cache-Control", "no-store")
        return pages.layout(title, body, here=here, signed_in=cookie is not None, can_login=auth.can_login,
                            csrf=auth.csrf(cookie) if cookie else "", notice=notice)

    def csrf() -> str:
        cookie = session()
        return auth.csrf(cookie) if cookie else ""

    def now_ms() -> int:
        return int(site.clock() * 1000)

    @app.hook("before_request")
    def guard() -> None:
        path = bottle.request.path
        if path.startswith("/assets/") or path == "/login":
            return
        if bottle.request.method == "POST":
            if not auth.can_login:
                raise _refused(page, "Actions need the console token, and none is set: set one with "
                                     "'relay secret set console-token' on this host.")
            cookie = bottle.request.get_cookie(SESSION_COOKIE)
            if not auth.session_valid(cookie):
                raise _refused(page, "Log in first: actions need the console token.")
            if not auth.csrf_valid(cookie, bottle.request.forms.get("csrf")):
                raise _refused(page, "This form has expired or did not come from the console (no valid CSRF "
                                     "token); nothing was changed. Reload the page and try again.")
            return
        if not auth.open_reading and session() is None:
            target = bottle.request.fullpath + ("?" + bottle.request.query_string if bottle.request.query_string
                                                else "")
            raise bottle.HTTPResponse(status=303, headers={"Location": "/login?" + urlencode({"next": target})})

    @app.get("/")
    def home() -> None:
        bottle.redirect("/fleet", 303)

    @app.get("/assets/<name>")
    def asset(name: str) -> bytes:
        if name not in ASSETS:
            raise bottle.HTTPError(404, "no such asset")
        bottle.response.content_type = ASSETS[name]
        bottle.response.set_header("Cache-Control", "max-age=300")
        content = resources.files("relay.console").joinpath("assets", name).read_bytes()
        return content + CHART_CSS.encode() if name == "console.css" else content   # the charts' colours

    # --- login ---------------------------------------------------------------------------

    @app.get("/login")
    def login_form() -> str:
        return page("Log in", pages.render(pages.LOGIN, can_login=auth.can_login, failed=False,
                                           next=_local(bottle.request.query.get("next"))))

    @app.post("/login")
    def login() -> str:
        forms = bottle.request.forms
        if not auth.token_matches(forms.get("token") or ""):
            return page("Log in", pages.render(pages.LOGIN, can_login=auth.can_login, failed=True,
                                               next=_local(forms.get("next"))), status=403)
        bottle.response.set_cookie(SESSION_COOKIE, auth.new_session(), path="/", httponly=True, samesite="Strict",
                                   max_age=SESSION_S)
        bottle.redirect(_local(forms.get("next")), 303)
        return ""

    @app.post("/logout")
    def logout() -> None:
        bottle.response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="Strict")
        bottle.redirect("/fleet", 303)

    # --- fleet, functions ------------------------------------------------------------------

    @app.get("/fleet")
    def fleet() -> str:
        moment = now_ms()
        body = pages.render(pages.FLEET, workers=read_workers(site.client, site.stream),
                            backlog=reads.backlog(site.client, site.stream, site.group, moment), now_ms=moment)
        return page("Fleet", body, "/fleet")

    @app.get("/functions")
    def functions() -> str:
        moment = now_ms()
        states: dict[str, FunctionState] = {}
        for worker in read_workers(site.client, site.stream):   # newest beat first: its word counts
            if not worker.gone(moment):
                for state in worker.functions:
                    states.setdefault(state.name, state)
        recent = reads.recent_runs(site.client, site.stream, moment)
        views = []
        for name in sorted({*states, *recent.by_function}):
            runs = recent.by_function.get(name, [])
            drawn = charts(runs, moment)
            views.append(FunctionView(name, states.get(name), len(runs), *drawn))
        return page("Functions", pages.render(pages.FUNCTIONS, functions=views, recent=recent), "/functions")

    # --- runs ----------------------------------------------------------------------------

    @app.get("/runs")
    def runs() -> str:
        query = {name: bottle.request.query.getunicode(name) or "" for name in
                 ("function", "handler", "outcome", "since", "until", "event_id", "before")}
        error, found, cursor = "", list[Run](), None
        try:
            filters = _filters(query, now_ms())
            found, cursor = runs_ledger.page(filters, RUNS_SHOWN, before=query["before"] or None)
        except RunsError as problem:
            error = str(problem)
        kept = {name: value for name, value in query.items() if value and name != "before"}
        after = found[0].run_id if found else (_newest_id(site.client, runs_ledger.key) or "")
        body = pages.render(pages.RUNS, query=query, outcomes=OUTCOMES, runs=found, row=pages.row, error=error,
                            cursor=cursor, older="/runs?" + urlencode({**kept, "before": cursor or ""}),
                            poll="" if query["before"] or query["until"] else "/api/runs?" + urlencode(kept),
                            after=after)
        return page("Runs", body, "/runs", status=400 if error else 200)

    @app.get("/api/runs")
    def runs_since() -> dict[str, Any]:
        query = {name: bottle.request.query.getunicode(name) or "" for name in
                 ("function", "handler", "outcome", "since", "until", "event_id", "after")}
        bottle.response.set_header("Cache-Control", "no-store")
        try:
            filters = _filters(query, now_ms())
            after = query["after"] or None
            found, _ = runs_ledger.page(filters, POLL_LIMIT, after=after) if after else ([], None)
        except RunsError as problem:
            raise bottle.HTTPError(400, str(problem)) from None
        newest = found[0].run_id if found else query["after"]
        return {"after": newest, "runs": [pages.row_json(run) for run in found]}

    @app.get("/runs/<run_id>")
    def run_page(run_id: str) -> str:
        try:
            checked_id(run_id, "a run id or an entry id")
        except RunsError as problem:
            return page("Run", pages.render(pages.MESSAGE, kind="error", text=str(problem), back="/runs"),
                        status=404)
        found = runs_ledger.get(run_id)
        entry = found.entry if found is not None and found.entry else run_id
        records, cursor = runs_ledger.page(RunFilter(entry=entry), 200, newest_first=False, pages=16)
        event = reads.event_of(site.client, site.stream, entry)
        body = pages.render(pages.RUN, entry=entry, first=records[0] if records else None, runs=records,
                            partial=cursor is not None, event=None if event is None else reads.pretty_event(event),
                            svg=pages.timeline(records), css=pages.outcome_class, outcome=pages.outcome,
                            time=pages.run_time)
        return page(f"Entry {entry}", body, "/runs")

    # --- dead letters ----------------------------------------------------------------------

    @app.get("/dead-letters")
    def dead_letters() -> str:
        found = letters.newest(limit=DEAD_LETTERS_SHOWN + 1)[::-1]
        notice = ""
        for word in ("redriven", "purged"):
            count = bottle.request.query.get(word, "")
            if count.isdigit():
                notice = f"{word.capitalize()} {count} {'entry' if count == '1' else 'entries'}."
        body = pages.render(pages.DEAD_LETTERS, letters=found[:DEAD_LETTERS_SHOWN],
                            more=len(found) > DEAD_LETTERS_SHOWN, csrf=csrf(), can_act=session() is not None,
                            error="")
        return page("Dead letters", body, "/dead-letters", notice=notice)

    @app.get("/dead-letters/<dlq_id>")
    def dead_letter(dlq_id: str) -> str:
        try:
            [letter] = letters.get([dlq_id])
        except DeadLetterError as problem:
            return page("Dead letter", pages.render(pages.MESSAGE, kind="error", text=str(problem),
                                                    back="/dead-letters"), "/dead-letters", status=404)
        body = pages.render(pages.DEAD_LETTER, letter=letter, event=reads.pretty_event(letter.event), csrf=csrf())
        return page(f"Dead letter {dlq_id}", body, "/dead-letters")

    def chosen_ids() -> list[str]:
        forms = bottle.request.forms
        one = forms.getunicode("one")
        return [one] if one else [value for value in forms.getall("ids") if value]

    @app.post("/dead-letters/redrive")
    def redrive() -> str:
        ids = chosen_ids()
        try:
            done = letters.redrive(ids)
        except DeadLetterError as problem:
            return _failed(page, str(problem))
        bottle.redirect(f"/dead-letters?redriven={len(done)}", 303)
        return ""

    @app.post("/dead-letters/purge")
    def purge() -> str:
        try:
            done = letters.purge(chosen_ids())
        except DeadLetterError as problem:
            return _failed(page, str(problem))
        bottle.redirect(f"/dead-letters?purged={done}", 303)
        return ""

    # --- replay --------------------------------------------------------------------------

    def replay_form(form: dict[str, str], error: str = "", status: int = 200) -> str:
        jobs = list(site.replays.jobs.values())[::-1]
        return page("Replay", pages.render(pages.REPLAY, form=form, error=error, csrf=csrf(), jobs=jobs), "/replay",
                    status=status)

    @app.get("/replay")
    def replay() -> str:
        return replay_form({})

    @app.post("/replay")
    def replay_count() -> str:
        forms = bottle.request.forms
        form = {name: (forms.getunicode(name) or "").strip() for name in
                ("since", "until", "function", "handler", "failed_only")}
        try:
            if form["handler"] and not form["function"]:
                raise RunsError("a handler needs its function")
            job = site.replays.count(ReplayRequest(since=form["since"], until=form["until"] or "now",
                                                   function=form["function"] or None,
                                                   handler=form["handler"] or None,
                                                   failed_only=bool(form["failed_only"])))
        except RelayError as problem:
            return replay_form(form, str(problem), status=400)
        bottle.redirect(f"/replay/{job.job_id}", 303)
        return ""

    @app.get("/replay/<job_id>")
    def replay_job(job_id: str) -> str:
        job = site.replays.jobs.get(job_id)
        if job is None:
            raise bottle.HTTPError(404, "no such replay")
        return page(f"Replay #{job_id}", pages.render(pages.REPLAY_JOB, job=job, csrf=csrf()), "/replay")

    @app.get("/api/replay/<job_id>")
    def replay_progress(job_id: str) -> dict[str, object]:
        job = site.replays.jobs.get(job_id)
        if job is None:
            raise bottle.HTTPError(404, "no such replay")
        bottle.response.set_header("Cache-Control", "no-store")
        return job.to_json()

    @app.post("/replay/<job_id>/add")
    def replay_add(job_id: str) -> str:
        if site.replays.add(job_id) is None:
            return _failed(page, "That replay cannot be added now: it is not counted, already added, or another "
                                 "replay is adding.", back=f"/replay/{job_id}")
        bottle.redirect(f"/replay/{job_id}", 303)
        return ""

    @app.error(404)
    def not_found(error: bottle.HTTPError) -> str:
        return pages.layout("Not found", pages.render(pages.MESSAGE, kind="error", text=str(error.body or "Not found"),
                                                      back="/fleet"))

    return app


def _filters(query: dict[str, str], now_ms: int) -> RunFilter:
    return RunFilter(function=query["function"] or None, handler=query["handler"] or None,
                     outcomes=parse_outcomes(query["outcome"], "outcome") if query["outcome"] else (),
                     since_ms=parse_time(query["since"], "since", now_ms) if query["since"] else None,
                     until_ms=parse_time(query["until"], "until", now_ms) if query["until"] else None,
                     event_id=query["event_id"] or None)


def _newest_id(client: redis.Redis, key: str) -> str | None:
    found = client.xrevrange(key, "+", "-", count=1)
    if not found:
        return None
    raw = found[0][0]
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _local(target: str | None) -> str:
    """*target* when it is a path of this console (never another site's address), else /fleet."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/fleet"


def _refused(page: Callable[..., str], text: str) -> bottle.HTTPResponse:
    return bottle.HTTPResponse(page("Refused", pages.render(pages.MESSAGE, kind="error", text=text, back="/fleet"),
                                    status=403), status=403,
                               headers={"Content-Type": "text/html; charset=UTF-8", "Cache-Control": "no-store"})


def _failed(page: Callable[..., str], text: str, back: str = "/dead-letters") -> str:
    return page("Nothing was changed", pages.render(pages.MESSAGE, kind="error", text=text, back=back), status=400)

