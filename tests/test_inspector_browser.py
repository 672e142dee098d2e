"""Issue 47, item 5: the memory inspector in a real headless browser. Debian's chromium, driven by
Selenium through Debian's chromedriver (never a downloaded browser build): the page loads, lists
the threads, shows a thread's log as the model sees it (dated, with ages), the windows as bars,
the stored markup as text, the raw messages behind a group on a click, and updates after a turn
taken by another writer on the database.

Skips when chromium or its driver is missing here; .ci/run installs both, and under CI=true a
missing browser fails instead of skipping."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import in_ci
from inspector_support import HOSTILE, RESOURCE, THREAD, TURNS, observing_memory, seeded_db, serving, talk

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def _missing() -> str | None:
    if CHROMIUM is None or DRIVER is None:
        return "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return 'selenium or uvicorn is missing: pip install -e ".[test]"'
    return None


@pytest.fixture
def browser() -> Any:
    missing = _missing()
    if missing is not None:
        if in_ci():
            pytest.fail(f"CI=true but {missing}: .ci/run installs them", pytrace=False)
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1300,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(DRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def test_the_page_shows_a_threads_memory_and_follows_a_turn(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    db = seeded_db(tmp_path / "om.db")
    wait = WebDriverWait(browser, 30)
    with serving(db) as base:
        browser.get(f"{base}/?poll=300#resource={RESOURCE}")
        thread_button = wait.until(
            lambda d: d.find_element(By.CSS_SELECTOR, f'#threads button[data-thread="{THREAD}"]'))
        assert f"{2 * len(TURNS)} messages" in thread_button.text
        thread_button.click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "pre.log"))
        logs = browser.find_elements(By.CSS_SELECTOR, "pre.log")
        groups_before = len(logs)
        text = "\n".join(pre.text for pre in logs)
        assert "[today]" in text and "Date: " in text, text[:300]
        assert "2,500 CAD" in text and "浅草" in text
        assert HOSTILE[:25] in text, "the stored markup shows as written"
        assert browser.find_elements(By.CSS_SELECTOR, "pre.log img, pre.log b") == []
        assert browser.title == "langchain-om memory inspector", "no stored script ran"
        bars = {row.get_attribute("data-window"): row.text for row in
                browser.find_elements(By.CSS_SELECTOR, ".bar-row")}
        assert set(bars) == {"messages", "observations"} and "/ 30,000 tokens" in bars["messages"]
        assert browser.find_elements(By.CSS_SELECTOR, "#timeline .tick[data-kind='observation']")
        assert "observer" in browser.find_element(By.ID, "spend").text

        first_group = browser.find_element(By.CSS_SELECTOR, ".group > button")
        first_group.click()
        raw = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".raw .m"))
        assert TURNS[0] in raw[0].text and "human" in raw[0].text

        om = observing_memory(db)  # an agent talking on the same database, in another connection
        for n, more in enumerate(["One more thing: we also want a day trip to Nikko.",
                                  "And Sam would love to see the snow monkeys in Nagano."], start=50):
            talk(om, more, n)
        om.close()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "pre.log")) > groups_before)
        assert "Nikko" in "\n".join(pre.text for pre in browser.find_elements(By.CSS_SELECTOR, "pre.log"))
        seen = browser.find_element(By.ID, "seen").text
        assert "new message(s) stored" in seen and "new group(s) in the log" in seen
        assert browser.find_elements(By.CSS_SELECTOR, ".raw .m"), "the open group stays open across the update"
