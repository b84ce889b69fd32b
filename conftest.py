"""Fixtures shared by every test folder of the workspace (``pkgs/*/tests`` and ``tests/``).

* ``gcs_emulator`` (session): a running in-memory ``gcp-storage-emulator`` on 127.0.0.1 with
  ``STORAGE_EMULATOR_HOST``, ``TENSORSTORE_GCS_HTTP_URL`` and
  ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` set in ``os.environ`` (child processes inherit
  them); yields a :class:`testsupport.gcs.GcsEmulator`. Started only when a test asks for it.
* ``gcs_bucket``: a fresh, empty bucket on that emulator, as ``"gs://<bucket>"``.
* ``strict_gcs_emulator`` (session), ``strict_gcs_bucket``: the same with ``fake-gcs-server``,
  which enforces ``ifGenerationMatch=0`` on the uploads the store sends (see
  :mod:`testsupport.gcs`): create-if-absent races, lease takeovers and fencing on gs:// are proven
  there.
* ``faulty_gcs``: a :class:`testsupport.faults.FaultProxy` in front of the strict emulator (no fault
  until a test scripts one or sets rates) and a fresh bucket on it, ``gs://`` pointed at the proxy;
  yields ``(proxy, "gs://<bucket>")``.
* ``memory_prefix``: a fresh ``"memory://test-<uuid>"`` root, removed afterwards.
* ``store_url``: parametrized over ``local`` (a ``tmp_path`` folder), ``memory``,
  ``gs-gcp-emulator`` and ``gs-fake-gcs``; for contract suites that every store must pass.
* ``ray_cluster`` (session), ``ray_client``: the session's one Ray head on 127.0.0.1 and a client
  of it (:mod:`testsupport.ray_cluster`). Defined here and nowhere else: each conftest or module
  that imported them made a fixture of its own, and so a head of its own (five per session, all
  kept running until the session ended).
* (autouse) the variables that hide the accelerator (``JAX_PLATFORMS``, ``CUDA_VISIBLE_DEVICES``,
  ``MARIN_ACCELERATOR_ENV``) are put back after every test: the CLI hides the accelerator from
  its own short-lived process, and a test that runs the CLI in-process would otherwise hand its
  hidden state to the next test of the worker.
* (autouse, session) ``MARIN_STAT_CACHE`` names a stat cache of the session's own, so no test
  writes the user's ``~/.cache/marin``.

Only one emulator is the target of ``gs://`` at a time (the environment names one): asking for a
bucket of one switches the environment to it, and the session fixtures put back what they found.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator

# ``import gcsfs`` reads this once (default true) and then hands out its zonal/HNS subclass, which
# speaks gRPC and hangs against the emulator; set it before any test module imports gcsfs.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

# XLA compiles the tests' many tiny CPU programs quickly (``testsupport.cpu_devices.QUICK_COMPILE_FLAGS``:
# -O0, the older emitter), set before any test starts a JAX backend; child processes inherit them (a
# test that sets XLA_FLAGS for a child appends to them: ``testsupport.cpu_devices``).
from testsupport.cpu_devices import with_quick_compile  # noqa: E402

os.environ["XLA_FLAGS"] = with_quick_compile(os.environ.get("XLA_FLAGS", ""))

import pytest  # noqa: E402

from iris.accelerator_env import HIDDEN_VARIABLES, SAVED  # noqa: E402
from rigging.log import printable  # noqa: E402
from testsupport import faults as _faults  # noqa: E402
from testsupport import gcs as _gcs  # noqa: E402
from testsupport.e2e import NANO_STORE_GROUP  # noqa: E402
from testsupport.ray_cluster import (  # noqa: E402
    RAY_HEAD_GROUP,
    ray_client,  # noqa: F401 - fixture
    ray_cluster,  # noqa: F401 - fixture
    require_session_head,
    stop_session_head,
)
from testsupport.shared import session_root  # noqa: E402


def _uses_ray_head(item: pytest.Item) -> bool:
    """Whether ``item`` asks for the session's Ray head: by fixture, or as the Ray case of a test
    parametrized over backends (which fetches the fixture by name: ``[ray]``, ``[Backend.RAY]``)."""
    names = getattr(item, "fixturenames", ())
    if "ray_cluster" in names or "ray_client" in names:
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(part in ("ray", "Backend.RAY") for part in callspec.id.split("-"))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups (its own modifyitems)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Groups for ``--dist loadgroup`` (a test already in a group keeps it):

    * the tests that use the session's Ray head (``testsupport.ray_cluster``) go to one worker,
      which starts the one head: a head costs seconds to start and keeps processes running;
    * a module-scoped fixture is built once per worker that runs a test of the module, so the tests
      that use one go to one worker: a group per module.

    Then the order in which pytest-xdist hands out its work units (a group, or a test of none): the
    groups that take minutes (``FIRST_GROUPS``) first, then the others by their number of tests, most
    first, each one's tests in their order (a stable sort). xdist hands out the units in the order
    of the collection (``pytest_configure`` turns off its own sort by size, which put five groups of
    more, shorter tests before the nano store's), so a long group collected late (``tests/`` comes
    last) would otherwise run alone at the end while the other workers wait.
    """
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if _uses_ray_head(item):
            item.add_marker(pytest.mark.xdist_group(RAY_HEAD_GROUP))
        elif any(d.scope == "module" for chain in defs for d in chain):
            item.add_marker(pytest.mark.xdist_group(f"module:{item.nodeid.split('::')[0]}"))
    sizes = collections.Counter(_unit(item) for item in items)
    first = {group: rank for rank, group in enumerate(FIRST_GROUPS)}
    items.sort(key=lambda item: (first.get(_group(item) or "", len(first)), -sizes[_unit(item)]))


def pytest_configure(config: pytest.Config) -> None:
    """Under ``--dist loadgroup``, pytest-xdist hands out its work units in the order
    ``pytest_collection_modifyitems`` leaves them in: its own sort by size (``--loadscope-reorder``,
    on by default) would move the groups of more tests ahead of ``FIRST_GROUPS``."""
    if getattr(config.option, "dist", None) == "loadgroup":
        config.option.loadscopereorder = False


FIRST_GROUPS = (NANO_STORE_GROUP, RAY_HEAD_GROUP)
"""Groups sent to the workers before every other test: the longest (the nano store's, several
minutes) and the Ray head's (a minute of tests, and a head that is stopped after them)."""


def _group(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return mark.args[0] if mark is not None and mark.args else None


def _unit(item: pytest.Item) -> str:
    """The work unit of ``item`` under ``--dist loadgroup``: its group, or the test alone."""
    return _group(item) or item.nodeid


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _uses_ray_head(item):
        require_session_head()


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the session's Ray head after the last test of its group, not at the end of the session:
    an idle head keeps about ten processes busy (7-15% of a core). Only under ``--dist loadgroup``,
    where a group comes to one worker in one piece, so no test of it can follow another test."""
    # (pytest-xdist's worker sees --dist as "no", and sets ``loadgroup`` when it was loadgroup.)
    if getattr(item.config.option, "loadgroup", False) and _in_ray_group(item) \
            and (nextitem is None or not _in_ray_group(nextitem)):
        stop_session_head()


def _in_ray_group(item: pytest.Item) -> bool:
    return _group(item) == RAY_HEAD_GROUP


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A test's captured output and logs with any lone surrogate escaped: a worker of pytest-xdist
    cannot send a report holding one and the whole session stops (seen with a fuzzed damaged file)."""
    outcome = yield
    report = outcome.get_result()
    report.sections = [(title, printable(content)) for title, content in report.sections]


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[_gcs.GcsEmulator]:
    emulator = _gcs.start_gcs_emulator()
    try:
        with _gcs.use_gcs_emulator(emulator.url):
            yield emulator
    finally:
        emulator.stop()


@pytest.fixture(scope="session")
def strict_gcs_emulator() -> Iterator[_gcs.GcsEmulator]:
    emulator = _gcs.start_fake_gcs_server()
    try:
        yield emulator
    finally:
        emulator.stop()


def _bucket_on(emulator: _gcs.GcsEmulator) -> Iterator[str]:
    if not emulator.alive():
        raise RuntimeError(f"the {emulator.kind.value} emulator at {emulator.url} has exited: {emulator.stderr()[-500:]}")
    with _gcs.use_gcs_emulator(emulator.url):
        yield emulator.create_bucket()


@pytest.fixture
def gcs_bucket(gcs_emulator: _gcs.GcsEmulator) -> Iterator[str]:
    yield from _bucket_on(gcs_emulator)


@pytest.fixture
def strict_gcs_bucket(strict_gcs_emulator: _gcs.GcsEmulator) -> Iterator[str]:
    yield from _bucket_on(strict_gcs_emulator)


@pytest.fixture
def faulty_gcs(strict_gcs_emulator: _gcs.GcsEmulator) -> Iterator[tuple[_faults.FaultProxy, str]]:
    if not strict_gcs_emulator.alive():
        raise RuntimeError(f"the fake-gcs-server at {strict_gcs_emulator.url} has exited")
    bucket = strict_gcs_emulator.create_bucket()
    with _faults.FaultProxy(strict_gcs_emulator.url) as proxy, _gcs.use_gcs_emulator(proxy.url):
        yield proxy, bucket


@pytest.fixture
def memory_prefix() -> Iterator[str]:
    prefix = _gcs.new_memory_prefix()
    yield prefix
    from rigging.filesystem import rm_tree

    rm_tree(prefix)


@pytest.fixture(params=["local", "memory", "gs-gcp-emulator", "gs-fake-gcs"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "store")
    if request.param == "memory":
        return request.getfixturevalue("memory_prefix")
    if request.param == "gs-gcp-emulator":
        return request.getfixturevalue("gcs_bucket")
    return request.getfixturevalue("strict_gcs_bucket")


def _put_back(saved: dict[str, str | None]) -> None:
    """Set each variable of ``saved`` in ``os.environ`` back to its value there (None: unset)."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _accelerator_variables_put_back() -> Iterator[None]:
    """Each test ends with the variables that hide the accelerator as it found them."""
    saved = {name: os.environ.get(name) for name in (SAVED, *HIDDEN_VARIABLES)}
    yield
    _put_back(saved)


@pytest.fixture(scope="session", autouse=True)
def _session_stat_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Local sources' digests remembered in a file of this session's (shared by its xdist workers)."""
    saved = {"MARIN_STAT_CACHE": os.environ.get("MARIN_STAT_CACHE")}
    os.environ["MARIN_STAT_CACHE"] = str(session_root(tmp_path_factory) / "stat-cache.sqlite")
    yield
    _put_back(saved)


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory):
    """A headless Chromium (Debian's, installed when missing) driven by Selenium."""
    from marin.report.browser import headless_chromium

    with headless_chromium(str(tmp_path_factory.mktemp("chromium-profile"))) as driver:
        yield driver


JAX_CACHE_MAX_BYTES = 8 * 1024**3
"""The session's JAX compilation cache's size limit, far above what a session writes (the smoke
``make experiments``: 3 MB): set for the lock that comes with a limit (see ``_jax_compilation_cache``)."""


@pytest.fixture(scope="session", autouse=True)
def _jax_compilation_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Share compiled programs between the many identical tiny runs of the session: every xdist
    worker, its step subprocesses and warm workers (they inherit the environment).

    Compilation dominates these runs on a small CPU; a cached program is the one XLA would compile
    again, so caching changes no result. JAX keys an entry by the program (its source locations
    left out), the compile options and the versions, not by the process: a second process, or a
    second run of the same shapes with another schedule, reads what the first wrote.

    A size limit turns on JAX's lock of the folder (``filelock``, around every read and write of an
    entry): without one, an entry is written in place, so a process could read one that another was
    still writing, or two could write one at once.
    """
    # Imported here, not at the top: the fixture is the one place the test process needs jax for.
    import jax

    # MARIN_TEST_JAX_CACHE keeps the cache between sessions (a developer's reruns); by default it is
    # the session's own, so every run starts cold, as CI does.
    cache = os.environ.get("MARIN_TEST_JAX_CACHE") or str(session_root(tmp_path_factory) / "jax-cache")
    settings = {"JAX_COMPILATION_CACHE_DIR": cache, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_COMPILATION_CACHE_MAX_SIZE": str(JAX_CACHE_MAX_BYTES)}
    saved = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_compilation_cache_max_size", JAX_CACHE_MAX_BYTES)
    yield
    _put_back(saved)
