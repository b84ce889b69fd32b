"""`make nix-check` (nix/check.sh) with a real nix-instantiate, on the tree and on broken copies.

nix/check.sh installs Debian's nix-bin itself when nix-instantiate is missing; if it cannot,
it fails, and so do these tests (they never skip).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = Path("nix") / "check.sh"
_IGNORED = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".marin",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    "node_modules",
    "result",
    "bench-results",
    "build",  # make's outputs (the docs site, wheelhouses): hundreds of MB in a used checkout, none read here
)


def _run_check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(root / CHECK), str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _fail_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith("FAIL")]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the project (sources, locks, nix/) that a test may break."""
    copy = tmp_path / "project"
    shutil.copytree(ROOT, copy, ignore=_IGNORED, symlinks=True)
    return copy


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_passes_on_the_real_tree() -> None:
    lock_before = (ROOT / "flake.lock").read_bytes()
    result = _run_check(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _fail_lines(result) == []
    assert re.search(r"^nix-check: \d+ passed, 0 failed$", result.stdout, re.M)
    for expected in (
        "ok    parse:",
        "ok    flake.lock: input names match flake.nix",
        "ok    uv.lock: matches the pyproject.toml files",
        "ok    marin: console script",
    ):
        assert expected in result.stdout
    assert (ROOT / "flake.lock").read_bytes() == lock_before


def test_nix_first_opens_its_store_under_the_installers_lock(tmp_path: Path) -> None:
    """Checks started together (pytest -n) must not create the Nix store database at once: two first
    uses collide ("database is busy", "schema is corrupt"). While the lock is held, a check on a
    fresh state folder creates nothing; once it is released, the check passes."""
    state = tmp_path / "nix-state"
    lock = Path(os.environ.get("TMPDIR") or "/tmp") / "marin-nix-bin.lock"
    if not lock.exists():
        lock.touch()
    with lock.open() as held:  # read-only, as check.sh takes it: the file may be another user's
        fcntl.flock(held, fcntl.LOCK_EX)
        check = subprocess.Popen(
            ["bash", str(ROOT / CHECK), str(ROOT)],
            env={**os.environ, "NIX_STATE_DIR": str(state)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Until it waits on the lock (a `flock` under it) or has ended (it never asked for the lock).
        deadline = time.monotonic() + 60
        while check.poll() is None and not _waits_on_a_lock(check.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        created_while_held = (state / "db").exists()
        fcntl.flock(held, fcntl.LOCK_UN)
    stdout, stderr = check.communicate(timeout=300)
    assert not created_while_held, "the check opened the Nix store without waiting for the lock"
    assert check.returncode == 0, stdout + stderr
    assert (state / "db" / "db.sqlite").exists()


def _waits_on_a_lock(pid: int) -> bool:
    """Whether a ``flock`` process runs under ``pid`` (check.sh takes its lock with flock(1))."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return False
    names = []
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            names.append(child.name())
    return "flock" in names


def test_a_nix_syntax_error_fails(tree: Path) -> None:
    apps = tree / "nix" / "apps.nix"
    apps.write_text(apps.read_text() + "\n{ broken = ; }\n")
    result = _run_check(tree)
    assert result.returncode != 0
    assert any(line.startswith("FAIL  parse:") for line in _fail_lines(result)), result.stdout
    assert "nix/apps.nix:" in result.stdout


def test_an_input_added_to_flake_nix_but_not_locked_fails(tree: Path) -> None:
    _edit(
        tree / "flake.nix",
        "  inputs = {\n",
        '  inputs = {\n    flake-utils.url = "github:numtide/flake-utils";\n',
    )
    result = _run_check(tree)
    assert result.returncode != 0
    assert "input 'flake-utils' is in flake.nix but not in flake.lock" in result.stdout


def test_a_renamed_input_fails(tree: Path) -> None:
    _edit(tree / "flake.nix", "    pyproject-build-systems = {", "    build-systems = {")
    result = _run_check(tree)
    assert result.returncode != 0
    assert "input 'build-systems' is in flake.nix but not in flake.lock" in result.stdout
    assert "input 'pyproject-build-systems' is in flake.lock but not in flake.nix" in result.stdout


def test_a_changed_url_fails(tree: Path) -> None:
    _edit(tree / "flake.nix", "github:NixOS/nixpkgs/nixos-unstable", "github:NixOS/nixpkgs/nixos-25.05")
    result = _run_check(tree)
    assert result.returncode != 0
    assert "input 'nixpkgs': flake.nix says" in result.stdout


def test_a_dropped_follows_fails(tree: Path) -> None:
    _edit(tree / "flake.nix", '      inputs.uv2nix.follows = "uv2nix";\n', "")
    result = _run_check(tree)
    assert result.returncode != 0
    assert "flake.lock has 'pyproject-build-systems.inputs.uv2nix' following" in result.stdout


def test_a_lock_node_without_nar_hash_fails(tree: Path) -> None:
    lock_path = tree / "flake.lock"
    lock = json.loads(lock_path.read_text())
    del lock["nodes"]["uv2nix"]["locked"]["narHash"]
    lock_path.write_text(json.dumps(lock, indent=2))
    result = _run_check(tree)
    assert result.returncode != 0
    assert "node 'uv2nix' has no sha256 locked.narHash" in result.stdout


def test_uv_lock_out_of_date_fails(tree: Path) -> None:
    _edit(
        tree / "pkgs" / "rigging" / "pyproject.toml",
        "dependencies = [\n",
        'dependencies = [\n    "click>=8.1",\n',
    )
    result = _run_check(tree)
    assert result.returncode != 0
    assert "FAIL  uv.lock: out of date with the pyproject.toml files" in result.stdout


def test_a_missing_console_script_fails(tree: Path) -> None:
    _edit(
        tree / "pkgs" / "marin" / "pyproject.toml",
        'marin = "marin.cli.main:main"',
        'marin = "marin.cli:main"',
    )
    result = _run_check(tree)
    assert result.returncode != 0
    assert "FAIL  marin: console script" in result.stdout


def test_a_missing_flake_app_fails(tree: Path) -> None:
    _edit(tree / "nix" / "apps.nix", "  train-nano = mkApp", "  train-tiny = mkApp")
    result = _run_check(tree)
    assert result.returncode != 0
    assert "apps.x86_64-linux.train-nano is missing" in result.stdout
