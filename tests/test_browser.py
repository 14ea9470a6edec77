"""The browser the console's tests drive: Debian's headless Chromium through chromedriver.

A smoke test of tests/support/browser.py on a tiny bottle page served with
the console's strict Content-Security-Policy: the page renders, its own
script file runs, and an inline script and an inline style do not. The
charts of relay.console.charts, drawn in that page, take their colours from
the stylesheet alone. Screenshots land where RELAY_SCREENSHOTS says.
"""

import random
import struct
import zlib

import bottle
import pytest

from relay.console.charts import CHART_CSS, duration_chart, runs_chart
from relay.runs.record import Run, RunStatus
from tests.support import browser as support
from tests.support import pngpalette
from tests.support.browser import serve

CSP = "default-src 'self'"
NOW_MS = 1_796_560_000_000   # 2026-12-06T12:26:40Z
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Smoke</title><link rel="stylesheet" href="/style.css"></head>
<body>
<h1>Relay browser smoke test</h1>
<p id="styled" style="color: rgb(255, 0, 0)">An inline style the policy refuses.</p>
<p id="external">The page's own script has not run.</p>
<script>document.title = "inline script ran";</script>
<script src="/page.js"></script>
</body></html>
"""
PAGE_JS = 'document.getElementById("external").textContent = "The page\'s own script ran.";\n'
STYLE = "body { font: 15px sans-serif; margin: 24px; color: #222; }\n.charts { width: 640px; }\n"


def app():
    """A bottle app that serves every response under CSP, as the console does."""
    pages = bottle.Bottle()

    @pages.hook("after_request")
    def policy():
        bottle.response.set_header("Content-Security-Policy", CSP)

    def static(body, kind):
        bottle.response.content_type = kind
        return body

    pages.route("/", callback=lambda: PAGE)
    pages.route("/page.js", callback=lambda: static(PAGE_JS, "text/javascript"))
    pages.route("/style.css", callback=lambda: static(STYLE + CHART_CSS, "text/css"))
    pages.route("/charts", callback=charts_page)
    pages.route("/favicon.ico", callback=lambda: bottle.HTTPResponse(status=204))
    return pages


def example_runs():
    """An hour of a function's runs: mostly successes, some failures and one of every other outcome."""
    rng = random.Random(33)
    runs = []
    for _ in range(400):
        started = NOW_MS - int(rng.random() * 3_600_000)
        status = rng.choices(list(RunStatus), weights=(80, 12, 3, 2, 2, 1))[0]
        runs.append(Run(run_id=f"{started + 900}-0", function="thumbnails", handler="resize",
                        started_ms=started, duration_ms=rng.lognormvariate(5, 0.6), status=status))
    return runs


def charts_page():
    runs = example_runs()
    return ('<!doctype html><html><head><meta charset="utf-8"><title>Charts</title>'
            '<link rel="stylesheet" href="/style.css"></head><body><div class="charts" id="charts">'
            f'<h2>thumbnails</h2>{runs_chart(runs, NOW_MS, title="thumbnails")}'
            f'{duration_chart(runs, NOW_MS, title="thumbnails")}'
            f'{runs_chart([], NOW_MS)}</div></body></html>')


def test_a_missing_chromium_fails_the_test_and_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match="chromium and chromium-driver not installed.*scripts/setup"):
        support.browser_binaries()


def test_a_page_renders_under_the_policy_that_blocks_inline_script_and_style(browser):
    with serve(app()) as url:
        browser.open(url + "/")
        assert "Relay browser smoke test" in browser.text()
        assert "The page's own script ran." in browser.text()
        assert browser.driver.title == "Smoke"          # the inline script did not run
        styled = browser.driver.find_element("id", "styled")
        assert styled.value_of_css_property("color") != "rgba(255, 0, 0, 1)"
        messages = "\n".join(browser.console_messages())
        assert "Content Security Policy" in messages and "script-src" in messages
        shot = browser.screenshot("browser-smoke")
    assert shot.read_bytes().startswith(b"\x89PNG")


def test_the_charts_take_their_colours_from_the_stylesheet(browser):
    with serve(app()) as url:
        browser.open(url + "/charts")
        failed = browser.driver.find_elements("css selector", "svg.chart-runs rect.outcome-failed")
        assert failed and failed[0].value_of_css_property("fill") == "rgb(198, 40, 40)"
        line = browser.driver.find_element("css selector", "svg.chart-duration polyline.duration-p95")
        assert line.value_of_css_property("stroke") == "rgb(198, 40, 40)"
        assert "no runs in the last hour" in browser.text()
        assert browser.console_messages() == []
        shot = browser.screenshot("charts", browser.driver.find_element("id", "charts"))
    assert shot.read_bytes().startswith(b"\x89PNG")


def test_a_screenshot_kept_for_the_docs_is_the_same_picture_in_256_colours(browser):
    """tests.support.pngpalette: Chromium's PNG, unfiltered, as a palette PNG whose pixels are the same colours."""
    with serve(app()) as url:
        browser.open(url + "/charts")
        png = browser.driver.get_screenshot_as_png()
    width, height, pixel_bytes, pixels = pngpalette._decode(png)
    kept = pngpalette.palette_png(png)
    chunks, position = {}, 8
    while position < len(kept):
        (length,) = struct.unpack(">I", kept[position:position + 4])
        kind, body = kept[position + 4:position + 8], kept[position + 8:position + 8 + length]
        assert struct.unpack(">I", kept[position + 8 + length:position + 12 + length])[0] == zlib.crc32(kind + body)
        chunks[kind] = chunks.get(kind, b"") + body
        position += 12 + length
    assert struct.unpack(">IIBB", chunks[b"IHDR"][:10]) == (width, height, 8, 3)
    palette = [chunks[b"PLTE"][at:at + 3] for at in range(0, len(chunks[b"PLTE"]), 3)]
    rows = zlib.decompress(chunks[b"IDAT"])
    assert len(palette) <= 256 and len(rows) == height * (width + 1)
    same = sum(palette[rows[y * (width + 1) + 1 + x]] == pixels[(y * width + x) * pixel_bytes:][:3]
               for y in range(0, height, 7) for x in range(0, width, 7))
    assert same / (len(range(0, height, 7)) * len(range(0, width, 7))) > 0.99
    assert len(kept) < len(png)
