"""A headless Chromium for looking at reports (used by the tests; handy for screenshots by hand).

Debian's ``chromium`` and ``chromium-driver`` are installed with apt-get when missing; Selenium
drives them. Nothing here is imported unless a browser is asked for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["CHROMIUM_FLAGS", "ensure_chromium", "headless_chromium"]

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1440,1600")


def ensure_chromium() -> tuple[str, str]:
    """Paths of Debian's chromium and chromedriver, installing them with apt-get when missing."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not (os.path.exists(chromium) and os.path.exists(driver)):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update"],
                    ["apt-get", "install", "-y", "--no-install-recommends", "chromium", "chromium-driver"]):
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")
        chromium, driver = "/usr/bin/chromium", "/usr/bin/chromedriver"
    return chromium, driver


@contextmanager
def headless_chromium(profile_dir: str, *, log_requests: bool = False) -> Iterator[Any]:
    """A Selenium driver for a headless Chromium with a fresh profile in ``profile_dir``.

    With ``log_requests``, the pages' network events are kept for ``driver.get_log("performance")``
    (each one a DevTools message; ``testsupport.browser.requested_urls`` lists the URLs asked for).
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = ensure_chromium()
    options = Options()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    if log_requests:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
