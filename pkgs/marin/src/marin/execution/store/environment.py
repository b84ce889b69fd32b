"""The environment fingerprint recorded in every step's provenance."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import metadata
from typing import Any

from marin.execution.core.identity import workspace_root
from rigging.config.discovery import find_workspace_root

__all__ = ["KEY_PACKAGES", "PYTHON", "closure_versions", "current_environment", "environment_fingerprint",
           "environment_root", "fingerprint_digest", "host_of"]

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


PYTHON = "python"
"""The key of the interpreter's version in :func:`closure_versions`."""

_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA = re.compile(r"\bextra\s*==")


def _normalised(name: str) -> str:
    """A distribution's name as PyPI compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _provides(dist: metadata.Distribution, module: str) -> bool:
    top_level = dist.read_text("top_level.txt")
    if top_level is not None:
        return module in top_level.split()
    return any(f.parts and f.parts[0] in (module, f"{module}.py") for f in dist.files or ())


@cache
def _distributions_of(module: str) -> tuple[str, ...]:
    """The installed distributions that provide top-level module ``module`` (usually the one of
    the same name: looked up first, the full map of every distribution read only when it is not)."""
    try:
        dist = metadata.distribution(module)
    except metadata.PackageNotFoundError:
        dist = None
    if dist is not None and _provides(dist, module):
        return (_normalised(dist.metadata["Name"] or module),)
    return tuple(sorted({_normalised(d) for d in _all_distributions().get(module, ())}))


@cache
def _all_distributions() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()


@cache
def _requirements(dist: str) -> tuple[str, ...]:
    """The distributions ``dist`` requires, but for its extras' (which extras were asked for is not
    recorded; an extra's package the code uses is reached by the code digest when it imports it).
    Other markers are not evaluated: a requirement for another platform is simply not installed."""
    try:
        requires = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return ()
    found = (_REQUIREMENT_NAME.match(r) for r in requires if not _EXTRA.search(r.partition(";")[2]))
    return tuple(sorted({_normalised(m.group(1)) for m in found if m}))


def closure_versions(modules: Iterable[str]) -> dict[str, str]:
    """The versions of what code reaching top-level modules ``modules`` runs on: the installed
    distributions that provide them and, transitively, every installed distribution those require
    (``trafilatura`` brings ``lxml``, ``justext`` ...), by normalised name, with the Python version
    under :data:`PYTHON`. A module no installed distribution provides (the standard library, a
    folder on ``sys.path``) adds nothing.

    Read once per process, as the process imported them: a package upgraded under a running
    process does not change the code it runs.
    """
    return dict(_closure_versions(tuple(sorted(set(modules)))))


@cache
def _closure_versions(modules: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    versions = {PYTHON: platform.python_version()}
    todo = [dist for module in modules for dist in _distributions_of(module)]
    while todo:
        dist = todo.pop()
        if dist in versions:
            continue
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue  # required but not installed: an extra's, or a marker's for another platform
        todo.extend(_requirements(dist))
    return tuple(sorted(versions.items()))
