"""The console of a real ``relay start`` (CONSOLE_ADDR), seen in a real headless Chromium.

A worker with real containers serves its console: the fleet page shows it
alive with its function, an event the handler cannot take becomes a dead
letter the page lists, the handler is fixed on disk (the watcher reloads
it), the operator logs in and redrives the dead letter from the page, and
the entry runs again and succeeds: a new run in the runs page. Stopped, the
worker is shown stopped.
"""

import time

import pytest
from selenium.webdriver.common.by import By

from relay.stream.keys import dlq_stream
from tests.support.commands import relay_secret
from tests.support.console import start_console
from tests.support.hot_reload import remove_images
from tests.support.redis_server import free_port
from tests.support.workers import (
    Worker,
    engine_env,
    namespaced_relay_command,
    pending,
    publish,
    wait_until,
    write_function,
)

pytestmark = pytest.mark.integration

TOKEN = "an-operator's-console-token"
TEMPLATE = """
runtime: python3.14
events:
  - handler: app.charge
    pattern: {kind: [order]}
    retries: 0
"""
BROKEN = """
PRICES = {"MUG-BLUE": 1250}


def charge(event):
    print("charging", event["sku"], flush=True)
    print("charged", PRICES[event["sku"]], flush=True)
"""
FIXED = BROKEN.replace('{"MUG-BLUE": 1250}', '{"MUG-BLUE": 1250, "MUG-RED": 1300}')


def reopen_until(browser, url, condition, timeout=30, what="the page"):
    """Open *url* again and again until *condition(text)* holds; the page's text."""
    deadline = time.monotonic() + timeout
    while True:
        browser.open(url)
        text = browser.text()
        if condition(text):
            return text
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}; {url} shows:\n{text}")
        time.sleep(0.5)


def worker_row(text, host):
    return next((line for line in text.splitlines() if line.startswith(host + "/")), "")


def test_a_dead_letter_redriven_from_the_console_runs_again_after_the_fix(
        redis_server, redis_client, docker_engine, workers, browser, tmp_path, token):
    name, host = f"shop-{token}", f"console-{token}"
    functions, state = tmp_path / "functions", tmp_path / "state"
    write_function(functions, name, TEMPLATE, {"app.py": BROKEN})
    state.mkdir()
    assert relay_secret(state, "set", "console-token", input=TOKEN.encode()).returncode == 0
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    relay = Worker(namespaced_relay_command(functions, state, host),
                   engine_env(redis_server, CONSOLE_ADDR=f"127.0.0.1:{port}"), tmp_path, "relay")
    workers.append(relay)
    try:
        relay.wait_for('msg="Relay started"', timeout=300)
        relay.wait_for(f'msg="Function ready" function={name} ', timeout=300)

        fleet = reopen_until(browser, base + "/fleet", lambda text: "alive" in worker_row(text, host),
                             what="the worker's heartbeat")
        row = worker_row(fleet, host)
        assert row.split()[1:3] == ["alive", relay_version()] and row.split()[6] == "1", row   # one function
        browser.open(base + "/functions")
        functions_page = browser.text()
        assert f"{name} ready" in functions_page and "app.charge" in functions_page

        publish(redis_client, {"kind": "order", "sku": "MUG-BLUE"})
        broken = publish(redis_client, {"kind": "order", "sku": "MUG-RED"})
        wait_until(lambda: pending(redis_client) == 0 and redis_client.xlen(dlq_stream("events")) == 1,
                   timeout=180, what="the entry the handler cannot take to be dead-lettered")
        letters = reopen_until(browser, base + "/dead-letters", lambda text: broken in text, what="the dead letter")
        assert f"{name}/app.charge" in letters and "attempts exhausted" in letters and "Log in to redrive" in letters
        browser.open(f"{base}/runs/{broken}")
        assert "KeyError: 'MUG-RED'" in browser.text() and "charging MUG-RED" in browser.text()

        (functions / name / "app.py").write_text(FIXED)
        relay.wait_for(f'msg="Function updated" function={name} ', timeout=300)

        browser.open(f"{base}/login?next=/dead-letters")
        browser.driver.find_element(By.NAME, "token").send_keys(TOKEN)
        browser.driver.find_element(By.CSS_SELECTOR, "form.login button").click()
        wait_until(lambda: browser.driver.current_url.endswith("/dead-letters"), what="the login")
        browser.driver.find_element(By.CSS_SELECTOR, "td.row-actions button:not([formaction])").click()
        wait_until(lambda: "redriven=1" in browser.driver.current_url, what="the redrive")
        assert "Redriven 1 entry." in browser.text() and "The dead-letter stream is empty." in browser.text()
        [(again, fields)] = redis_client.xrevrange("events", count=1)
        again = again.decode()
        assert fields[b"redriven_from"] and b"MUG-RED" in fields[b"event"]

        # The runs page, open before the entry runs, shows its run when it comes (polling, no reload).
        browser.open(f"{base}/runs?function={name}")
        wait_until(lambda: browser.driver.find_elements(By.CSS_SELECTOR, f'#runs a[href="/runs/{again}"]'),
                   timeout=180, what="the redriven entry's run in the runs page")
        row = browser.driver.find_element(By.CSS_SELECTOR, f'#runs a[href="/runs/{again}"]').find_element(
            By.XPATH, "../..")
        assert [cell.text for cell in row.find_elements(By.TAG_NAME, "td")][1:5] == [name, "app.charge", "1",
                                                                                       "succeeded"]
        browser.open(f"{base}/runs/{again}")
        assert "charged 1300" in browser.text() and "succeeded" in browser.text()

        assert relay.stop() == 0
    finally:
        relay.kill()
        remove_images(docker_engine, token)

    # The worker's console went with it: a console of its own (relay console) shows the worker stopped.
    console = start_console(state, redis_server, stream="events", group="relay")
    try:
        fleet = reopen_until(browser, console.base + "/fleet", lambda text: "stopped" in worker_row(text, host),
                             what="the worker shown stopped")
        assert worker_row(fleet, host).split()[1] == "stopped"
    finally:
        console.stop()


def relay_version():
    import relay

    return relay.__version__
