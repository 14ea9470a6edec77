"""The console in a real headless Chromium: a real ``relay console``, a real redis-server, the session's browser.

Each page shows what the workers and the ledger hold; the runs form filters;
a new run appears without a reload; a run's page shows every attempt with
both tails; the login form lets an operator redrive a dead letter and
replay a range after its dry run; an action without a login or without its
CSRF token changes nothing; an event full of markup and terminal escapes is
shown as text and runs nothing; and no page breaks its Content-Security-Policy.

With RELAY_SCREENSHOTS=docs/console the browser writes the pictures
docs/console.md shows (tests.support.browser).
"""

import json
import random
import re
import time

import pytest
import requests
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from relay.console.heartbeat import FunctionState, Heartbeat, Pulse
from relay.runs.record import Run, RunStatus, Settled
from relay.stream.keys import dlq_stream, runs_stream
from tests.support.console import set_token, start_console
from tests.support.workers import write_function

pytestmark = pytest.mark.integration

STREAM, GROUP = "events", "workers"
TOKEN = "a-long-console-token-for-the-browser"
WINDOW = (1280, 900)
HOSTILE = {"name": "<script>document.title='pwned-1'</script>",
           "bio": "\"><img src=x onerror=\"window.pwned=2\">",
           "term": "\x1b[31mred\x1b]0;title\x07"}
RELOADING = (StaleElementReferenceException, NoSuchElementException)   # a page the script reloads meanwhile
TEMPLATE = ("runtime: python3.14\nevents:\n  - handler: app.charge\n    pattern: {kind: [order]}\n"
            "  - handler: app.receipt\n    pattern: {kind: [order], paid: [true]}\n")


@pytest.fixture
def state(tmp_path):
    directory = tmp_path / "state"
    directory.mkdir()
    return directory


@pytest.fixture
def console(redis_client, redis_server, state, tmp_path):
    write_function(tmp_path / "functions", "orders", TEMPLATE, {"app.py": "def charge(event):\n    pass\n"})
    redis_client.xgroup_create(STREAM, GROUP, id="$", mkstream=True)
    set_token(state, TOKEN)
    served = start_console(state, redis_server, functions=str(tmp_path / "functions"))
    yield served
    served.stop()


@pytest.fixture
def page(browser):
    """The browser with the docs' viewport (WINDOW); its console log emptied."""
    viewport(browser, *WINDOW)
    browser.console_messages()
    yield browser
    browser.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def viewport(browser, width, height):
    browser.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                   {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})


# --- realistic data -------------------------------------------------------------------------


def record(client, run_id="*", **fields):
    values = {"kind": "run", "function": "orders", "handler": "app.charge", "attempt": 1, "host": "relay-a",
              "pid": 4121, "mode": "warm", "status": RunStatus.SUCCEEDED, "exit_code": 0, "duration_ms": 84.0,
              "started_ms": int(time.time() * 1000) - 100, **fields}
    return client.xadd(runs_stream(STREAM), Run(**values).fields(), id=run_id).decode()


def seed(client):
    """A fleet, an hour of runs, an entry tried three times, and dead letters, as a busy hour leaves them.

    Returns the ids the tests look at: the retried entry, a failed entry's run and the dead letters."""
    now = int(time.time() * 1000)
    rules = {"orders": (("app.charge", '{"kind": ["order"]}'), ("app.receipt", '{"kind": ["order"], "paid": [true]}')),
             "thumbnails": (("resize.handler", '{"bucket": ["uploads"], "type": [{"prefix": "image/"}]}'),),
             "invoices": (("main.render", '{"kind": ["invoice"]}'),)}
    states = [FunctionState("orders", True, "succeeded", rules=rules["orders"]),
              FunctionState("thumbnails", True, "succeeded", rules=rules["thumbnails"],
                            schedules=(("resize.sweep", "*/15 * * * *", "UTC"),)),
              FunctionState("invoices", False, "failed", error="template.yaml: events[0].timeout: '90 seconds' is "
                                                              "not a duration (write it as 90s)",
                            rules=rules["invoices"])]
    for host, pid, version, up_s, silent_s, stopped, pulse in (
            ("relay-a", 4121, "0.9.0", 3 * 86400 + 7200, 1, False, Pulse(states, 4, 2, 7)),
            ("relay-b", 977, "0.9.0", 5 * 3600 + 1260, 3, False, Pulse(states, 3, 0, 0)),
            ("relay-c", 52, "0.9.0", 2 * 3600, 40, False, Pulse(states, 1, 1, 0)),
            ("relay-old", 311, "0.8.2", 9 * 86400, 900, True, Pulse(states[:2], 0, 0, 0))):
        heartbeat = Heartbeat(client, STREAM, host=host, pid=pid, version=version, pulse=lambda pulse=pulse: pulse,
                              clock=lambda silent_s=silent_s: time.time() - silent_s)
        heartbeat.started_ms = int((time.time() - up_s) * 1000)
        heartbeat.beat(stopped=stopped)

    rng = random.Random(33)
    stamps = sorted(now - 3_550_000 + int(rng.random() * 3_400_000) for _ in range(700))
    for sequence, stamp in enumerate(stamps):
        function, handler = rng.choice((("orders", "app.charge"), ("orders", "app.receipt"),
                                        ("thumbnails", "resize.handler"), ("thumbnails", "resize.handler")))
        status = rng.choices(list(RunStatus)[:4], weights=(90, 7, 2, 1))[0]
        host, pid = rng.choice((("relay-a", 4121), ("relay-b", 977)))
        record(client, f"{stamp}-{sequence}", entry=f"{stamp - 40}-0", function=function, handler=handler,
               host=host, pid=pid, status=status, started_ms=stamp - 300,
               exit_code={RunStatus.SUCCEEDED: 0, RunStatus.FAILED: 1, RunStatus.KILLED: 137}.get(status),
               duration_ms=rng.lognormvariate(4.6 if function == "orders" else 5.6, 0.5),
               event_id=f"evt_{stamp % 100000:05d}")

    event = {"kind": "order", "order_id": "ord_7F3K2", "customer": {"id": "cus_8812", "email": "ana@example.com"},
             "items": [{"sku": "MUG-BLUE", "qty": 2, "price": 1250}, {"sku": "TEE-L", "qty": 1, "price": 2400}],
             "paid": True, "event_id": "evt_order_7F3K2"}
    retried = client.xadd(STREAM, {"event": json.dumps(event)}).decode()
    base = int(retried.split("-")[0])
    common = {"entry": retried, "event_id": "evt_order_7F3K2", "mode": "cold"}
    record(client, function="orders", handler="app.charge", attempt=1, status=RunStatus.FAILED, exit_code=1,
           started_ms=base + 20, duration_ms=1840.0, container="3f9c2a71d0e4" + "0" * 52,
           stdout="charging ord_7F3K2: 4900 cents\ncalling payments API", settled=Settled.RETRY_DUE,
           stderr="Traceback (most recent call last):\n  File \"/function/app.py\", line 14, in charge\n"
                  "    response.raise_for_status()\nrequests.exceptions.HTTPError: 503 Server Error: Service "
                  "Unavailable for url: https://payments.internal/v2/charges", **common)
    record(client, function="orders", handler="app.charge", attempt=2, status=RunStatus.TIMED_OUT, exit_code=None,
           started_ms=base + 4000, duration_ms=5000.0, host="relay-b", pid=977, settled=Settled.RETRY_DUE,
           stdout="charging ord_7F3K2: 4900 cents\ncalling payments API", stderr="", **common)
    record(client, function="orders", handler="app.charge", attempt=3, status=RunStatus.SUCCEEDED, exit_code=0,
           started_ms=base + 12000, duration_ms=912.0, stdout="charging ord_7F3K2: 4900 cents\ncharged: ch_91XK",
           stderr="warning: retrying with idempotency key ord_7F3K2-charge", settled=Settled.PENDING, **common)
    record(client, function="orders", handler="app.receipt", attempt=1, status=RunStatus.SUCCEEDED, exit_code=0,
           started_ms=base + 13000, duration_ms=210.0, stdout="receipt sent to ana@example.com",
           settled=Settled.ACKNOWLEDGED, **common)

    letters = []
    for n, (sku, reason, status, code, stderr) in enumerate((
            ("MUG-RED", "attempts exhausted for orders/app.charge", "failed", "1",
             "KeyError: 'price'\n  File \"/function/app.py\", line 9, in charge"),
            ("POSTER-XL", "attempts exhausted for thumbnails/resize.handler", "killed", "137", ""),
            ("TEE-S", "attempts exhausted for orders/app.charge, orders/app.receipt", "timed out", "",
             "payments API did not answer in 5s"))):
        source = client.xadd(STREAM, {"event": json.dumps({"kind": "order", "order_id": f"ord_{n}", "sku": sku})})
        fields = {"event": json.dumps({"kind": "order", "order_id": f"ord_{n}", "sku": sku}),
                  "original_stream": STREAM, "original_id": source, "group": GROUP, "consumer": "relay-a",
                  "reason": reason, "attempts": "5", "timestamp": str(time.time_ns()), "run_status": status,
                  "stderr": stderr}
        if code:
            fields["exit_code"] = code
        letters.append(client.xadd(dlq_stream(STREAM), fields).decode())
    client.xreadgroup(GROUP, "relay-a", {STREAM: ">"}, count=1)    # one entry in flight
    return {"retried": retried, "letters": letters}


# --- helpers --------------------------------------------------------------------------------


def wait(browser, condition, timeout=15, what="the page"):
    try:
        return WebDriverWait(browser.driver, timeout, poll_frequency=0.1, ignored_exceptions=RELOADING).until(condition)
    except TimeoutException:
        pytest.fail(f"timed out waiting for {what}; {browser.driver.current_url} shows:\n{browser.text()}")


def texts(browser, selector):
    return [element.text for element in browser.driver.find_elements(By.CSS_SELECTOR, selector)]


def problems(browser):
    """What the page logged that a clean page would not: CSP violations, script errors, failed loads
    (a missing favicon included)."""
    return browser.console_messages()


def login(browser, base, next_path):
    browser.open(f"{base}/login?next={next_path}")
    browser.driver.find_element(By.NAME, "token").send_keys(TOKEN)
    browser.driver.find_element(By.CSS_SELECTOR, "form.login button").click()
    wait(browser, lambda driver: next_path in driver.current_url and "Log out" in browser.text(),
         what="the login to land on " + next_path)


# --- the pages ------------------------------------------------------------------------------


def test_every_page_shows_what_it_holds_and_keeps_its_policy(console, redis_client, page):
    ids = seed(redis_client)
    page.open(console.base + "/fleet")
    assert page.driver.title == "Fleet · Relay console"
    rows = {row.find_element(By.CSS_SELECTOR, "td").text: row.find_elements(By.CSS_SELECTOR, "td")
            for row in page.driver.find_elements(By.CSS_SELECTOR, "main table tbody tr")}
    assert [cell.text for cell in rows["relay-a/4121"][1:2] + rows["relay-a/4121"][5:9]] == ["alive", "3", "4", "2",
                                                                                             "7"]
    assert rows["relay-c/52"][1].text == "gone" and rows["relay-old/311"][1].text == "stopped"
    assert "Pending\n1" in page.text() and "Not yet delivered (lag)\n3" in page.text()
    assert "Stream length\n4" in page.text() and "Dead letters\n3" in page.text()
    assert problems(page) == []
    page.screenshot("fleet")

    page.open(console.base + "/functions")
    page.screenshot("functions")
    sections = page.driver.find_elements(By.CSS_SELECTOR, "section.function")
    assert [section.find_element(By.TAG_NAME, "h2").text.split("\n")[0].split(" ")[0] for section in sections] == [
        "invoices", "orders", "thumbnails"]
    assert "not ready" in sections[0].text and "'90 seconds' is not a duration" in sections[0].text
    assert "*/15 * * * * (UTC)" in sections[2].text
    assert page.driver.find_elements(By.CSS_SELECTOR, "#fn-orders svg.chart-runs rect.outcome-succeeded")
    assert page.driver.find_elements(By.CSS_SELECTOR, "#fn-thumbnails svg.chart-duration polyline.duration-p95")
    assert problems(page) == []
    page.screenshot("functions")

    page.open(console.base + "/runs")
    assert len(page.driver.find_elements(By.CSS_SELECTOR, "#runs tr")) == 50
    assert texts(page, "#runs tr:first-child td")[1:3] == ["orders", "app.receipt"]
    assert problems(page) == []
    page.screenshot("runs")

    page.open(f"{console.base}/runs/{ids['retried']}")
    assert '"order_id": "ord_7F3K2"' in page.driver.find_element(By.CSS_SELECTOR, "pre.event").text
    assert page.driver.find_elements(By.CSS_SELECTOR, "svg.timeline rect")
    assert texts(page, "svg.timeline text.tl-tick")[0] == page.driver.find_element(
        By.CSS_SELECTOR, "ol.attempts li:first-child dd:nth-of-type(2)").text[11:19]   # the first start
    assert problems(page) == []
    viewport(page, WINDOW[0], 1500)       # the event, the timeline and the first attempts
    page.screenshot("run")
    viewport(page, *WINDOW)

    page.open(console.base + "/dead-letters")
    assert len(page.driver.find_elements(By.CSS_SELECTOR, "main tbody tr")) == 3
    assert texts(page, "main tbody td:nth-child(4)") == ["orders/app.charge, orders/app.receipt",
                                                          "thumbnails/resize.handler", "orders/app.charge"]
    assert texts(page, "main tbody td:nth-child(6)") == ["attempts exhausted"] * 3   # the functions are not repeated
    assert "killed, exit code 137" in page.text()
    assert "Log in to redrive or purge." in page.text()
    assert problems(page) == []
    page.screenshot("dead-letters")

    page.open(console.base + "/replay")
    assert page.driver.find_element(By.NAME, "since").get_attribute("required") == "true"
    assert problems(page) == []
    page.screenshot("replay")

    page.open(console.base + "/login")
    assert page.driver.find_element(By.NAME, "token").get_attribute("type") == "password"
    assert problems(page) == []
    page.screenshot("login")

    for path in ("/fleet", "/functions", "/runs", f"/runs/{ids['retried']}", "/dead-letters", "/replay", "/login"):
        policy = requests.get(console.base + path, timeout=10).headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "style-src 'self'" in policy and "unsafe" not in policy, path


def test_the_runs_form_filters(console, redis_client, page):
    seed(redis_client)
    page.open(console.base + "/runs")
    page.driver.find_element(By.NAME, "function").send_keys("thumbnails")
    Select(page.driver.find_element(By.NAME, "outcome")).select_by_visible_text("failed")
    page.driver.find_element(By.NAME, "since").send_keys("2h")
    page.driver.find_element(By.CSS_SELECTOR, "form.filters button").click()
    wait(page, lambda driver: "function=thumbnails" in driver.current_url, what="the filtered page")
    assert "outcome=failed" in page.driver.current_url and "since=2h" in page.driver.current_url
    rows = page.driver.find_elements(By.CSS_SELECTOR, "#runs tr")
    assert rows, "the seeded hour has failed thumbnails runs"
    for row in rows:
        cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
        assert cells[1] == "thumbnails" and cells[4] == "failed", cells
    assert page.driver.find_element(By.NAME, "function").get_attribute("value") == "thumbnails"
    page.driver.find_element(By.NAME, "since").clear()
    page.driver.find_element(By.NAME, "since").send_keys("not a time")
    page.driver.find_element(By.CSS_SELECTOR, "form.filters button").click()
    wait(page, lambda driver: "not+a+time" in driver.current_url, what="the refused filter")
    assert "not a time" in page.driver.find_element(By.CSS_SELECTOR, "p.error").text
    assert [message for message in problems(page) if "status of 400" not in message] == []


def test_new_runs_appear_without_a_reload(console, redis_client, page):
    record(redis_client, function="orders")
    page.open(console.base + "/runs?function=billing")
    page.driver.execute_script("window.stillHere = 'yes';")
    assert page.driver.find_elements(By.CSS_SELECTOR, "#runs tr") == []
    record(redis_client, function="orders", handler="app.other")                   # filtered out
    fresh = record(redis_client, function="billing", handler="<b>invoice</b>", status=RunStatus.FAILED, exit_code=2)
    row = wait(page, lambda driver: driver.find_elements(By.CSS_SELECTOR, f'#runs a[href="/runs/{fresh}"]'),
               what="the new run's row")[0].find_element(By.XPATH, "../..")
    cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
    assert cells[1:6] == ["billing", "<b>invoice</b>", "1", "failed", "2"]
    assert "fresh" in row.get_attribute("class")
    assert len(page.driver.find_elements(By.CSS_SELECTOR, "#runs tr")) == 1
    assert page.driver.execute_script("return window.stillHere") == "yes"          # no reload
    assert problems(page) == []


def test_a_run_shows_every_attempt_with_both_tails(console, redis_client, page):
    ids = seed(redis_client)
    page.open(console.base + "/runs")
    link = page.driver.find_element(By.CSS_SELECTOR, f'#runs a[href="/runs/{ids["retried"]}"]')
    link.click()
    wait(page, lambda driver: driver.current_url.endswith(f"/runs/{ids['retried']}"), what="the run's page")
    attempts = page.driver.find_elements(By.CSS_SELECTOR, "ol.attempts > li")
    headings = [attempt.find_element(By.TAG_NAME, "h3").text for attempt in attempts]
    assert headings == ["Attempt 1 · orders/app.charge failed", "Attempt 2 · orders/app.charge timed out",
                        "Attempt 3 · orders/app.charge succeeded", "Attempt 1 · orders/app.receipt succeeded"]
    first = attempts[0]
    tails = {summary.text: summary.find_element(By.XPATH, "../pre").text
             for summary in first.find_elements(By.TAG_NAME, "summary")}
    assert tails["stdout (its end)"].endswith("calling payments API")
    assert tails["stderr (its end)"].endswith("Service Unavailable for url: https://payments.internal/v2/charges")
    assert "relay-a/4121 cold 3f9c2a71d0e4" in first.text and "Exit code\n1" in first.text
    third = attempts[2].find_elements(By.CSS_SELECTOR, "pre.tail")
    assert [tail.text for tail in third] == ["charging ord_7F3K2: 4900 cents\ncharged: ch_91XK",
                                            "warning: retrying with idempotency key ord_7F3K2-charge"]
    assert len(page.driver.find_elements(By.CSS_SELECTOR, "svg.timeline rect")) == 4
    assert problems(page) == []


# --- actions --------------------------------------------------------------------------------


def test_an_action_without_a_login_asks_for_one_and_changes_nothing(console, redis_client, page):
    ids = seed(redis_client)
    length = redis_client.xlen(STREAM)
    page.open(console.base + "/dead-letters")
    page.driver.find_element(By.CSS_SELECTOR, f'td.row-actions button[value="{ids["letters"][0]}"]').click()
    wait(page, lambda driver: "Refused" in driver.title, what="the refusal")
    assert "Log in first: actions need the console token." in page.text()
    assert redis_client.xlen(dlq_stream(STREAM)) == 3 and redis_client.xlen(STREAM) == length
    page.open(console.base + "/replay")
    page.driver.find_element(By.NAME, "since").send_keys("1h")
    page.driver.find_element(By.CSS_SELECTOR, "form.filters button").click()
    wait(page, lambda driver: "Refused" in driver.title, what="the refusal")
    assert "Log in first" in page.text() and redis_client.xlen(STREAM) == length
    assert [message for message in problems(page) if "403" not in message] == []


def test_log_in_and_redrive_a_dead_letter_through_the_page(console, redis_client, page):
    ids = seed(redis_client)
    login(page, console.base, "/dead-letters")
    assert "Log in to redrive" not in page.text()
    page.driver.find_element(By.CSS_SELECTOR, f'td.row-actions button[value="{ids["letters"][1]}"]').click()
    wait(page, lambda driver: "redriven=1" in driver.current_url, what="the redrive")
    assert page.driver.find_element(By.CSS_SELECTOR, "p.notice").text == "Redriven 1 entry."
    assert len(page.driver.find_elements(By.CSS_SELECTOR, "main tbody tr")) == 2
    added = redis_client.xrevrange(STREAM, count=1)[0][1]
    assert added[b"redriven_from"] == ids["letters"][1].encode() and b"POSTER-XL" in added[b"event"]

    # Purge asks first (data-confirm); dismissing it purges nothing, accepting it purges.
    purge = f'td.row-actions button[formaction="/dead-letters/purge"][value="{ids["letters"][0]}"]'
    page.driver.find_element(By.CSS_SELECTOR, purge).click()
    page.driver.switch_to.alert.dismiss()
    assert redis_client.xlen(dlq_stream(STREAM)) == 2
    page.driver.find_element(By.CSS_SELECTOR, purge).click()
    assert page.driver.switch_to.alert.text == "Delete this dead letter?"
    page.driver.switch_to.alert.accept()
    wait(page, lambda driver: "purged=1" in driver.current_url, what="the purge")
    assert [letter.decode() for letter, _ in redis_client.xrange(dlq_stream(STREAM))] == [ids["letters"][2]]
    assert problems(page) == []


def test_a_form_without_its_csrf_token_is_refused_and_changes_nothing(console, redis_client, page):
    ids = seed(redis_client)
    login(page, console.base, "/dead-letters")
    length = redis_client.xlen(STREAM)
    page.driver.execute_script('document.querySelectorAll("input[name=csrf]").forEach(function (e) { e.remove(); });')
    page.driver.find_element(By.CSS_SELECTOR, f'td.row-actions button[value="{ids["letters"][0]}"]').click()
    wait(page, lambda driver: "Refused" in driver.title, what="the refusal")
    assert "no valid CSRF token" in page.text() and "nothing was changed" in page.text()
    assert redis_client.xlen(dlq_stream(STREAM)) == 3 and redis_client.xlen(STREAM) == length

    # The same POST from a plain client, logged in with the browser's own session cookie.
    session = requests.Session()
    cookie = page.driver.get_cookie("relay_console")
    session.cookies.set("relay_console", cookie["value"])
    csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', session.get(console.base + "/dead-letters").text).group(1)
    for form in ({"one": ids["letters"][0]}, {"one": ids["letters"][0], "csrf": "f" * 64}):
        refused = session.post(console.base + "/dead-letters/purge", data=form, allow_redirects=False, timeout=10)
        assert refused.status_code == 403 and "CSRF" in refused.text
    refused = session.post(console.base + "/replay", data={"since": "1h"}, allow_redirects=False, timeout=10)
    assert refused.status_code == 403
    assert redis_client.xlen(dlq_stream(STREAM)) == 3 and redis_client.xlen(STREAM) == length
    done = session.post(console.base + "/dead-letters/purge", data={"one": ids["letters"][0], "csrf": csrf},
                        allow_redirects=False, timeout=10)
    assert done.status_code == 303 and redis_client.xlen(dlq_stream(STREAM)) == 2


def test_a_replay_counts_first_then_adds_with_its_progress(console, redis_client, page):
    sources = [redis_client.xadd(STREAM, {"event": json.dumps(event)}).decode()
               for event in ({"kind": "order", "paid": True}, {"kind": "refund"}, {"kind": "order", "paid": False})]
    login(page, console.base, "/replay")
    page.driver.find_element(By.NAME, "since").send_keys("1h")
    page.driver.find_element(By.NAME, "function").send_keys("orders")
    page.driver.find_element(By.CSS_SELECTOR, "form.filters button").click()
    wait(page, lambda driver: re.search(r"/replay/\d+$", driver.current_url), what="the replay's page")
    wait(page, lambda driver: "Add 2 copies to the stream" in browser_text(driver), what="the count")
    facts = page.driver.find_element(By.ID, "replay").text
    assert "State\ncounted" in facts and "Entries read\n3" in facts and "Entries to replay\n2" in facts
    assert "Copies to add\n2" in facts and "Added\n0" in facts
    assert redis_client.xlen(STREAM) == 3                        # the dry run added nothing
    page.screenshot("replay-counted")
    page.driver.find_element(By.CSS_SELECTOR, "main form button").click()
    wait(page, lambda driver: "State\ndone" in driver.find_element(By.ID, "replay").text, what="the replay to end")
    assert "Added\n2" in page.driver.find_element(By.ID, "replay").text
    copies = redis_client.xrange(STREAM, f"({sources[-1]}", "+")
    assert [fields[b"replay_of"].decode() for _, fields in copies] == [sources[0], sources[2]]
    page.open(console.base + "/replay")
    assert "since 1h: done" in page.text()
    assert problems(page) == []


def browser_text(driver):
    return driver.find_element(By.TAG_NAME, "body").text


# --- what a producer or a handler wrote -----------------------------------------------------


def test_markup_and_terminal_escapes_are_shown_as_text_and_run_nothing(console, redis_client, page):
    entry = redis_client.xadd(STREAM, {"event": json.dumps(HOSTILE)}).decode()
    record(redis_client, entry=entry, function="orders", handler=HOSTILE["name"], status=RunStatus.FAILED,
           exit_code=1, stdout="out " + HOSTILE["term"] + " " + HOSTILE["bio"], stderr=HOSTILE["name"],
           error=HOSTILE["bio"], event_id=HOSTILE["bio"])
    letter = redis_client.xadd(dlq_stream(STREAM), {"event": json.dumps(HOSTILE), "original_id": entry,
                                                    "reason": HOSTILE["name"], "run_status": "failed",
                                                    "stderr": HOSTILE["term"] + HOSTILE["bio"]}).decode()
    Heartbeat(redis_client, STREAM, host=HOSTILE["bio"], pid=1, version=HOSTILE["term"], pulse=lambda: Pulse(
        functions=[FunctionState(HOSTILE["name"], ready=False, outcome="failed", error=HOSTILE["bio"],
                                 rules=((HOSTILE["term"], json.dumps(HOSTILE)),))])).beat()
    page.open(console.base + "/runs")
    page.driver.execute_script("window.stillHere = 'yes';")
    polled = record(redis_client, entry=entry, handler=HOSTILE["bio"], stdout=HOSTILE["name"])
    wait(page, lambda driver: driver.find_elements(By.CSS_SELECTOR, f'#runs a[href="/runs/{polled}"]'),
         what="the polled hostile row")
    assert HOSTILE["bio"] in page.text() and page.driver.execute_script("return window.stillHere") == "yes"
    checked = 0
    for path in (f"/runs/{entry}", "/runs", "/dead-letters", f"/dead-letters/{letter}", "/fleet", "/functions"):
        if path != "/runs":
            page.open(console.base + path)
        text = page.text()
        assert page.driver.title.endswith("· Relay console"), path          # no script set the title
        assert page.driver.execute_script("return window.pwned") is None, path
        assert page.driver.find_elements(By.CSS_SELECTOR, "main img, main script") == [], path
        assert "<script>document.title='pwned-1'</script>" in text or "\"><img src=x" in text, path
        assert "\x1b" not in text and "\x07" not in text, path
        checked += 1
        assert problems(page) == [], path
    page.open(f"{console.base}/runs/{entry}")
    tails = texts(page, "pre.tail")
    assert tails[0] == "out \\x1b[31mred\\x1b]0;title\\x07 " + HOSTILE["bio"]
    assert tails[1] == HOSTILE["name"]
    assert '"term": "\\u001b[31mred\\u001b]0;title\\u0007"' in page.driver.find_element(By.CSS_SELECTOR,
                                                                                        "pre.event").text
    page.open(console.base + "/fleet")
    assert HOSTILE["bio"] + "/1" in page.text() and "\\x1b[31mred" in page.text()
    assert checked == 6 and problems(page) == []
