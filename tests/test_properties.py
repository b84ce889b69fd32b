"""Property-based tests (hypothesis): the step hash, config discovery's error handling, the CLI's arguments.

Config precedence itself has its property test in pkgs/rigging/tests/test_config_discovery.py;
here only what it does not cover: any bytes in a config source give a config or a ConfigError
naming the source, never another exception.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from marin.execution.core.step import Step, unhashed_field

PROPS = settings(max_examples=200, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def probe_fn(config: Any, output_path: str) -> None:
    """A step function for hashing only (never run)."""


def other_fn(config: Any, output_path: str) -> None:
    """Another step function: a different identity."""


@dataclasses.dataclass(frozen=True)
class Inner:
    rate: float = 0.1
    tags: tuple = ()


@dataclasses.dataclass(frozen=True)
class Outer:
    size: int = 1
    name: str = "x"
    inner: Inner = Inner()
    extra: dict = dataclasses.field(default_factory=dict)
    log_every: int = unhashed_field(default=1)


LEAVES = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
          | st.text(max_size=12).filter(lambda s: not s.startswith("/")))
CONFIGS = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=5), max_leaves=25)


def step_hash(config: Any, name: str = "props/step", version: str = "v1", fn=probe_fn) -> str:
    return Step(name, fn, config=config, version=version).hash


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same config with every dict's insertion order shuffled (recursively)."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


def leaf_paths(value: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in leaf_paths(v, (*path, k))] or [path]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in leaf_paths(v, (*path, i))] or [path]
    return [path]


def replace_at(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    out = copy.copy(value)
    out[path[0]] = replace_at(value[path[0]], path[1:], new)
    return out


def _same_leaf(a: Any, b: Any) -> bool:
    return type(a) is type(b) and (a == b and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b)))


@PROPS
@given(config=CONFIGS)
def test_equal_configs_give_equal_hashes(config):
    assert step_hash(config) == step_hash(copy.deepcopy(config))


@PROPS
@given(config=CONFIGS, seed=st.integers(0, 2**32))
def test_dict_order_does_not_change_the_hash(config, seed):
    assert step_hash(config) == step_hash(shuffled(config, random.Random(seed)))


@PROPS
@given(config=CONFIGS, data=st.data())
def test_changing_any_leaf_changes_the_hash(config, data):
    path = data.draw(st.sampled_from(leaf_paths(config)))
    old = config
    for part in path:
        old = old[part]
    new = data.draw(LEAVES | st.just([]) | st.just({}))
    assume(not _same_leaf(old, new))
    assert step_hash(config) != step_hash(replace_at(config, path, new))


@PROPS
@given(config=CONFIGS, key=st.text(max_size=6), value=LEAVES)
def test_adding_a_key_changes_the_hash(config, key, value):
    assume(isinstance(config, dict) and key not in config)
    assert step_hash(config) != step_hash({**config, key: value})


@PROPS
@given(size=st.integers(), name=st.text(max_size=8), rate=st.floats(allow_nan=False),
       tags=st.lists(st.integers(), max_size=3).map(tuple), extra=st.dictionaries(st.text(max_size=4), st.integers()),
       log_every=st.integers(), field_name=st.sampled_from(["size", "name", "inner", "extra"]), data=st.data())
def test_dataclass_fields_hashed_fields_change_it_and_keyword_order_does_not(size, name, rate, tags, extra,
                                                                            log_every, field_name, data):
    config = Outer(size=size, name=name, inner=Inner(rate=rate, tags=tags), extra=extra, log_every=log_every)
    # The same values given in another keyword order, and another value of an unhashed field.
    again = Outer(extra=dict(reversed(list(extra.items()))), log_every=log_every + 1,
                  inner=Inner(tags=tags, rate=rate), name=name, size=size)
    assert step_hash(config) == step_hash(again)
    changes = {"size": size + 1, "name": name + "!", "inner": Inner(rate=rate, tags=(*tags, 0)),
               "extra": {**extra, "new-key": 1} if "new-key" not in extra else {}}
    assert step_hash(config) != step_hash(dataclasses.replace(config, **{field_name: changes[field_name]}))


@PROPS
@given(config=CONFIGS, name=st.from_regex(r"[a-z][a-z0-9_]{0,6}(/[a-z][a-z0-9_]{0,6}){0,2}", fullmatch=True),
       version=st.text(min_size=1, max_size=5))
def test_name_version_fn_and_dependencies_enter_the_hash(config, name, version):
    base = step_hash(config, name=name, version=version)
    assert base != step_hash(config, name=name + "x", version=version)
    assert base != step_hash(config, name=name, version=version + "x")
    assert base != step_hash(config, name=name, version=version, fn=other_fn)
    upstream_a = Step("props/up", probe_fn, config=1)
    upstream_b = Step("props/up", probe_fn, config=2)
    down_a = Step(name, probe_fn, config={"data": upstream_a, "c": config}, version=version)
    down_b = Step(name, probe_fn, config={"data": upstream_b, "c": config}, version=version)
    assert down_a.hash != down_b.hash


@PROPS
@given(items=st.lists(st.text(max_size=5), max_size=8, unique=True), seed=st.integers(0, 2**32))
def test_set_order_does_not_change_the_hash(items, seed):
    other = list(items)
    random.Random(seed).shuffle(other)
    assert step_hash(frozenset(items)) == step_hash(frozenset(other))
    assert step_hash(set(items)) == step_hash(set(other))


# -- config discovery: any source content gives a config or a ConfigError naming the source ---------

@PROPS
@given(text=st.one_of(st.text(max_size=200), st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
                      st.dictionaries(st.sampled_from(["prefix", "backend", "max_parallel", "log_level", "caches",
                                                       "strict_env", "bogus"]),
                                      st.one_of(st.text(max_size=10), st.integers(), st.booleans(), st.none(),
                                                st.lists(st.text(max_size=5), max_size=2)), max_size=4)
                      .map(lambda d: __import__("yaml").safe_dump(d))),
       where=st.sampled_from(["user", "project"]))
def test_any_config_file_gives_a_config_or_an_error_naming_it(text, where):
    from rigging.config.discovery import ConfigError, discover_config

    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        (ws / "config").mkdir(parents=True)
        (ws / "pyproject.toml").write_text('[project]\nname = "ws"\n\n[tool.uv.workspace]\nmembers = []\n')
        user = Path(tmp) / "user.yaml"
        target = user if where == "user" else ws / "config" / "marin.yaml"
        target.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            config = discover_config(cwd=ws, environ={"HOME": tmp}, user_config=user)
        except ConfigError as e:
            assert target.name in str(e), str(e)
            return
        config.resolved_prefix()


@PROPS
@given(env=st.dictionaries(st.sampled_from(["MARIN_PREFIX", "MARIN_BACKEND", "MARIN_MAX_PARALLEL", "MARIN_LOG_LEVEL",
                                            "MARIN_CACHES", "MARIN_STRICT_ENV", "MARIN_RAY_ADDRESS"]),
                           st.text(max_size=12).filter(lambda s: "\x00" not in s), max_size=4))
def test_any_environment_gives_a_config_or_an_error_naming_the_variable(env):
    from rigging.config.discovery import ConfigError, discover_config

    with tempfile.TemporaryDirectory() as tmp:
        try:
            discover_config(cwd=tmp, environ={**env, "HOME": tmp}, user_config=Path(tmp) / "none.yaml")
        except ConfigError as e:
            assert any(name in str(e) for name in env), str(e)


# -- the CLI: random arguments never give a traceback without --verbose --------------------------------

VERBS = ["run", "plan", "status", "show", "graph", "gc", "config", "push", "sample", "report", "plot", "verify"]
OPTIONS = ["--prefix", "--force", "--only", "--dry-run", "-j", "--max-parallel", "--json", "--cache", "--strict-env",
           "--require-cached", "--help", "-h", "--format", "--steps", "--out", "--dot", "--all", "--to", "--x", "-"]


@pytest.fixture(scope="module")
def cli_files():
    """Experiment files that fail in every way a user's file can fail (none builds anything)."""
    with tempfile.TemporaryDirectory(prefix="cli-props-") as tmp:
        root = Path(tmp)
        files = {
            "syntax.py": "steps = [\n",
            "nosteps.py": "x = 1\n",
            "notalist.py": "steps = 3\n",
            "raises.py": "raise RuntimeError('boom at import')\nsteps = []\n",
            "empty.py": "steps = []\n",
            "badname.py": ("from marin.execution.step import Step\n"
                           "def f(c, o):\n    pass\n"
                           "steps = [Step('../escape', f)]\n"),
            "notes.txt": "not python\n",
        }
        for name, text in files.items():
            (root / name).write_text(text)
        yield root


def _arg(root: Path):
    files = [str(root / n) for n in ("syntax.py", "nosteps.py", "notalist.py", "raises.py", "empty.py",
                                     "badname.py", "notes.txt", "missing.py")]
    random_text = st.text(max_size=15).filter(
        lambda s: "\x00" not in s and not all(p.isidentifier() for p in s.split(".")) and s not in ("-v", "--verbose"))
    return st.one_of(st.sampled_from(VERBS), st.sampled_from(OPTIONS), st.sampled_from(files),
                     st.sampled_from(files).map(lambda f: f + ":steps"), st.sampled_from(files).map(lambda f: f + ":nope"),
                     st.integers(-3, 100).map(str), st.sampled_from(["memory://p", str(root / "prefix"), "gs://",
                                                                     "../x", "/abs", "a/../../b", "x\\y"]),
                     random_text)


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_arguments_never_give_a_traceback(cli_files, data, monkeypatch):
    from marin.cli.main import cli

    verb = data.draw(st.sampled_from(VERBS + ["nosuchverb"]))
    args = [verb, *data.draw(st.lists(_arg(cli_files), max_size=6))]
    monkeypatch.setenv("MARIN_PREFIX", str(cli_files / "prefix"))
    monkeypatch.setenv("HOME", str(cli_files))
    monkeypatch.chdir(cli_files)
    result = CliRunner().invoke(cli, args, catch_exceptions=True)
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)
    assert "Traceback" not in result.output, (args, result.output)
    # CliRunner catches what would be a traceback: an exception other than Click's exit.
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, repr(result.exception))
