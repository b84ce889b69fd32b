"""Hooks of the cross-package tests: how many fuzz examples ran, in pytest's terminal summary.

``tests/test_fuzz.py`` counts its examples by kind with the ``fuzz_examples`` fixture; the total
(the figure docs/reliability.md quotes) is printed after the run, whatever ran and in any order.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

_FUZZ_EXAMPLES = pytest.StashKey[collections.Counter]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_FUZZ_EXAMPLES] = collections.Counter()


@pytest.fixture(scope="session")
def fuzz_examples(pytestconfig: pytest.Config) -> collections.Counter:
    """Examples run per kind of fuzzed input; add one per example."""
    return pytestconfig.stash[_FUZZ_EXAMPLES]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    counts = config.stash.get(_FUZZ_EXAMPLES, None)
    if counts:
        terminalreporter.write_sep("-", "fuzz examples run")
        terminalreporter.write_line(f"{sum(counts.values())} " + json.dumps(dict(sorted(counts.items()))))


@pytest.fixture
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An offline Hugging Face home in the test's folder (the hub cache layout goes under ``hub/``)."""
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home
