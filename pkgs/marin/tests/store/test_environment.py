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
