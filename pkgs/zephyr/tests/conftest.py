"""Puts this folder on ``sys.path`` so worker processes import ``zephyr_test_helpers`` by name; the
Ray fixtures (a real head on 127.0.0.1)."""

from __future__ import annotations

import sys
from pathlib import Path

from testsupport.ray_cluster import ray_client, ray_cluster  # noqa: F401 - fixtures

TESTS_DIR = str(Path(__file__).resolve().parent)
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)
