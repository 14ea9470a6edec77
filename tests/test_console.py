"""The console over HTTP: a real ``relay console`` process, a real redis-server, a plain HTTP client.

Pages render, filters filter, new runs come as JSON, redrive and purge need
a login and a CSRF token, a non-loopback bind needs a token, whatever a
producer or a handler wrote comes back escaped, and every answer carries the CSP.
"""

import json
import re
import subprocess
import time

import pytest

from relay.console.heartbeat import FunctionState, Heartbeat, Pulse
from relay.runs.record import Run, RunStatus, Settled
from relay.stream.keys import dlq_stream, runs_stream
from tests.support.console import console_command, set_token, start_console
from tests.support.redis_server import free_port
from tests.support.relay_process import ROOT
from tests.support.workers import write_function

pytestmark = pytest.mark.integration

STREAM, GROUP = "events", "workers"
TOKEN = "a-long-console-token-for-tests"
HOSTILE_EVENT = ('{"name": "<script>alert(1)</script>", "bio": "\\"><img src=x onerror=alert(2)>", '
                 '"term": "\\u001b[31mred\\u001b]0;title\\u0007"}')


@pytest.fixture
def state(tmp_path):
    directory = tmp_path / "state"
    directory.mkdir()
    return directory


@pytest.fixture
def console(redis_client, redis_server, state):
    redis_client.xgroup_create(STREAM, GROUP, id="$", mkstream=True)
    set_token(state, TOKEN)
    served = start_console(state, redis_server)
    yield served
    served.stop()


def record(client, **fields):
    values = {"kind": "run", "function": "orders", "handler": "app.handler", "attempt": 1, "host": "w1", "pid": 7,
              "status": RunStatus.SUCCEEDED, "started_ms": int(time.time() * 1000) - 50, "duration_ms": 12.5,
              "exit_code": 0, **fields}
    return client.xadd(runs_stream(STREAM), Run(**values).fields()).decode()


def test_every_page_renders_with_the_csp_and_the_assets_are_served(console, redis_client):
    entry = redis_client.xadd(STREAM, {"event": '{"a": 1}'}).decode()
    run_id = record(redis_client, entry=entry)
    letter = redis_client.xadd(dlq_stream(STREAM), {"event": "{}", "original_id": entry, "reason": "r"}).decode()
    for path in ("/fleet", "/functions", "/runs", f"/runs/{run_id}", f"/runs/{entry}", "/dead-letters",
                 f"/dead-letters/{letter}", "/replay", "/login"):
        answer = console.get(path)
        assert answer.status_code == 200, (path, answer.text)
        csp = answer.headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp and "'unsafe-inline'" not in csp
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert "<script>" not in answer.text and " style=" not in answer.text      # no inline script or style
        assert not re.search(r"<[^>]*\son[a-z]+\s*=", answer.text)                   # nor an event handler
    assert console.get("/").headers["Location"].endswith("/fleet")
    css, js = console.get("/assets/console.css"), console.get("/assets/console.js")
    assert css.headers["Content-Type"].startswith("text/css") and "--accent" in css.text
    assert js.headers["Content-Type"].startswith("text/javascript") and "textContent" in js.text
    icon = console.get("/assets/favicon.svg")
    assert icon.headers["Content-Type"] == "image/svg+xml" and icon.text.startswith("<svg")
    assert '<link rel="icon" href="/assets/favicon.svg"' in console.get("/fleet").text
    assert console.get("/assets/../app.py").status_code == 404
    assert "Content-Security-Policy" in console.get("/nothing-here").headers


def test_runs_filter_and_new_runs_come_as_json(console, redis_client):
    first = record(redis_client, function="orders")
    record(redis_client, function="billing", status=RunStatus.FAILED, exit_code=3, event_id="evt-9")
    page = console.get("/runs?function=billing").text
    assert "billing" in page and ">orders<" not in page
    assert ">orders<" in console.get("/runs?outcome=succeeded").text
    assert "billing" not in console.get("/runs?outcome=succeeded").text
    assert "billing" in console.get("/runs?event_id=evt-9").text
    assert "billing" not in console.get("/runs?event_id=other").text
    bad = console.get("/runs?since=yesterday-ish")
    assert bad.status_code == 400 and "yesterday-ish" in bad.text
    newest = re.search(r'data-after="([^"]*)"', console.get("/runs").text).group(1)
    assert console.get(f"/api/runs?after={newest}").json()["runs"] == []
    later = record(redis_client, function="orders", handler="<b>h</b>")
    polled = console.get(f"/api/runs?after={newest}").json()
    assert [run["run_id"] for run in polled["runs"]] == [later] and polled["after"] == later
    assert polled["runs"][0]["handler"] == "<b>h</b>"   # the script sets it as text
    assert console.get(f"/api/runs?after={first}&function=billing").json()["runs"][0]["function"] == "billing"
    assert console.get("/api/runs?after=not-an-id").status_code == 400


def test_hostile_values_are_escaped_on_every_page(console, redis_client):
    entry = redis_client.xadd(STREAM, {"event": HOSTILE_EVENT}).decode()
    record(redis_client, entry=entry, function="<script>f</script>", handler='"><img onerror=x>',
           status=RunStatus.FAILED, exit_code=1, stdout="out \x1b[2J<script>alert(3)</script>",
           stderr="err \x1b]0;pwned\x07 \"><img src=x onerror=alert(4)>", error="<i>boom</i>")
    redis_client.xadd(dlq_stream(STREAM), {"event": HOSTILE_EVENT, "original_id": entry,
                                           "reason": "<script>alert(5)</script>", "run_status": "failed",
                                           "stderr": "\x1b[31m<img onerror=alert(6)>"})
    Heartbeat(redis_client, STREAM, host="<script>h</script>", pid=1, version="<b>v</b>", pulse=lambda: Pulse(
        functions=[FunctionState("<img src=x onerror=alert(7)>", ready=False, outcome="failed",
                                 error="<script>alert(8)</script>", rules=(("h", '{"<a>": 1}'),))])).beat()
    for path in (f"/runs/{entry}", "/runs", "/dead-letters", "/fleet", "/functions"):
        text = console.get(path).text
        assert "<script>alert" not in text and "<img src=x" not in text and "<img onerror" not in text, path
        assert "\x1b" not in text and "\x07" not in text, path
    run_page = console.get(f"/runs/{entry}").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in run_page
    assert "\\x1b[2J" in run_page and "\\x1b]0;pwned\\x07" in run_page
    assert "\\u001b[31m" in run_page       # the event as JSON keeps its own escapes
    assert "&lt;i&gt;boom&lt;/i&gt;" in run_page
    assert "&lt;script&gt;alert(5)&lt;/script&gt;" in console.get("/dead-letters").text
    assert "&lt;img src=x onerror=alert(7)&gt;" in console.get("/functions").text


def test_redrive_and_purge_need_a_login_and_the_csrf_token(console, redis_client):
    entry = redis_client.xadd(STREAM, {"event": '{"n": 1}'}).decode()
    letters = [redis_client.xadd(dlq_stream(STREAM), {"event": f'{{"n": {n}}}', "original_id": entry,
                                                      "reason": "attempts exhausted for orders/app.handler"}).decode()
               for n in range(3)]
    assert console.post("/dead-letters/redrive", {"ids": letters[0]}).status_code == 403   # no login
    assert console.post("/login", {"token": "wrong", "next": "/fleet"}).status_code == 403
    assert redis_client.xlen(dlq_stream(STREAM)) == 3
    assert console.login(TOKEN).headers["Location"].endswith("/fleet")
    cookie = console.http.cookies.get("relay_console")
    assert cookie and "HttpOnly" in console.post("/login", {"token": TOKEN}).headers["Set-Cookie"]
    assert "samesite=strict" in console.post("/login", {"token": TOKEN}).headers["Set-Cookie"].lower()
    refused = console.post("/dead-letters/redrive", {"ids": letters[0]})     # no CSRF token
    assert refused.status_code == 403 and "CSRF" in refused.text
    assert console.post("/dead-letters/redrive", {"ids": letters[0], "csrf": "0" * 64}).status_code == 403
    assert redis_client.xlen(dlq_stream(STREAM)) == 3
    csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', console.get("/dead-letters").text).group(1)
    done = console.post("/dead-letters/redrive", {"one": letters[0], "csrf": csrf})
    assert done.status_code == 303 and done.headers["Location"].endswith("/dead-letters?redriven=1")
    added = redis_client.xrevrange(STREAM, count=1)[0][1]
    assert added[b"redriven_from"] == letters[0].encode() and added[b"event"] == b'{"n": 0}'
    assert "Redriven 1 entry." in console.get("/dead-letters?redriven=1").text
    assert console.post("/dead-letters/purge", {"ids": letters[1:], "csrf": csrf}).status_code == 303
    assert redis_client.xlen(dlq_stream(STREAM)) == 0
    unknown = console.post("/dead-letters/purge", {"ids": letters[1], "csrf": csrf})
    assert unknown.status_code == 400 and "nothing was changed" in unknown.text
    assert console.post("/logout", {"csrf": csrf}).status_code == 303


def test_the_fleet_shows_workers_alive_and_gone(console, redis_client):
    redis_client.xadd(STREAM, {"event": "{}"})
    Heartbeat(redis_client, STREAM, host="alive-host", pid=1, version="0.1.0",
              pulse=lambda: Pulse(warm_containers=5, in_flight=2, buffered=3)).beat()
    Heartbeat(redis_client, STREAM, host="gone-host", pid=2, version="0.1.0", pulse=Pulse,
              clock=lambda: time.time() - 16).beat()
    page = console.get("/fleet").text
    assert re.search(r"alive-host/1</td><td><span class=\"badge alive\">alive", page)
    assert re.search(r"gone-host/2</td><td><span class=\"badge gone\">gone", page)
    assert "<dt>Stream length</dt><dd>1</dd>" in page


def test_replay_counts_first_then_adds(console, redis_client, tmp_path):
    for n in range(3):
        redis_client.xadd(STREAM, {"event": f'{{"n": {n}}}'})
    assert console.post("/replay", {"since": "1h"}).status_code == 403       # an action: login first
    console.login(TOKEN)
    csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', console.get("/replay").text).group(1)
    bad = console.post("/replay", {"since": "whenever", "csrf": csrf})
    assert bad.status_code == 400 and "whenever" in bad.text
    # The console was started with --dir=/nonexistent: no function matches, so nothing is to be added.
    counted = console.post("/replay", {"since": "1h", "csrf": csrf})
    assert counted.status_code == 303
    job = counted.headers["Location"].rsplit("/", 1)[1]
    for _ in range(100):
        progress = console.get(f"/api/replay/{job}").json()
        if progress["state"] != "counting":
            break
        time.sleep(0.05)
    assert progress["state"] == "counted" and progress["read"] == 3 and progress["copies"] == 0
    assert "Nothing to add." in console.get(f"/replay/{job}").text


def test_reading_on_a_public_address_needs_the_login(redis_client, redis_server, state):
    set_token(state, TOKEN)
    served = start_console(state, redis_server, host="0.0.0.0")
    try:
        answer = served.get("/runs?function=x")
        assert answer.status_code == 303 and answer.headers["Location"] == "/login?next=%2Fruns%3Ffunction%3Dx"
        assert served.get("/assets/console.js").status_code == 200
        served.login(TOKEN)
        assert served.get("/fleet").status_code == 200
    finally:
        served.stop()


def test_a_public_address_without_a_token_is_refused_at_start(redis_server, state):
    port = free_port()
    command, env = console_command(state, redis_server, f"--addr=0.0.0.0:{port}")
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"relay console: --addr=0.0.0.0:{port} listens on 0.0.0.0, which is not a loopback address, and no console "
        f"token is set: set one with 'relay secret set console-token', or listen on 127.0.0.1:{port}"]


def test_actions_on_loopback_without_a_token_say_how_to_set_one(redis_client, redis_server, state):
    served = start_console(state, redis_server)
    try:
        assert served.get("/fleet").status_code == 200
        refused = served.post("/dead-letters/purge", {"ids": "1-0"})
        assert refused.status_code == 403 and "relay secret set console-token" in refused.text
    finally:
        served.stop()


def test_pages_answer_whole_over_a_large_ledger(console, redis_client):
    """Every page reads the ledger in bounded pieces; how fast is bench/console.py's figure, not a test's."""
    now = int(time.time() * 1000)
    pipeline = redis_client.pipeline(transaction=False)
    for n in range(20_000):
        fields = Run(kind="run", entry=f"{now - 3_000_000 + n}-0", function=f"fn{n % 20}", handler="app.handler",
                     attempt=1, host="w", pid=1, started_ms=now - 3_000_000 + n * 150, duration_ms=10.0 + n % 50,
                     status=RunStatus.FAILED if n % 7 == 0 else RunStatus.SUCCEEDED, exit_code=0,
                     stdout="x" * 200, stderr="y" * 200, settled=Settled.ACKNOWLEDGED).fields()
        pipeline.xadd(runs_stream(STREAM), fields)
        if n % 5000 == 4999:
            pipeline.execute()
    pipeline.execute()
    for path in ("/runs", "/runs?function=fn3&outcome=failed", "/runs?function=nothing-matches", "/functions",
                 "/fleet", "/dead-letters"):
        assert console.get(path).status_code == 200, path
    assert console.get("/runs").text.count("<tr") > 20
    assert "fn3" in console.get("/functions").text


def test_replay_adds_after_its_count_with_its_progress(redis_client, redis_server, state, tmp_path):
    write_function(tmp_path / "functions", "orders", "runtime: python3.14\nevents:\n  - handler: app.handler\n"
                   "    pattern: {kind: [order]}\n", {"app.py": "def handler(event, context):\n    pass\n"})
    redis_client.xgroup_create(STREAM, GROUP, id="$", mkstream=True)
    sources = [redis_client.xadd(STREAM, {"event": json.dumps({"kind": kind})}).decode()
               for kind in ("order", "other", "order")]
    set_token(state, TOKEN)
    served = start_console(state, redis_server, functions=str(tmp_path / "functions"))
    try:
        served.login(TOKEN)
        csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', served.get("/replay").text).group(1)
        job = served.post("/replay", {"since": "1h", "function": "orders", "csrf": csrf}).headers["Location"]
        job = job.rsplit("/", 1)[1]
        progress = wait_for(served, job, "counted")
        assert (progress["read"], progress["entries"], progress["copies"]) == (3, 2, 2)
        assert redis_client.xlen(STREAM) == 3                     # the count added nothing
        assert "Add 2 copies to the stream" in served.get(f"/replay/{job}").text
        assert served.post(f"/replay/{job}/add", {}).status_code == 403      # no CSRF token
        assert served.post(f"/replay/{job}/add", {"csrf": csrf}).status_code == 303
        assert wait_for(served, job, "done")["added"] == 2
        copies = redis_client.xrange(STREAM, f"({sources[-1]}", "+")
        assert [fields[b"replay_of"].decode() for _, fields in copies] == [sources[0], sources[2]]
        assert {fields[b"replay_for"] for _, fields in copies} == {b"orders"}
        assert served.post(f"/replay/{job}/add", {"csrf": csrf}).status_code == 400   # once only
    finally:
        served.stop()


def wait_for(served, job, state):
    for _ in range(200):
        progress = served.get(f"/api/replay/{job}").json()
        if progress["state"] == state:
            return progress
        time.sleep(0.05)
    raise AssertionError(progress)
