"""Screenshot a dashboard page in headless Chromium, the whole page 1400 px wide (docs/dashboard.png).

    .venv/bin/python scripts/dashboard_screenshot.py dash.html docs/dashboard.png

Needs Debian's chromium and chromium-driver, and selenium (the test extra).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

RENDERED = """
const divs = document.querySelectorAll('.js-plotly-plot');
return document.readyState === 'complete' && divs.length === document.querySelectorAll('[id^="fig-"]').length
  && Array.from(divs).every(gd => gd._fullLayout && gd.querySelector('.main-svg g.trace'));
"""


def main(page: str, out: str, width: int = 1400) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        sys.exit("needs chromium and chromedriver (apt-get install chromium chromium-driver)")
    with tempfile.TemporaryDirectory() as profile:
        opts = webdriver.ChromeOptions()
        opts.binary_location = chromium
        for arg in ("--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                    f"--window-size={width},1000", "--hide-scrollbars"):  # fmt: skip
            opts.add_argument(arg)
        browser = webdriver.Chrome(service=Service(driver), options=opts)
        try:
            browser.get(Path(page).resolve().as_uri())
            WebDriverWait(browser, 120).until(lambda d: d.execute_script(RENDERED))
            browser.set_window_size(width, browser.execute_script("return document.body.scrollHeight"))
            browser.save_screenshot(out)
        finally:
            browser.quit()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
