"""A real headless Chromium for the console's tests, and a page server to point it at.

Debian's ``chromium`` and ``chromium-driver`` (scripts/setup installs both)
are driven through selenium with the system's chromedriver: selenium never
downloads a driver or a browser here. Running as root in a container,
Chromium starts only with ``--no-sandbox`` (its sandbox needs user
namespaces it cannot have here) and headless as ``--headless=new``; its
profile is a fresh directory under the test session's tmp.

One browser serves the whole session (starting one takes a second); the
``browser`` fixture (tests/conftest.py) hands it to each test with its
cookies and cache cleared, so no login leaks from one test to the next.

``Browser.screenshot(name)`` writes ``<name>.png``: into the directory that
RELAY_SCREENSHOTS names (relative to the repository, e.g. docs/console, to
refresh the pictures docs/console.md shows, as palette PNGs of 256 colours:
tests.support.pngpalette), else into the session's tmp.
"""

import contextlib
import os
import shutil
import threading
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest

from tests.support.pngpalette import palette_png

ROOT = Path(__file__).resolve().parent.parent.parent
SCREENSHOTS = "RELAY_SCREENSHOTS"   # a directory for the screenshots, for the docs
WINDOW = (1280, 800)
CHROMIUM_ARGS = ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--hide-scrollbars", "--force-device-scale-factor=1", "--lang=en-US")


def browser_binaries():
    """The paths of chromium and chromedriver; the test fails (never skips) when either is missing."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    missing = [name for name, path in (("chromium", chromium), ("chromium-driver", driver)) if path is None]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not installed: the browser tests need Debian's chromium and "
                    "chromium-driver; run scripts/setup")
    return chromium, driver


def screenshot_directory(fallback):
    """Where screenshots go: $RELAY_SCREENSHOTS (relative to the repository), else *fallback*."""
    chosen = os.environ.get(SCREENSHOTS, "")
    directory = (ROOT / chosen) if chosen else Path(fallback)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


class Browser:
    """A headless Chromium under chromedriver: ``driver`` is selenium's WebDriver."""

    def __init__(self, driver, screenshots):
        self.driver = driver
        self.screenshots = Path(screenshots)

    def open(self, url):
        self.driver.get(url)
        return self.driver

    def text(self):
        """The visible text of the page."""
        return self.driver.find_element("tag name", "body").text

    def screenshot(self, name, element=None):
        """The window (or only *element*) as ``<name>.png`` in the screenshot directory; its path."""
        path = self.screenshots / f"{name}.png"
        png = element.screenshot_as_png if element is not None else self.driver.get_screenshot_as_png()
        path.write_bytes(palette_png(png) if os.environ.get(SCREENSHOTS) else png)   # kept: a third the bytes
        return path

    def console_messages(self):
        """What the page logged to its console since the last call: CSP violations, script errors."""
        return [entry["message"] for entry in self.driver.get_log("browser")]

    def reset(self):
        """A blank page, and no cookie or cached page left from a test before."""
        self.driver.get("about:blank")
        self.driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
        self.driver.execute_cdp_cmd("Network.clearBrowserCache", {})
        self.driver.get_log("browser")

    def quit(self):
        self.driver.quit()


def start_browser(profile, screenshots, window=WINDOW):
    """A headless Chromium with a clean profile in the directory *profile*."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = browser_binaries()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (*CHROMIUM_ARGS, f"--user-data-dir={profile}", f"--window-size={window[0]},{window[1]}"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(driver, log_output=str(Path(profile).parent / "chromedriver.log"))
    try:
        return Browser(webdriver.Chrome(options=options, service=service), screenshots)
    except Exception as error:
        pytest.fail(f"headless Chromium did not start ({type(error).__name__}: {str(error).splitlines()[0]}); "
                    f"see {Path(profile).parent / 'chromedriver.log'}")


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):
        pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


@contextlib.contextmanager
def serve(app):
    """Serve the WSGI *app* on a free loopback port in a thread; yields its base URL."""
    server = make_server("127.0.0.1", 0, app, server_class=_ThreadingServer, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="page-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
