"""Opening a report page in the test browser (the ``browser`` fixture of the root ``conftest.py``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["open_report", "requested_urls"]


def open_report(driver: Any, path: str | os.PathLike, timeout_s: float = 20.0) -> None:
    """Load the report file ``path`` and wait until its page says it has drawn (``data-ready``).

    Raises:
        AssertionError: not drawn within ``timeout_s``; the browser console's messages are shown.
    """
    driver.get(Path(path).resolve().as_uri())
    deadline = time.time() + timeout_s
    while driver.execute_script("return document.body && document.body.getAttribute('data-ready')") != "true":
        if time.time() > deadline:
            logs = driver.get_log("browser") if hasattr(driver, "get_log") else []
            raise AssertionError(f"the report page never finished drawing; console: {logs}")
        time.sleep(0.05)


def requested_urls(driver: Any) -> list[str]:
    """The URLs the browser's pages asked for since the last call, in order, for a driver from
    ``headless_chromium(..., log_requests=True)``: its tabs' requests (its start page's ``chrome://``
    ones too), not the browser's own (such as its update checks)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls
