"""The status page in headless Chromium (Debian's chromium and chromedriver, driven by
Selenium): a dump's progress bar advances during a real dump, the pause button pauses it (the
API confirms), resume lets it finish."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import unavailable

from .pgutil import wait_until
from .test_api_env import TOKEN, Env, running, wait_dump

pytestmark = pytest.mark.integration
CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def env(pg_admin_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with running(pg_admin_dsn, tmp_path_factory.mktemp("page"), rows=20_000) as e:
        yield e


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if shutil.which(CHROMIUM) is None or shutil.which(DRIVER) is None:
        unavailable("Chromium", "chromium and chromium-driver are not installed "
                    "(scripts/setup.sh installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="dblog-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _bar(driver: Any, dump_id: str) -> tuple[float, int, str]:
    """(percent, rows, state) the page shows for the dump, or (-1, -1, '') before it does."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        row = driver.find_element(By.CSS_SELECTOR, f'tr[data-dump="{dump_id}"]')
        bar = row.find_element(By.CSS_SELECTOR, ".bar")
        return (float(bar.get_attribute("data-percent")), int(bar.get_attribute("data-rows")),
                str(row.get_attribute("data-state")))
    except (NoSuchElementException, StaleElementReferenceException):
        return (-1.0, -1, "")


def _click(driver: Any, dump_id: str, action: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(
        By.CSS_SELECTOR, f'button[data-dump="{dump_id}"][data-action="{action}"]').click()


def test_progress_bar_pause_and_resume(env: Env, browser: Any) -> None:
    client = env.client()
    client.patch("/api/v1/knobs", json={"chunk_size": 100, "chunk_delay_s": 0.1})
    browser.get(f"{env.url}/#token={TOKEN}")
    dump_id = client.post("/api/v1/dumps", json={"tables": ["public.t_int"]}).json()["id"]
    wait_until(lambda: _bar(browser, dump_id)[0] > 0, 30, "the bar to show progress")
    assert browser.current_url == f"{env.url}/"  # the token is kept, not left in the history
    first = _bar(browser, dump_id)
    wait_until(lambda: _bar(browser, dump_id)[0] >= first[0] + 2, 30, "the bar to advance")
    assert _bar(browser, dump_id)[2] == "running"
    assert "public.t_int" in browser.page_source
    _click(browser, dump_id, "pause")
    wait_dump(env, dump_id, ("paused",), timeout=10)
    wait_until(lambda: _bar(browser, dump_id)[2] == "paused", 10, "the page to show paused")
    rows = client.get(f"/api/v1/dumps/{dump_id}").json()["rows"]
    wait_until(lambda: _bar(browser, dump_id)[1] == rows, 5, "the page's rows")
    client.patch("/api/v1/knobs", json={"chunk_size": 2000, "chunk_delay_s": 0})
    _click(browser, dump_id, "resume")
    done = wait_dump(env, dump_id, ("done",), timeout=60)
    assert done["rows"] == 20_000
    wait_until(lambda: _bar(browser, dump_id)[0] == 100.0, 10, "a full bar")
    assert _bar(browser, dump_id)[2] == "done"
    browser.save_screenshot(str(env.tmp / "status-page.png"))
