"""`make test` runs the suite with `pytest -n <cores + 1> --dist loadgroup`: the tests that share one built
store (``testsupport.e2e.shares_nano_store``) must run in one worker, one after another. pytest
9.2 silently broke that grouping for pytest-xdist 3.8 (every test ran wherever it was sent); this
checks, with the versions installed, that grouped tests do share a worker; that the tests of the
session's Ray head are one group, which gets one head, stopped after the group; and that a test
whose output holds a lone surrogate cannot stop the session (a worker cannot send such a report)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testsupport.e2e import NANO_STORE_GROUP, ROOT
from testsupport.ray_cluster import RAY_HEAD_GROUP

_TESTS = '''\
import json, os, time
import pytest

def _record(name):
    with open(os.path.join(os.environ["GROUP_LOG"], name), "w") as f:
        json.dump(os.environ["PYTEST_XDIST_WORKER"], f)
    time.sleep(0.3)  # long enough that both workers are busy at once

@pytest.mark.xdist_group("shared")
def test_grouped_0(): _record("grouped_0")
def test_free_0(): _record("free_0")
@pytest.mark.xdist_group("shared")
def test_grouped_1(): _record("grouped_1")
def test_free_1(): _record("free_1")
@pytest.mark.xdist_group("shared")
def test_grouped_2(): _record("grouped_2")
def test_free_2(): _record("free_2")
@pytest.mark.xdist_group("shared")
def test_grouped_3(): _record("grouped_3")
def test_free_3(): _record("free_3")
'''


def test_an_xdist_group_runs_in_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_groups.py").write_text(_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # this folder is the rootdir, not the workspace
    log = tmp_path / "log"
    log.mkdir()
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
                          "-p", "no:cacheprovider", "test_groups.py"], cwd=tmp_path, capture_output=True,
                         text=True, env={**_env(), "GROUP_LOG": str(log)}, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr

    workers = {p.name: json.loads(p.read_text()) for p in log.iterdir()}
    assert len(workers) == 8, workers
    grouped = {w for name, w in workers.items() if name.startswith("grouped")}
    assert len(grouped) == 1, f"the grouped tests ran in {sorted(grouped)}: {workers}"
    # Both workers took part: the other one ran free tests meanwhile.
    assert set(workers.values()) == {"gw0", "gw1"}, workers


_PRINT_GROUPS = '''\
import json, os
import pytest

@pytest.hookimpl(trylast=True)  # after the workspace's conftest has assigned the groups
def pytest_collection_modifyitems(items):
    groups, heads = {}, {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        groups[item.nodeid] = mark.args[0] if mark else None
        # Where the ray_cluster fixture this test would get is defined: each definition starts a head.
        defs = item.session._fixturemanager.getfixturedefs("ray_cluster", item)
        heads[item.nodeid] = f"{defs[-1].baseid}|{defs[-1].func.__module__}" if defs else None
    with open(os.environ["GROUPS_OUT"], "w") as f:
        json.dump({"groups": groups, "heads": heads}, f)
'''


def test_the_tests_that_use_the_ray_head_share_one_worker(tmp_path: Path) -> None:
    # One head per session, not one per worker: the Ray cases of the backend-parametrized tests and
    # the tests that take the fixture are in one group; their local cases are not.
    (tmp_path / "print_groups.py").write_text(_PRINT_GROUPS)
    out = tmp_path / "groups.json"
    modules = ["pkgs/fray/tests/test_client_contract.py", "pkgs/fray/tests/test_ray_client.py",
               "tests/test_ray_backend.py", "pkgs/marin/tests/run/test_lost_lease.py",
               "pkgs/iris/tests/test_multihost.py", "pkgs/zephyr/tests/test_shuffle.py"]
    ran = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-p", "print_groups", *modules], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**_env(), "GROUPS_OUT": str(out), "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    collected = json.loads(out.read_text())
    groups = collected["groups"]
    on_ray = {n for n, g in groups.items() if g == RAY_HEAD_GROUP}
    assert "pkgs/fray/tests/test_client_contract.py::test_submit_returns_the_value[ray]" in on_ray
    assert "pkgs/fray/tests/test_client_contract.py::test_submit_returns_the_value[local]" not in on_ray
    assert "tests/test_ray_backend.py::test_a_lost_worker_is_retried_and_resumes[Backend.RAY]" in on_ray
    assert "tests/test_ray_backend.py::test_a_lost_worker_is_retried_and_resumes[Backend.LOCAL]" not in on_ray
    assert "tests/test_ray_backend.py::test_hello_world_on_ray_matches_local" in on_ray
    assert {n for n in groups if n.startswith("pkgs/fray/tests/test_ray_client.py::")} <= on_ray
    lost = {n for n in groups if n.startswith("pkgs/marin/tests/run/test_lost_lease.py::") and "[ray]" in n}
    assert lost and lost <= on_ray
    # ... and that worker starts one head: every test of the group gets the one session fixture (a
    # conftest or module that imports the fixture defines another, which starts a head of its own).
    homes = {n.split("/tests/")[0] if n.startswith("pkgs/") else n.split("/")[0] for n in on_ray}
    assert homes == {"pkgs/fray", "pkgs/iris", "pkgs/zephyr", "pkgs/marin", "tests"}, sorted(homes)
    definitions = {collected["heads"][n] for n in on_ray}
    assert len(definitions) == 1, f"the Ray group's tests get {len(definitions)} ray_cluster fixtures: {sorted(definitions)}"


_USES_THE_HEAD = '''\
import json, os, sys
from testsupport.net import reachable

def test_a_takes_the_head(ray_cluster):
    host, port = ray_cluster.rsplit(":", 1)
    with open(os.environ["HEAD_LOG"], "w") as f:
        json.dump([host, int(port)], f)
    assert reachable(host, int(port))

def test_b_takes_a_client(ray_client):
    assert sys.modules["ray"].is_initialized()

def test_c_after_the_group():
    host, port = json.load(open(os.environ["HEAD_LOG"]))
    ray = sys.modules.get("ray")
    with open(os.environ["HEAD_LOG"] + ".after", "w") as f:
        json.dump({"head_answers": reachable(host, port), "connected": ray is not None and ray.is_initialized()}, f)
'''


def test_the_session_head_stops_after_the_last_test_of_its_group(with_conftest: tuple[Path, str]) -> None:
    # One worker runs the Ray group, then a test of no group: by then the head is gone and the worker
    # is not connected to it (it stopped with the group, not at the end of the session).
    folder, output = with_conftest
    for name in ("test_a_takes_the_head", "test_b_takes_a_client", "test_c_after_the_group"):
        assert f"PASSED test_head.py::{name}" in output, output
    after = json.loads((folder / "head.json.after").read_text())
    assert after == {"head_answers": False, "connected": False}, output


_ORDER = '''\
import os
import pytest

def _record(name):
    with open(os.environ["ORDER_LOG"], "a") as f:
        f.write(name + "\\n")

def test_single_0(): _record("single_0")
@pytest.mark.xdist_group("many")
@pytest.mark.parametrize("i", range(4))
def test_many(i): _record(f"many_{i}")
@pytest.mark.xdist_group("two")
@pytest.mark.parametrize("i", range(2))
def test_two(i): _record(f"two_{i}")
def test_single_1(): _record("single_1")
@pytest.mark.xdist_group("%s")
@pytest.mark.parametrize("i", range(2))
def test_nano(i): _record(f"nano_{i}")
'''


def test_the_longest_group_is_handed_out_first_then_the_larger_units(with_conftest: tuple[Path, str]) -> None:
    # pytest-xdist sorted its work units by their number of tests, so the nano store's group (the
    # longest, few tests) started after every group of more; one worker runs the units in turn.
    folder, output = with_conftest
    assert (folder / "order.log").read_text().split() == ["nano_0", "nano_1", "many_0", "many_1", "many_2", "many_3",
                                                          "two_0", "two_1", "single_0", "single_1"], output


_LOGS_A_SURROGATE = '''\
import logging

def test_logs_a_lone_surrogate():
    logging.getLogger("fuzzed").warning("skipped: no 'text' field (fields: \\ud800x)")

def test_after_it():
    pass
'''


def test_a_test_that_logs_a_lone_surrogate_does_not_stop_the_session(tmp_path: Path,
                                                                     with_conftest: tuple[Path, str]) -> None:
    # pytest-xdist's worker cannot send a report holding a lone surrogate: without the workspace's
    # conftest (loaded as a plugin by the session of ``with_conftest``) the session ends in an INTERNALERROR.
    (tmp_path / "test_surrogate.py").write_text(_LOGS_A_SURROGATE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**_env(), "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    bare = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "no:cacheprovider",
                           "test_surrogate.py"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    # (its exit status may still be 0: the crash is seen only in its output, and a test never ran)
    assert "INTERNALERROR" in bare.stdout + bare.stderr and "2 passed" not in bare.stdout, bare.stdout + bare.stderr
    _folder, output = with_conftest
    for name in ("test_logs_a_lone_surrogate", "test_after_it"):
        assert f"PASSED test_surrogate.py::{name}" in output, output


@pytest.fixture(scope="module")
def with_conftest(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One session of ``pytest -n 1 --dist loadgroup`` with the workspace's conftest loaded as a plugin
    over the head's, the order's and the surrogate's test files (a session of its own for each cost
    an interpreter, the conftest's imports and a worker three times over): its folder and its output,
    after checking that every test of it passed and nothing stopped it."""
    folder = tmp_path_factory.mktemp("with-conftest")
    (folder / "test_head.py").write_text(_USES_THE_HEAD)
    (folder / "test_order.py").write_text(_ORDER % NANO_STORE_GROUP)
    (folder / "test_surrogate.py").write_text(_LOGS_A_SURROGATE)
    (folder / "pytest.ini").write_text("[pytest]\n")
    env = {**_env(), "HEAD_LOG": str(folder / "head.json"), "ORDER_LOG": str(folder / "order.log"),
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    ran = subprocess.run([sys.executable, "-m", "pytest", "-v", "-n", "1", "--dist", "loadgroup", "-p", "no:cacheprovider",
                          "-p", "conftest", "test_head.py", "test_order.py", "test_surrogate.py"],
                         cwd=folder, capture_output=True, text=True, env=env, timeout=300)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0 and "15 passed" in ran.stdout and "INTERNALERROR" not in output, output
    return folder, output


def _env() -> dict[str, str]:
    """This environment without the outer pytest's worker variables (and no stray MARIN_* settings)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "MARIN_"))}
