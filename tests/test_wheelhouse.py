"""A host without a package index: a wheelhouse of the lock's wheels (here a small one, taken from
the local uv cache, so no network is used) installs into a working environment with no index."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "nix" / "wheelhouse.py"
_spec = importlib.util.spec_from_file_location("wheelhouse", SCRIPT)
assert _spec is not None and _spec.loader is not None
wheelhouse = importlib.util.module_from_spec(_spec)
sys.modules["wheelhouse"] = wheelhouse  # its dataclasses look their module up by name
_spec.loader.exec_module(wheelhouse)


def _uv() -> str:
    found = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    assert os.access(found, os.X_OK), "uv is what `make setup` installs the environment with"
    return found


def _uv_cache() -> Path:
    return Path(subprocess.run([_uv(), "cache", "dir"], check=True, capture_output=True, text=True).stdout.strip())


def _no_network(home: Path | None = None) -> dict[str, str]:
    """An environment in which any index a tool would ask is unreachable (and uv may not try); with
    ``home``, a host without uv (not on PATH, not in ``~/.local/bin``): venv and pip are used."""
    dead = "http://127.0.0.1:9/simple"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "VIRTUAL_ENV"))}
    uv_dir = str(Path(_uv()).parent)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != uv_dir and not Path(p, "uv").exists()]
    env.update({"PIP_INDEX_URL": dead, "UV_INDEX_URL": dead, "UV_OFFLINE": "1", "PIP_CONFIG_FILE": os.devnull})
    if home is not None:
        return {**env, "PATH": os.pathsep.join(path), "HOME": str(home)}
    return {**env, "PATH": os.pathsep.join([uv_dir, *path])}


def _script(*args: str, home: Path | None = None, check: bool = True) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], env=_no_network(home), capture_output=True, text=True)
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def _simple_index(folder: Path, wheel: Path) -> str:
    """A PEP 503 index of one wheel, as a host's own index (``file:///opt/pypi/simple``) is laid out."""
    name = wheelhouse._normalize(wheel.name.split("-")[0])
    (folder / name).mkdir(parents=True)
    shutil.copy2(wheel, folder / name / wheel.name)
    (folder / name / "index.html").write_text(f'<html><body><a href="{wheel.name}">{wheel.name}</a></body></html>\n')
    return folder.as_uri()


def test_a_wheelhouse_in_parts_installs_with_no_index_and_no_uv_and_the_host_index_fills_what_was_left_out(tmp_path):
    # As on the TPU host: no uv, no index; venv and pip from the host's Python.
    out = tmp_path / "wheelhouse"
    # click (pure Python), xxhash (a manylinux wheel), word2number (sdist only: uv built its wheel);
    # tabulate is left out, as a host whose own index has it.
    _script("build", "--out", str(out), "--platform", "manylinux_2_28_x86_64", "--only", "click,xxhash,word2number,tabulate",
            "--exclude", "tabulate", "--split-mib", "0.5", "--from-cache", str(_uv_cache()))
    pins = (out / "requirements.txt").read_text().split()
    assert sorted(p.split("==")[0] for p in pins) == ["click", "word2number", "xxhash"]
    assert {p.name.split("-")[0] for p in out.glob("*.whl")} >= {"click", "word2number", "xxhash", "hatchling"}
    assert json.loads((out / "wheelhouse.json").read_text())["excluded"] == ["tabulate"]
    parts = sorted(tmp_path.glob("wheelhouse-*"))
    assert len(parts) >= 2 and all(sum(w.stat().st_size for w in p.glob("*.whl")) <= 0.5 * 2**20 for p in parts)
    tabulate = next(Path(_uv_cache()).glob("wheels-v*/pypi/tabulate/*-py3-none-any"))
    host_index = tmp_path / "host-index"
    wheelhouse._zip_unpacked(tabulate, tmp_path / f"tabulate-{tabulate.name}.whl")
    url = _simple_index(host_index, tmp_path / f"tabulate-{tabulate.name}.whl")
    venv, stamp = tmp_path / "venv", tmp_path / "venv.synced"
    home = tmp_path / "home"
    home.mkdir()
    early = _script("install", str(parts[-1]), "--venv", str(venv), home=home, check=False)
    assert "install parts 1 to" in early  # the last part first: what the others hold is named
    for part in parts[:-1]:
        out = _script("install", str(part), "--venv", str(venv), "--stamp", str(stamp), home=home)
        assert "install the next part" in out and not stamp.exists()
    out = _script("install", str(parts[-1]), "--venv", str(venv), "--host-index", url, "--stamp", str(stamp), home=home)
    assert stamp.exists() and "-m pip install" in out and "uv pip" not in out
    code = ("import click, xxhash, word2number, tabulate, rigging.durations, marin.cli.main, experiments.scale; "
            "print(rigging.durations.__file__)")
    seen = subprocess.run([str(venv / "bin" / "python"), "-c", code], check=True, capture_output=True, text=True)
    assert seen.stdout.strip() == str(ROOT / "pkgs" / "rigging" / "src" / "rigging" / "durations.py")  # editable
    assert (venv / "bin" / "marin").exists()


def test_with_uv_a_wheelhouse_installs_with_uv_and_no_index(tmp_path):
    out = tmp_path / "wheelhouse"
    _script("build", "--out", str(out), "--platform", "manylinux_2_28_x86_64", "--only", "click",
            "--from-cache", str(_uv_cache()))
    venv = tmp_path / "venv"
    assert "uv pip install" in _script("install", str(out), "--venv", str(venv))
    subprocess.run([str(venv / "bin" / "python"), "-c", "import click, marin.cli.main"], check=True)


def test_the_target_decides_tags_and_markers():
    target = wheelhouse.Target("manylinux_2_28_x86_64", "3.11")
    assert target.platforms[0] == "manylinux_2_28_x86_64" and "manylinux2014_x86_64" in target.platforms
    tags = target.tags()
    assert tags.index("cp311-cp311-manylinux_2_28_x86_64") < tags.index("py3-none-any")
    assert "cp312-cp312-manylinux_2_28_x86_64" not in tags
    assert target.marker_environment()["platform_machine"] == "x86_64"
    mac = wheelhouse.Target("macosx_14_0_arm64", "3.12").marker_environment()
    assert (mac["sys_platform"], mac["python_version"]) == ("darwin", "3.12")


def test_make_wheelhouse_needs_a_platform():
    made = subprocess.run(["make", "-s", "wheelhouse"], cwd=ROOT, capture_output=True, text=True)
    assert made.returncode != 0 and "give PLATFORM=" in made.stderr


@pytest.mark.parametrize("missing", ["requirements.txt", "wheelhouse.json"])
def test_installing_from_a_folder_that_is_no_wheelhouse_is_one_line(tmp_path, missing):
    (tmp_path / "requirements.txt").write_text("")
    (tmp_path / "build-requirements.txt").write_text("")
    (tmp_path / "wheelhouse.json").write_text("{}")
    (tmp_path / missing).unlink()
    done = subprocess.run([sys.executable, str(SCRIPT), "install", str(tmp_path), "--venv", str(tmp_path / "v")],
                          capture_output=True, text=True)
    assert done.returncode != 0 and done.stderr.strip().endswith("a folder `make wheelhouse` wrote?")
