"""End to end in a real browser: Debian's chromium loads the page from disk and plotly draws every panel."""

from __future__ import annotations

import html
import os
import shutil
import struct
from pathlib import Path

import pytest
from conftest import missing
from dashboard_data import fill

from analysis.dashboard import collect, write_dashboard
from harness.store.results import ResultsStore

pytestmark = [pytest.mark.slow, pytest.mark.browser]

STORE_PANELS = {"phases", "steps", "overhead", "agreement", "throughput", "compare"}
PROFILE_PANELS = {"kernels", "nvtx", "timeline"}  # no `step` range: the timeline shows the busiest second

# per plotly graph div: traces holding data, and drawn marks (bars, boxes, points) in the SVG
DRAWN = """
return Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
  id: gd.id,
  traces: gd.data.filter(t => (t.x && t.x.length) || (t.y && t.y.length)).length,
  marks: Array.from(gd.querySelectorAll('g.trace path'))
    .filter(p => /[1-9]/.test(p.getAttribute('d') || '')).length,
}));
"""
RENDERED = """
const divs = document.querySelectorAll('.js-plotly-plot');
return document.readyState === 'complete' && divs.length === document.querySelectorAll('[id^="fig-"]').length
  && Array.from(divs).every(gd => gd._fullLayout && gd.querySelector('.main-svg g.trace'));
"""


def _browser_paths() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        missing("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    return chromium, driver


@pytest.fixture
def browser(tmp_path: Path):
    chromium, driver_path = _browser_paths()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--window-size=1400,1000",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    yield driver
    driver.quit()


def _artifacts(tmp_path: Path) -> Path:
    out = Path(os.environ.get("HARNESS_TEST_ARTIFACTS", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_every_panel_draws_in_chromium(browser, tmp_path: Path, a100_export: Path) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    store = ResultsStore(str(tmp_path / "results.sqlite"))
    fill(store, export=a100_export)
    page = write_dashboard(collect(store), tmp_path / "dashboard.html")
    drawn = {p.key for p in page.drawn}
    expected = STORE_PANELS | PROFILE_PANELS
    assert drawn == expected, {p.key: p.missing for p in page.lacking}

    browser.get(page.path.resolve().as_uri())
    WebDriverWait(browser, 60).until(lambda d: d.execute_script(RENDERED))
    figures = {f["id"].removeprefix("fig-"): f for f in browser.execute_script(DRAWN)}
    assert set(figures) == drawn
    for key, f in figures.items():
        assert f["traces"] > 0 and f["marks"] > 0, (key, f)
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []

    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1400, height)
    shot = _artifacts(tmp_path) / "dashboard.png"
    assert browser.save_screenshot(str(shot))
    png = shot.read_bytes()
    width, tall = struct.unpack(">II", png[16:24])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and width >= 1000 and tall >= height * 0.9


def test_kernel_named_like_markup_is_text_in_chromium(browser, tmp_path: Path, a100_export: Path) -> None:
    """A kernel name holding `<script>` and an `onerror` handler is drawn as text: nothing runs."""
    import shutil
    import sqlite3

    from selenium.webdriver.support.ui import WebDriverWait

    from analysis.dashboard import collect_export
    from analysis.dashboard.style import shorten

    name = "</script><script>window.pwned=1</script><img src=x onerror=window.pwned=2>k"
    export = tmp_path / "named.sqlite"
    shutil.copyfile(a100_export, export)
    with sqlite3.connect(export) as con:
        con.execute("UPDATE StringIds SET value = ? WHERE id = 670", (name,))  # the saxpy kernel's name
    page = write_dashboard(collect_export(export), tmp_path / "named.html", scope="profile", title=name)
    assert "kernels" in {p.key for p in page.drawn}
    browser.get(page.path.resolve().as_uri())
    WebDriverWait(browser, 60).until(lambda d: d.execute_script(RENDERED))
    assert browser.execute_script("return window.pwned === undefined")
    # plotly reads tags and entities in its labels: the data holds the name escaped, the page shows it whole
    names = browser.execute_script(
        "return document.getElementById('fig-kernels').data[0].customdata.map(row => row[5]);"
    )
    assert names == [html.escape(name, quote=False)]
    shown = browser.execute_script(
        "return [...document.querySelectorAll('#fig-kernels .ytick text')].map(t => t.textContent);"
    )
    assert shown == [f"1. {shorten(name, 70)}"]  # the label shortened as every long name, the tags kept
    assert browser.title == name
