"""The environment fingerprint describes the installed environment, not the working folder."""

from __future__ import annotations

import json
import os
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


def test_a_closure_holds_the_distributions_reached_and_what_they_require(tmp_path, subprocess_env):
    from marin.execution.store.environment import PYTHON

    site = tmp_path / "site"
    _dist(site, "envtest-extract", "2.0.0", requires=("envtest-parser>=1", 'envtest-speedups; extra == "all"',
                                                        'envtest-missing; sys_platform == "win32"'))
    _dist(site, "envtest-parser", "1.4", requires=("envtest-base",))
    _dist(site, "envtest-base", "0.9")
    _dist(site, "envtest-speedups", "3.0")  # installed, but only an extra's: not the step's unless it imports it
    _dist(site, "EnvTest.Odd_Name", "5.1", top_level="envtest_othermodule")  # module and distribution named apart
    # In a fresh process: the closure is read once per process, as the process imported its packages, so
    # a test process that read the installed distributions before this site existed would not see it.
    code = ("import json, sys; from marin.execution.store.environment import closure_versions; "
            "print(json.dumps(closure_versions(sys.argv[1:])))")
    env = {**subprocess_env, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), subprocess_env.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", code, "envtest_extract", "envtest_othermodule", "json",
                          "envtest_nowhere"], env=env, capture_output=True, text=True, timeout=120, check=True)
    found = json.loads(out.stdout)
    assert found == {"envtest-extract": "2.0.0", "envtest-parser": "1.4", "envtest-base": "0.9",
                     "envtest-odd-name": "5.1", PYTHON: sys.version.split()[0]}
