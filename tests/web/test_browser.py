"""The viewer in a real browser: headless Chromium driven by Selenium through chromedriver,
against ``pi-store serve`` (a subprocess) over the imported fixtures and corpus. Each page is
screenshotted into the test's folder (``tmp_path``). Without Chromium or chromedriver the tests
are skipped, and the run's summary says so in capitals."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.web import sessions
from tests.web.conftest import Served

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the 'test' extra has it)")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")
SKIP_REASON = ("NO BROWSER: headless Chromium and chromedriver are needed for the viewer's browser tests "
               "(Debian: apt-get install chromium chromium-driver); found chromium="
               f"{CHROMIUM}, chromedriver={CHROMEDRIVER}")


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[object]:
    if not (CHROMIUM and CHROMEDRIVER):
        print("\n" + "!" * 20 + " " + SKIP_REASON, file=sys.stderr)
        pytest.skip(SKIP_REASON)
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1600,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(180)
    yield driver
    driver.quit()


def shoot(driver: object, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000, f"{name}: the screenshot looks empty"
    return path


def arrived(driver: object, url_part: str, css: str) -> None:
    """Wait until the browser is on a URL containing ``url_part`` and shows ``css`` (a submit or
    a click returns before the next page has loaded)."""
    WebDriverWait(driver, 120).until(expected_conditions.url_contains(url_part))
    WebDriverWait(driver, 120).until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css)))


def inspect(served: Served, session_id: str, leaf: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "store.cli", "--db", served.db_url, "inspect", session_id,
                          "--leaf", leaf], capture_output=True, text=True, check=True, timeout=300).stdout
    return json.loads(out)


def test_walkthrough(browser, served_sqlite: Served, tmp_path: Path) -> None:
    """Sessions page → search → a hit's session → an entry on a side branch → its context,
    checked against ``pi-store inspect --leaf``."""
    driver, base = browser, served_sqlite.base
    print(f"screenshots: {tmp_path}")
    driver.get(base + "/")
    rows = driver.find_elements(By.CSS_SELECTOR, "table.list tbody tr")
    assert len(rows) == 50 and driver.find_element(By.ID, "next-page")
    shoot(driver, tmp_path, "1-sessions")

    box = driver.find_element(By.CSS_SELECTOR, "form.search input[name=q]")
    box.send_keys("question 42")
    box.submit()
    arrived(driver, "q=question", ".hits")
    hits = driver.find_elements(By.CSS_SELECTOR, ".hit")
    assert hits, "the branchy session has 'question 42'"
    marks = [m.text.lower() for m in driver.find_elements(By.CSS_SELECTOR, ".hit mark")]
    assert "question" in marks and "42" in marks
    shoot(driver, tmp_path, "2-search")

    link = next(h for h in driver.find_elements(By.CSS_SELECTOR, ".hit-link")
                if f"/sessions/{sessions.BRANCHY_ID}?leaf=T042" in h.get_attribute("href"))
    link.click()
    arrived(driver, "leaf=T042", ".tree-rows .row.selected")
    assert driver.find_element(By.CSS_SELECTOR, ".tree-rows .row.selected").get_attribute("data-id") == "T042"
    shoot(driver, tmp_path, "3-session-hit")

    # a side branch: the second answer to question 42, four entries down
    driver.find_element(By.CSS_SELECTOR, "#t-T042b3 a").click()
    arrived(driver, "leaf=T042b3", ".tree-rows .row.selected")
    selected = driver.find_element(By.CSS_SELECTOR, ".tree-rows .row.selected")
    assert selected.get_attribute("data-id") == "T042b3" and "on-path" in selected.get_attribute("class")
    on_path = [r.get_attribute("data-id") for r in driver.find_elements(By.CSS_SELECTOR, ".tree-rows .row.on-path")
               if r.get_attribute("data-id")]
    assert on_path[-4:] == ["T042b0", "T042b1", "T042b2", "T042b3"]
    doc = inspect(served_sqlite, sessions.BRANCHY_ID, "T042b3")
    panel = [li.get_attribute("data-source") for li in driver.find_elements(By.CSS_SELECTOR, ".ctx-message")]
    expected = [e["sourceId"] for e in doc["projection"]["entries"] for _ in e["messages"]]
    assert panel == expected
    tokens = driver.find_element(By.ID, "ctx-tokens").text.split()[0].replace(",", "")
    assert int(tokens) == doc["estimateProjectedContextTokens"]["tokens"]
    conversation = [a.get_attribute("id") for a in driver.find_elements(By.CSS_SELECTOR, ".conversation .entry")]
    assert conversation == ["e-" + i for i in doc["branchIds"][-200:]]  # the tail of a long branch
    shoot(driver, tmp_path, "4-side-branch-context")


def test_compacted_and_long_sessions(browser, served_sqlite: Served, tmp_path: Path) -> None:
    driver, base = browser, served_sqlite.base
    listed = served_sqlite.get("/api/sessions").json()
    compacted = max((s for s in listed if s["id"].startswith("0")), key=lambda s: s["messageCount"])
    driver.get(f"{base}/sessions/{compacted['id']}")
    statuses = {li.get_attribute("class") for li in driver.find_elements(By.CSS_SELECTOR, ".ctx-message")}
    shoot(driver, tmp_path, "5-largest-corpus-session")
    assert statuses

    driver.get(f"{base}/sessions/{sessions.LONG_ID}")
    folds = driver.find_elements(By.CSS_SELECTOR, ".tree-rows .fold")
    assert len(folds) == 1 and "4998 entries" in folds[0].text
    assert len(driver.find_elements(By.CSS_SELECTOR, ".conversation .entry")) == 200
    shoot(driver, tmp_path, "6-long-session")
    folds[0].find_element(By.TAG_NAME, "a").click()
    arrived(driver, "open=L00001", ".context")  # the context pane comes after the tree in the page
    assert len(driver.find_elements(By.CSS_SELECTOR, ".tree-rows .row")) == 5000

    driver.get(f"{base}/sessions/{sessions.HOSTILE_ID}")
    assert driver.title.startswith('<script>document.title="pwned"</script>')  # the name as text, not run
    text = driver.find_element(By.CSS_SELECTOR, ".conversation").text
    assert '<script>document.title="pwned"</script>' in text and "[click](javascript:alert(1))" in text
    assert driver.find_elements(By.CSS_SELECTOR, ".conversation img.image")
    assert not driver.find_elements(By.CSS_SELECTOR, ".conversation script, .conversation b, a[href^=javascript]")
    shoot(driver, tmp_path, "7-hostile-session")

    driver.get(f"{base}/usage")
    assert driver.find_elements(By.CSS_SELECTOR, "svg.chart rect")
    shoot(driver, tmp_path, "8-usage")
