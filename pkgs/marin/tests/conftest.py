"""Fixtures of the marin engine tests.

* ``testsupport/toplevel`` goes on ``sys.path`` so ``steps_for_tests`` (the step functions most
  tests build) imports under that one top-level name here, in spawned step workers (which inherit
  ``sys.path``) and in subprocess runners (``PYTHONPATH``);
  the test modules sit in one subfolder per layer they test (docs/architecture.md), and pytest
  (``--import-mode=importlib``) names them ``pkgs.marin.tests.<layer>.test_<x>``: a worker imports
  a step function defined in one under that name (the workspace root is on its ``sys.path``), or
  from the file the runner records;
* ``counter``: a folder where step functions count their calls across processes;
* ``store``: a (prefix, client) pair parametrized over the local, ``memory://`` and ``gs://``
  stores. ``memory://`` lives inside one process, so its steps run in this process;
* ``lm_data_prefix``: ``testsupport.lm_graph``'s data; ``trained_prefix``: the same with ``tiny_model(steps=10)``
  and ``tiny_model(steps=20)`` trained; each built once per session, shared by every xdist worker
  (``testsupport.shared``); tests copy them (``testsupport.lm_graph.copy_prefix``) to add their steps.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import testsupport

_IMPORT_DIR = str(Path(testsupport.__file__).resolve().parent / "toplevel")
if _IMPORT_DIR not in sys.path:
    sys.path.insert(0, _IMPORT_DIR)

import steps_for_tests  # noqa: E402
from steps_for_tests import IMPORT_DIR, WORKSPACE  # noqa: E402

from testsupport.shared import build_once  # noqa: E402


@pytest.fixture
def counter(tmp_path: Path) -> str:
    path = tmp_path / "counter"
    path.mkdir()
    return str(path)


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for runner subprocesses: steps_for_tests importable, no stray MARIN_* config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARIN_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (IMPORT_DIR, WORKSPACE, env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture(params=["local", "memory", "gcs"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    """(prefix, client) for a runner: the default local processes, or in-process for memory://."""
    if request.param == "local":
        return str(tmp_path / "store"), None
    if request.param == "memory":
        return request.getfixturevalue("memory_prefix"), steps_for_tests.InProcessClient()
    return request.getfixturevalue("gcs_bucket") + "/store", None


@pytest.fixture(scope="session")
def lm_data_prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``testsupport.lm_graph``'s corpus, tokenizer and shards, built once for the session (every xdist worker):
    read it, or copy it (``testsupport.lm_graph.copy_prefix``) to add steps."""
    from testsupport.lm_graph import build_data

    return build_once(tmp_path_factory, "lm-data", lambda folder: build_data(folder / "store")) / "store"


@pytest.fixture(scope="session")
def trained_prefix(tmp_path_factory: pytest.TempPathFactory, lm_data_prefix: Path) -> Path:
    """:func:`lm_data_prefix` with ``tiny_model(steps=20)`` and ``tiny_model(steps=10)`` trained, built
    once for the session (every xdist worker); tests copy it to add their steps."""
    from testsupport.lm_graph import copy_prefix, runner, tiny_model

    def build(folder: Path) -> None:
        prefix = copy_prefix(lm_data_prefix, folder / "store")
        # The longer run first: built after the shorter one it would extend it, and keep only its own
        # later checkpoints (tests read checkpoint 10 of the 20-step run).
        for model in (tiny_model(steps=20), tiny_model(steps=10)):
            result = runner(prefix).run([model])
            assert result.ok, [(s.name, s.error) for s in result.failed]

    return build_once(tmp_path_factory, "lm-trained", build) / "store"
