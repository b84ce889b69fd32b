"""``discover_config``: defaults < user file < project ``config/marin.yaml`` < MARIN_* < overrides."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rigging.config.discovery import (
    Backend,
    ConfigError,
    MarinConfig,
    UnknownEnvVariable,
    discover_config,
    find_workspace_root,
    search_paths,
)

WORKSPACE_PYPROJECT = '[project]\nname = "ws"\n\n[tool.uv.workspace]\nmembers = ["pkgs/*"]\n'


def make_workspace(root: Path) -> Path:
    (root / "pkgs" / "a" / "src").mkdir(parents=True)
    (root / "pyproject.toml").write_text(WORKSPACE_PYPROJECT)
    # A member's own pyproject.toml must not be taken for the workspace root.
    (root / "pkgs" / "a" / "pyproject.toml").write_text('[project]\nname = "a"\n')
    return root


def write_yaml(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


@pytest.fixture
def ws(tmp_path) -> Path:
    return make_workspace(tmp_path / "ws")


@pytest.fixture
def user_file(tmp_path) -> Path:
    return tmp_path / "home" / ".config" / "marin" / "config.yaml"


def discover(ws: Path, user_file: Path, env=None, overrides=None, cwd=None) -> MarinConfig:
    return discover_config(overrides, cwd=cwd or ws, environ=env or {}, user_config=user_file)


# ---------------------------------------------------------------- precedence and sources


def test_defaults_with_no_sources(ws, user_file):
    config = discover(ws, user_file)
    assert config == MarinConfig()
    assert dict(config.sources) == {}
    assert config.workspace_root == str(ws.resolve())
    assert config.resolved_prefix() == str(ws.resolve() / ".marin" / "store")
    assert {source for _key, _value, source in config.describe()} == {"default"}


def test_each_source_overrides_the_one_before(ws, user_file):
    project = ws / "config" / "marin.yaml"
    write_yaml(user_file, {"prefix": "/from/user", "max_parallel": 2, "log_level": "debug"})
    config = discover(ws, user_file)
    assert (config.prefix, config.max_parallel, config.log_level) == ("/from/user", 2, "DEBUG")
    assert config.sources["prefix"] == str(user_file)

    write_yaml(project, {"prefix": "/from/project", "max_parallel": 3})
    config = discover(ws, user_file)
    assert (config.prefix, config.max_parallel, config.log_level) == ("/from/project", 3, "DEBUG")
    assert config.sources == {
        "prefix": str(project.resolve()),
        "max_parallel": str(project.resolve()),
        "log_level": str(user_file),
    }

    env = {"MARIN_PREFIX": "gs://bucket/env", "MARIN_BACKEND": "RAY", "PATH": "/bin"}
    config = discover(ws, user_file, env=env)
    assert (config.prefix, config.backend, config.max_parallel) == ("gs://bucket/env", Backend.RAY, 3)
    assert config.sources["prefix"] == "environment variable MARIN_PREFIX"
    assert config.sources["backend"] == "environment variable MARIN_BACKEND"

    config = discover(ws, user_file, env=env, overrides={"prefix": "memory://o", "max_parallel": None})
    assert config.prefix == "memory://o" and config.sources["prefix"] == "override"
    assert config.max_parallel == 3  # a None override means "not given"
    rows = {key: (value, source) for key, value, source in config.describe()}
    assert rows["backend"] == ("ray", "environment variable MARIN_BACKEND")
    assert rows["strict_env"] == (False, "default")


def test_user_file_defaults_to_home(tmp_path, ws):
    home = tmp_path / "home"
    write_yaml(home / ".config" / "marin" / "config.yaml", {"backend": "ray"})
    config = discover_config(cwd=ws, environ={"HOME": str(home)})
    assert config.backend is Backend.RAY
    assert config.sources["backend"] == str(home / ".config" / "marin" / "config.yaml")


def test_env_values_are_parsed(ws, user_file):
    env = {
        "MARIN_MAX_PARALLEL": " 8 ",
        "MARIN_CACHES": "gs://a/x, gs://b/y,",
        "MARIN_STRICT_ENV": "yes",
        "MARIN_LOG_LEVEL": "error",
        "MARIN_RAY_ADDRESS": "auto",
        "MARIN_WARM_WORKERS": "off",
        "MARIN_WARM_WORKER_MAX_STEPS": "25",
        "MARIN_LEASE_TTL": " 12.5 ",
        "MARIN_STEP_ATTEMPT": "3",  # runner plumbing, not configuration
    }
    config = discover(ws, user_file, env=env)
    assert config.max_parallel == 8
    assert config.caches == ("gs://a/x", "gs://b/y")
    assert config.strict_env is True
    assert config.log_level == "ERROR"
    assert config.ray_address == "auto"
    assert config.warm_workers is False and config.warm_worker_max_steps == 25
    assert config.lease_ttl == 12.5


def test_accelerator_settings_from_a_file_and_the_environment(ws, user_file):
    write_yaml(ws / "config" / "marin.yaml", {"accelerator": "gpu:H100:8", "accelerator_slots": 2,
                                              "accelerator_wait": "2m", "accelerator_lock": "~/held"})
    config = discover(ws, user_file)
    assert (config.accelerator, config.accelerator_slots, config.accelerator_wait) == ("gpu:H100:8", 2, 120.0)
    assert config.accelerator_lock == os.path.expanduser("~/held")
    assert config.sources["accelerator"].endswith("marin.yaml")
    stated = discover(ws, user_file, env={"MARIN_ACCELERATOR": " v5e-1 ", "MARIN_ACCELERATOR_WAIT": "45",
                                          "MARIN_ACCELERATOR_ENV": "{}"})  # the last: the runner's plumbing
    assert (stated.accelerator, stated.accelerator_wait) == ("v5e-1", 45.0)
    assert discover(ws, user_file, env={"MARIN_ACCELERATOR": "auto"}).accelerator is None
    for bad, why in (("tpu", "expected auto, none"), ("v5e", "expected auto, none")):
        with pytest.raises(ConfigError, match=f"MARIN_ACCELERATOR.*{why}"):
            discover(ws, user_file, env={"MARIN_ACCELERATOR": bad})
    with pytest.raises(ConfigError, match="MARIN_ACCELERATOR_WAIT"):
        discover(ws, user_file, env={"MARIN_ACCELERATOR_WAIT": "-1"})


def test_config_is_frozen(ws, user_file):
    with pytest.raises(dataclasses.FrozenInstanceError):
        discover(ws, user_file).prefix = "x"  # type: ignore[misc]


# ---------------------------------------------------------------- finding the project file


def test_project_file_is_found_walking_up_to_the_workspace_root(ws, user_file):
    project = write_yaml(ws / "config" / "marin.yaml", {"max_parallel": 5})
    deep = ws / "pkgs" / "a" / "src"
    config = discover(ws, user_file, cwd=deep)
    assert config.max_parallel == 5
    assert config.sources["max_parallel"] == str(project.resolve())
    assert config.workspace_root == str(ws.resolve())
    assert find_workspace_root(deep) == ws.resolve()


def test_nearest_project_file_wins(ws, user_file):
    write_yaml(ws / "config" / "marin.yaml", {"max_parallel": 5})
    inner = write_yaml(ws / "pkgs" / "a" / "config" / "marin.yaml", {"max_parallel": 7})
    config = discover(ws, user_file, cwd=ws / "pkgs" / "a" / "src")
    assert config.max_parallel == 7
    assert config.sources["max_parallel"] == str(inner.resolve())


def test_project_file_above_the_workspace_root_is_ignored(tmp_path, user_file):
    write_yaml(tmp_path / "config" / "marin.yaml", {"max_parallel": 9})
    ws = make_workspace(tmp_path / "inner")
    assert discover(ws, user_file).max_parallel is None


def test_relative_prefix_in_project_file_is_relative_to_the_project(ws, user_file):
    write_yaml(ws / "config" / "marin.yaml", {"prefix": "out/store"})
    for cwd in (ws, ws / "pkgs" / "a" / "src"):
        config = discover(ws, user_file, cwd=cwd)
        assert config.prefix == str(ws.resolve() / "out" / "store")
    write_yaml(ws / "config" / "marin.yaml", {"prefix": "gs://bucket/store"})
    assert discover(ws, user_file).prefix == "gs://bucket/store"
    write_yaml(ws / "config" / "marin.yaml", {"prefix": "/abs/store"})
    assert discover(ws, user_file).prefix == "/abs/store"


# ---------------------------------------------------------------- errors name the source and key


def test_unknown_key_in_a_file_names_file_and_key(ws, user_file):
    write_yaml(user_file, {"prefx": "/x"})
    with pytest.raises(ConfigError, match=rf"^{user_file}: unknown key 'prefx'"):
        discover(ws, user_file)
    user_file.unlink()
    project = write_yaml(ws / "config" / "marin.yaml", {"max_paralel": 2})
    with pytest.raises(ConfigError) as info:
        discover(ws, user_file, cwd=ws / "pkgs")
    assert str(project.resolve()) in str(info.value) and "'max_paralel'" in str(info.value)


@pytest.mark.parametrize(
    "key, value",
    [
        ("max_parallel", 0),
        ("max_parallel", "many"),
        ("max_parallel", True),
        ("backend", "kubernetes"),
        ("log_level", "LOUD"),
        ("strict_env", "perhaps"),
        ("warm_workers", "sometimes"),
        ("warm_worker_max_steps", 0),
        ("warm_worker_max_steps", None),
        ("lease_ttl", 0),
        ("lease_ttl", -3.0),
        ("lease_ttl", "soon"),
        ("lease_ttl", True),
        ("lease_ttl", ".nan"),
        ("caches", 3),
        ("prefix", ""),
        ("prefix", 12),
    ],
)
def test_bad_value_in_project_file_names_file_and_key(ws, user_file, key, value):
    project = write_yaml(ws / "config" / "marin.yaml", {key: value})
    with pytest.raises(ConfigError) as info:
        discover(ws, user_file)
    message = str(info.value)
    assert message.startswith(f"{project.resolve()}: bad value for '{key}'"), message
    assert repr(value) in message


def test_bad_env_values_name_the_variable(ws, user_file):
    with pytest.raises(ConfigError, match=r"^environment variable MARIN_MAX_PARALLEL: bad value for 'MARIN_MAX_PARALLEL'"):
        discover(ws, user_file, env={"MARIN_MAX_PARALLEL": "-1"})
    with pytest.raises(ConfigError, match=r"^environment variable MARIN_BACKEND: bad value"):
        discover(ws, user_file, env={"MARIN_BACKEND": "slurm"})


@pytest.mark.parametrize("name", ["MARIN_PREFX", "MARIN_ROOT", "MARIN_CI_S3_PREFIX"])
def test_unknown_env_variables_warn_and_are_ignored(ws, user_file, name):
    with pytest.warns(UnknownEnvVariable, match=rf"^environment variable {name} is not a marin-build setting"):
        config = discover(ws, user_file, env={name: "/x", "MARIN_MAX_PARALLEL": "3"})
    assert config.max_parallel == 3
    assert config.sources["max_parallel"] == "environment variable MARIN_MAX_PARALLEL"


def test_bad_override_names_the_key(ws, user_file):
    with pytest.raises(ConfigError, match=r"^override: bad value for 'max_parallel'"):
        discover(ws, user_file, overrides={"max_parallel": "zero"})
    with pytest.raises(ConfigError, match=r"^override: unknown key 'colour'"):
        discover(ws, user_file, overrides={"colour": "blue"})


@pytest.mark.parametrize("text, what", [("prefix: [unclosed\n", "not valid YAML"), ("- a\n- b\n", "expected a mapping")])
def test_malformed_file_names_the_file(ws, user_file, text, what):
    write_yaml(user_file, text)
    with pytest.raises(ConfigError, match=rf"^{user_file}: {what}"):
        discover(ws, user_file)


def test_empty_file_is_no_settings(ws, user_file):
    write_yaml(user_file, "")
    write_yaml(ws / "config" / "marin.yaml", "# nothing yet\n")
    assert discover(ws, user_file) == MarinConfig()


# ---------------------------------------------------------------- property: the last source wins

SOURCES = ("user", "project", "env", "override")

_VALUES = {
    "prefix": st.one_of(
        st.from_regex(r"/data/[a-z]{1,8}", fullmatch=True),
        st.from_regex(r"gs://bkt-[a-z]{1,6}/[a-z0-9]{1,6}", fullmatch=True),
        st.from_regex(r"memory://[a-z]{1,6}", fullmatch=True),
    ),
    "backend": st.sampled_from(["local", "ray"]),
    "max_parallel": st.integers(1, 512),
    "log_level": st.sampled_from(["DEBUG", "INFO", "WARNING", "ERROR", "debug", "Warning"]),
    "ray_address": st.sampled_from(["auto", "127.0.0.1:6379", "ray://head:10001"]),
    "caches": st.lists(st.from_regex(r"gs://c-[a-z]{1,5}/[a-z]{1,5}", fullmatch=True), min_size=1, max_size=3),
    "strict_env": st.booleans(),
    "warm_workers": st.booleans(),
    "fast_noop": st.booleans(),
    "warm_worker_max_steps": st.integers(1, 10_000),
    "lease_ttl": st.sampled_from([0.5, 2, 30.0, 3600]),
}


def _expected(key: str, value):
    if key == "backend":
        return Backend(value)
    if key == "log_level":
        return value.upper()
    if key == "caches":
        return tuple(value)
    if key == "lease_ttl":
        return float(value)
    return value


def _as_env(key: str, value) -> str:
    if key == "caches":
        return ",".join(value)
    if key in ("strict_env", "warm_workers", "fast_noop"):
        return "true" if value else "0"
    return str(value)


@st.composite
def settings_per_source(draw):
    """For each key, which sources set it (any subset) and to what."""
    chosen = {}
    for key, values in _VALUES.items():
        setters = draw(st.lists(st.sampled_from(SOURCES), unique=True))
        chosen[key] = {source: draw(values) for source in setters}
    return chosen


# No example database: nothing is written into the checkout.
@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(chosen=settings_per_source())
def test_property_the_last_source_that_sets_a_key_wins(chosen):
    with tempfile.TemporaryDirectory() as tmp:
        ws = make_workspace(Path(tmp) / "ws")
        user_file = Path(tmp) / "user.yaml"
        project_file = ws / "config" / "marin.yaml"
        per_source = {s: {k: v[s] for k, v in chosen.items() if s in v} for s in SOURCES}
        if per_source["user"]:
            write_yaml(user_file, per_source["user"])
        if per_source["project"]:
            write_yaml(project_file, per_source["project"])
        env = {f"MARIN_{k.upper()}": _as_env(k, v) for k, v in per_source["env"].items()}
        env["HOME"] = tmp
        config = discover_config(per_source["override"], cwd=ws / "pkgs" / "a", environ=env, user_config=user_file)

        labels = {
            "user": str(user_file),
            "project": str(project_file.resolve()),
            "override": "override",
        }
        for key, by_source in chosen.items():
            winner = next((s for s in reversed(SOURCES) if s in by_source), None)
            if winner is None:
                assert getattr(config, key) == getattr(MarinConfig(), key)
                assert key not in config.sources
                continue
            assert getattr(config, key) == _expected(key, by_source[winner]), (key, winner)
            label = labels.get(winner, f"environment variable MARIN_{key.upper()}")
            assert config.sources[key] == label


def test_environment_is_not_read_from_os_environ_when_given(monkeypatch, ws, user_file):
    monkeypatch.setenv("MARIN_MAX_PARALLEL", "4")
    assert discover(ws, user_file, env={}).max_parallel is None
    assert discover_config(cwd=ws, user_config=user_file).max_parallel == 4
    assert os.environ["MARIN_MAX_PARALLEL"] == "4"


def test_search_paths_name_every_file_that_can_change_the_configuration(ws, user_file, tmp_path):
    # The no-op record of `marin run` watches these by stat: each file discovery would read, or
    # would find if it appeared, from where the command starts.
    paths = search_paths(ws / "pkgs" / "a", environ={"HOME": str(tmp_path / "home")})
    assert paths[0] == str(user_file)
    for folder in (ws / "pkgs" / "a", ws / "pkgs", ws, ws.parent):
        assert str(folder.resolve() / "pyproject.toml") in paths
        assert str(folder.resolve() / "config" / "marin.yaml") in paths
    write_yaml(ws / "pkgs" / "config" / "marin.yaml", {"fast_noop": False})  # one of those appearing
    config = discover_config(cwd=ws / "pkgs" / "a", environ={}, user_config=user_file)
    assert config.fast_noop is False and config.sources["fast_noop"] in paths
