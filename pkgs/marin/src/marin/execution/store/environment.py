"""The environment fingerprint recorded in every step's provenance."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
from functools import cache
from importlib import metadata
from typing import Any

from marin.execution.core.identity import workspace_root
from rigging.config.discovery import find_workspace_root

__all__ = ["KEY_PACKAGES", "current_environment", "environment_fingerprint", "environment_root", "fingerprint_digest",
           "host_of"]

KEY_PACKAGES = (
    "jax", "jaxlib", "dm-haiku", "optax", "orbax-checkpoint", "grain", "array-record", "tensorstore",
    "tokenizers", "numpy", "ray", "gcsfs", "fsspec", "click",
    "rigging", "fray", "iris", "zephyr", "levanter", "marin",
)


def _file_digest(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _git(root: str, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@cache
def environment_fingerprint(root: str | None) -> dict[str, Any]:
    """Python and key package versions, lock-file digests, git commit and dirty flag.

    ``host`` is recorded for provenance but kept out of :func:`fingerprint_digest`.
    """
    versions = {}
    for name in KEY_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    commit = dirty = None
    if root:
        commit = _git(root, "rev-parse", "HEAD")
        status = _git(root, "status", "--porcelain", "--untracked-files=no")
        dirty = bool(status) if status is not None else None
    return {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": f"{platform.system()}-{platform.machine()}",
        "packages": versions,
        "uv_lock_sha256": _file_digest(os.path.join(root, "uv.lock")) if root else None,
        "flake_lock_sha256": _file_digest(os.path.join(root, "flake.lock")) if root else None,
        "git_commit": commit,
        "git_dirty": dirty,
        "host": socket.gethostname(),
    }


def host_of(fingerprint: dict[str, Any]) -> str | None:
    """The host a fingerprint (:func:`environment_fingerprint`) was taken on."""
    host = fingerprint.get("host")
    return host if isinstance(host, str) else None


def fingerprint_digest(fingerprint: dict[str, Any]) -> str:
    """A digest of what defines the environment (no host, commit or dirty flag)."""
    keep = {k: fingerprint.get(k) for k in ("python", "implementation", "platform", "packages",
                                            "uv_lock_sha256", "flake_lock_sha256")}
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()


@cache
def environment_root() -> str | None:
    """The workspace the running ``marin`` comes from (its ``uv.lock`` and git checkout).

    Found from where the ``marin`` package lives, not from the working folder: the same
    environment planned from another folder has the same fingerprint. A ``marin`` installed
    outside any workspace falls back to the workspace of the working folder.
    """
    found = find_workspace_root(os.path.dirname(os.path.abspath(__file__)))
    if found is not None and (found / "uv.lock").is_file():
        return str(found)
    return workspace_root()


def current_environment() -> tuple[dict[str, Any], str]:
    """The fingerprint of the environment this process runs in, and its digest."""
    fingerprint = environment_fingerprint(environment_root())
    return fingerprint, fingerprint_digest(fingerprint)
