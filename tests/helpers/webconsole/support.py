"""The web console's tests drive a real `exactly console` process with a real headless
browser: Debian's chromium through its chromedriver (selenium), as an operator would."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from selenium import webdriver
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = os.environ.get("EXACTLY_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("EXACTLY_CHROMEDRIVER", "/usr/bin/chromedriver")
SERVING = re.compile(r"Exactly console on (?P<url>http://\S+)")
T = TypeVar("T")


def browser() -> webdriver.Chrome:
    """Headless chromium; no sandbox, as tests often run as root in a container."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # for csp_violations()
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    return driver


@contextlib.contextmanager
def console(bootstrap: str, *args: str, timeout: float = 30) -> Iterator[str]:
    """`exactly console` on a free port, refreshing every second; yields its URL."""
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "exactly", "console", "--bootstrap-server", bootstrap,
             "--listen", "127.0.0.1:0", "--refresh", "1", "--timeout", "5000", *args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        try:
            deadline = time.monotonic() + timeout
            while (m := SERVING.search(_read(log))) is None:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"exactly console did not start:\n{_read(log)}")
                time.sleep(0.05)
            yield m["url"]
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _read(log: Any) -> str:
    log.seek(0)
    return str(log.read())


def wait_for(driver: WebDriver, what: str, check: Callable[[], T | None],
             timeout: float = 20) -> T:
    """check()'s first truthy result, retried while the page refreshes under it."""
    def attempt(_driver: WebDriver) -> T | None:
        try:
            return check()
        except (NoSuchElementException, StaleElementReferenceException):
            return None

    try:
        return cast(T, WebDriverWait(driver, timeout, poll_frequency=0.1).until(attempt))
    except TimeoutException:
        raise AssertionError(f"waited {timeout} s for {what}; the page at {driver.current_url} "
                             f"shows:\n{driver.page_source}") from None


def click(driver: WebDriver, css: str, timeout: float = 20) -> None:
    """Click the element at `css`, found again if the page's refresh replaced it."""
    def clicked() -> bool:
        element: WebElement = driver.find_element(By.CSS_SELECTOR, css)
        element.click()
        return True

    wait_for(driver, f"{css} to click", clicked, timeout)


def text(driver: WebDriver, css: str = "body") -> str:
    return cells(driver, css)[0]


def cells(driver: WebDriver, css: str, *parts: str) -> tuple[str, ...]:
    """The text of the element at `css`, or of each of its `parts` (selectors within it), read
    from one rendering of it. The live pages replace their body every few seconds (htmx), so
    an element found just before a refresh is stale by the time it is read: then it is found
    again and read anew."""
    for _ in range(5):
        try:
            found = driver.find_element(By.CSS_SELECTOR, css)
            if not parts:
                return (str(found.text),)
            return tuple(str(found.find_element(By.CSS_SELECTOR, p).text) for p in parts)
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{css} was replaced 5 times in a row while it was read")


def csp_violations(driver: webdriver.Chrome) -> list[str]:
    """What the browser refused under the console's Content-Security-Policy so far."""
    return [e["message"] for e in driver.get_log("browser")
            if "Content Security Policy" in e["message"]]
