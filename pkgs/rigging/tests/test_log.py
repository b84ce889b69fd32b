"""``setup_logging``: one handler however often it is called, levels checked."""

from __future__ import annotations

import io
import logging

import pytest

from rigging.log import setup_logging


@pytest.fixture
def restore_root_logger():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_setup_logging_writes_at_and_above_level(restore_root_logger):
    stream = io.StringIO()
    setup_logging("warning", stream=stream)
    setup_logging("WARNING", stream=stream)  # a second call replaces, never duplicates
    log = logging.getLogger("rigging.test")
    log.info("quiet")
    log.warning("loud %d", 1)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].endswith("WARNING rigging.test: loud 1")


def test_setup_logging_rejects_unknown_level(restore_root_logger):
    with pytest.raises(ValueError, match="log level must be one of DEBUG, INFO, WARNING, ERROR, got 'LOUD'"):
        setup_logging("loud")
