"""The soak test with a small count: kills and races on the soak graph, then every check of ``make soak``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_soak_small_count_survives_kills_and_races(tmp_path):
    # Seed 3 draws both kinds of round (kills of runners and steps, and a race) in four rounds.
    proc = subprocess.run([sys.executable, "-m", "tests.soak", "--seed", "3", "--rounds", "4",
                           "--workdir", str(tmp_path / "soak")], cwd=ROOT, capture_output=True, text=True,
                          timeout=280)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "soak: OK" in out
    assert "survived" in out and "bit for bit equal to the clean run" in out
    assert "KILL" in out, "the seed must draw at least one kill"
    # Its kill rounds wait for a step process (or a checkpoint) before they kill: a step process,
    # its group or the warm template, not only runners (warm workers hid those from the soak once).
    assert re.search(r"KILL (step|step-group|template) \d+ of runner", out), out[-6000:]
    assert re.search(r"survived \d+ kills \(\d+ runner, \d+ step, \d+ step-group, \d+ template, \d+ shuffle-worker\)",
                     out)
    # The dedup's zephyr shuffle and the sweep's expansion were built and checked against the clean run.
    assert "soak/dedup: 4 files (sidecars, summary) byte for byte equal to the clean run" in out
    assert re.search(r"sweep: expanded into the clean run's 8 steps, names and hashes", out)
    assert "builds: every step published once plus once per removal" in out


def test_soak_rejects_bad_options():
    proc = subprocess.run([sys.executable, "-m", "tests.soak", "--rounds", "-1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--rounds must be >= 0" in proc.stderr
