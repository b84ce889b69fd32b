"""The environment fingerprint describes the installed environment, not the working folder."""

from __future__ import annotations

import json
import subprocess
import sys

from steps_for_tests import WORKSPACE

_PRINT = ("import json; from marin.execution.store.environment import current_environment; "
          "f, d = current_environment(); print(json.dumps([d, f['uv_lock_sha256']]))")


def _fingerprint_from(cwd: str, env: dict[str, str]) -> tuple[str, str | None]:
    out = subprocess.run([sys.executable, "-c", _PRINT], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    digest, lock = json.loads(out.stdout)
    return digest, lock


def test_the_fingerprint_is_the_same_from_any_folder(tmp_path, subprocess_env):
    at_root = _fingerprint_from(WORKSPACE, subprocess_env)
    elsewhere = _fingerprint_from(str(tmp_path), subprocess_env)
    assert at_root[1] is not None, "the workspace's uv.lock was not found"
    assert elsewhere == at_root


def _dist(site, name: str, version: str, *, requires: tuple[str, ...] = (), top_level: str | None = None) -> None:
    """An installed distribution as an installer leaves one: its module and its ``.dist-info``."""
    module = top_level or name.replace("-", "_")
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text("")
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    lines = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", *(f"Requires-Dist: {r}\n" for r in requires)]
    (info / "METADATA").write_text("".join(lines))
    (info / "top_level.txt").write_text(module + "\n")


def test_a_closure_holds_the_distributions_reached_and_what_they_require(tmp_path, monkeypatch):
    from marin.execution.store.environment import PYTHON, closure_versions

    site = tmp_path / "site"
    _dist(site, "envtest-extract", "2.0.0", requires=("envtest-parser>=1", 'envtest-speedups; extra == "all"',
                                                        'envtest-missing; sys_platform == "win32"'))
    _dist(site, "envtest-parser", "1.4", requires=("envtest-base",))
    _dist(site, "envtest-base", "0.9")
    _dist(site, "envtest-speedups", "3.0")  # installed, but only an extra's: not the step's unless it imports it
    _dist(site, "EnvTest.Odd_Name", "5.1", top_level="envtest_othermodule")  # module and distribution named apart
    monkeypatch.syspath_prepend(str(site))
    found = closure_versions(["envtest_extract", "envtest_othermodule", "json", "envtest_nowhere"])
    assert found == {"envtest-extract": "2.0.0", "envtest-parser": "1.4", "envtest-base": "0.9",
                     "envtest-odd-name": "5.1", PYTHON: sys.version.split()[0]}
