"""Fixtures shared by every test folder of the workspace (``pkgs/*/tests`` and ``tests/``).

* ``gcs_emulator`` (session): a running in-memory ``gcp-storage-emulator`` on 127.0.0.1 with
  ``STORAGE_EMULATOR_HOST``, ``TENSORSTORE_GCS_HTTP_URL`` and
  ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` set in ``os.environ`` (child processes inherit
  them); yields a :class:`rigging.testing.GcsEmulator`. Started only when a test asks for it.
* ``gcs_bucket``: a fresh, empty bucket on that emulator, as ``"gs://<bucket>"``.
* ``memory_prefix``: a fresh ``"memory://test-<uuid>"`` root, removed afterwards.
* ``store_url``: parametrized over ``local`` (a ``tmp_path`` folder), ``memory`` and ``gcs``;
  for contract suites that every store must pass.

The emulator does not enforce generation preconditions (see ``rigging.testing``): prove
create-if-absent races and fencing on the local and memory stores.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

# ``import gcsfs`` reads this once (default true) and then hands out its zonal/HNS subclass, which
# speaks gRPC and hangs against the emulator; set it before any test module imports gcsfs.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import pytest  # noqa: E402

from rigging import testing as _testing  # noqa: E402


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[_testing.GcsEmulator]:
    emulator = _testing.start_gcs_emulator()
    try:
        with _testing.use_gcs_emulator(emulator.url):
            yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def gcs_bucket(gcs_emulator: _testing.GcsEmulator) -> str:
    if not gcs_emulator.alive():
        raise RuntimeError(f"the GCS emulator at {gcs_emulator.url} has exited")
    # Another fixture or test may have swapped the env; make sure gs:// still means the emulator.
    if os.environ.get("STORAGE_EMULATOR_HOST") != gcs_emulator.url:
        raise RuntimeError(
            f"STORAGE_EMULATOR_HOST is {os.environ.get('STORAGE_EMULATOR_HOST')!r}, "
            f"expected the emulator at {gcs_emulator.url}"
        )
    return gcs_emulator.create_bucket()


@pytest.fixture
def memory_prefix() -> Iterator[str]:
    prefix = _testing.new_memory_prefix()
    yield prefix
    from rigging.filesystem import rm_tree

    rm_tree(prefix)


@pytest.fixture(params=["local", "memory", "gcs"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "store")
    if request.param == "memory":
        return request.getfixturevalue("memory_prefix")
    return request.getfixturevalue("gcs_bucket")


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory):
    """A headless Chromium (Debian's, installed when missing) driven by Selenium."""
    from marin.report.browser import headless_chromium

    with headless_chromium(str(tmp_path_factory.mktemp("chromium-profile"))) as driver:
        yield driver
