"""Experiment files written for Marin's executor run here unchanged (issue 19).

The files below are written in the style of Marin's tutorials (``ExecutorStep`` with
``this_output_path()`` and ``output_path_of``, ``executor_main`` under ``__main__``), run with
``python FILE --prefix P`` and with ``marin run FILE``, each as a fresh process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from testsupport.e2e import clean_env, entry, marin, run

TWO_STEPS = '''\
"""Two steps: count to n, then add the numbers up."""

import json
import os
from dataclasses import dataclass

from iris.marin_fs import open_url
from marin.execution.executor import ExecutorStep, executor_main, output_path_of, this_output_path, versioned


@dataclass(frozen=True)
class CountConfig:
    n: int
    output_path: str


def count(config: CountConfig):
    with open_url(os.path.join(config.output_path, "numbers.json"), "w") as f:
        json.dump(list(range(config.n)), f)


@dataclass(frozen=True)
class AddConfig:
    numbers: str
    output_path: str


def add_up(config: AddConfig):
    with open(os.environ["CALLS_LOG"], "a") as log:
        log.write("add_up\\n")
    if os.environ.get("FAIL_ADD"):
        raise RuntimeError("add_up was told to fail")
    with open_url(config.numbers) as f:
        numbers = json.load(f)
    with open_url(os.path.join(config.output_path, "total.json"), "w") as f:
        json.dump({"sum": sum(numbers), "count": len(numbers)}, f)


numbers = ExecutorStep(
    name="demo/numbers",
    description="Count to n.",
    fn=count,
    config=CountConfig(n=versioned(N), output_path=this_output_path()),
)

total = ExecutorStep(
    name="demo/total",
    description="Add them up.",
    fn=add_up,
    config=AddConfig(numbers=output_path_of(numbers, "numbers.json"), output_path=this_output_path()),
)

if __name__ == "__main__":
    executor_main(steps=[numbers, total], description="count and add")
'''


def write(tmp_path: Path, n: int = 10, name: str = "two_steps.py") -> Path:
    path = tmp_path / name
    path.write_text(TWO_STEPS.replace("N)", f"{n})"))
    return path


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    return clean_env(CALLS_LOG=str(tmp_path / "calls.log"), **extra)


def calls(tmp_path: Path) -> int:
    log = tmp_path / "calls.log"
    return log.read_text().count("add_up") if log.exists() else 0


def test_python_file_and_marin_run_build_the_same_outputs(tmp_path: Path) -> None:
    experiment = write(tmp_path)
    direct, via_cli = tmp_path / "direct", tmp_path / "cli"
    run([sys.executable, str(experiment), "--prefix", str(direct)], cwd=tmp_path, env=env_for(tmp_path))
    total = entry(direct, "demo/total")
    assert json.loads((total / "total.json").read_text()) == {"sum": 45, "count": 10}
    assert (total / ".marin" / "success.json").exists()

    marin("run", str(experiment), "--prefix", str(via_cli), cwd=tmp_path, env=env_for(tmp_path))
    # Same file, same module name, same hashes, whichever way it was started.
    assert entry(via_cli, "demo/total").name == total.name
    assert entry(via_cli, "demo/numbers").name == entry(direct, "demo/numbers").name
    assert calls(tmp_path) == 2

    again = run([sys.executable, str(experiment), "--prefix", str(direct)], cwd=tmp_path, env=env_for(tmp_path))
    assert "cached     demo/total" in again.stdout and calls(tmp_path) == 2


def test_versioned_values_hash_as_the_plain_value_and_every_field_counts(tmp_path: Path) -> None:
    from marin.execution.executor import ExecutorStep, this_output_path, versioned
    from marin.execution.step import output_path_of

    a = ExecutorStep(name="x", fn=json.dumps, config={"n": versioned(3), "out": this_output_path()})
    b = ExecutorStep(name="x", fn=json.dumps, config={"n": 3, "out": this_output_path()})
    c = ExecutorStep(name="x", fn=json.dumps, config={"n": 4, "out": this_output_path()})
    assert a.lower().hash == b.lower().hash != c.lower().hash
    # Pinned: a change to how executor steps are encoded (and so every Marin file's outputs) is caught.
    pinned = ExecutorStep(name="pinned", fn=json.dumps, config={"n": versioned(3), "out": this_output_path("x")})
    assert pinned.lower().hash[:16] == "2b02e592e6619ddd"
    d = ExecutorStep(name="y", fn=json.dumps, config={"in": output_path_of(a, "f")})
    e = ExecutorStep(name="y", fn=json.dumps, config={"in": output_path_of(c, "f")})
    assert d.lower().hash != e.lower().hash


def test_markers_inside_nested_values_and_steps_held_by_value_keep_their_hashes() -> None:
    from marin.execution.executor import ExecutorStep, InputName, output_path_of, this_output_path, versioned

    up = ExecutorStep(name="up", fn=json.dumps, config={"n": versioned(3), "out": this_output_path()})
    nested = {"xs": [versioned(1), (versioned("a"), output_path_of(up, "f"))], "in": {"k": versioned({"v": versioned(2)})},
              "raw": InputName.hardcoded("raw/data"), "out": this_output_path("sub")}
    plain = {"xs": [1, ("a", output_path_of(up, "f"))], "in": {"k": {"v": 2}},
             "raw": InputName.hardcoded("raw/data"), "out": this_output_path("sub")}
    step = ExecutorStep(name="down", fn=json.dumps, config=nested).lower()
    assert step.hash == ExecutorStep(name="down", fn=json.dumps, config=plain).lower().hash
    assert step.config.config["in"] == {"k": {"v": 2}}
    # A step held by value (here beside an output_path_of it) is converted with its own config, a
    # copy where it stands: a dependency of its own, as Marin files have always been hashed.
    by_value = ExecutorStep(name="down", fn=json.dumps, config={"up": up, "f": output_path_of(up, "f")}).lower()
    held = by_value.config.config["up"]
    assert held is not up and held.config == {"n": 3, "out": this_output_path()}
    assert by_value.hash[:16] == "be4c482cbb36e341"


def test_dry_run_and_run_only(tmp_path: Path) -> None:
    experiment = write(tmp_path)
    prefix = tmp_path / "store"
    dry = run([sys.executable, str(experiment), "--prefix", str(prefix), "--dry_run", "true"], cwd=tmp_path,
              env=env_for(tmp_path))
    assert "would run  demo/numbers" in dry.stdout and "would run  demo/total" in dry.stdout
    assert not list(prefix.rglob("success.json"))
    run([sys.executable, str(experiment), "--prefix", str(prefix), "--run_only", "[numbers$]"], cwd=tmp_path,
        env=env_for(tmp_path))
    assert entry(prefix, "demo/numbers").joinpath(".marin/success.json").exists()
    assert not list((prefix / "demo").glob("total-*")) and calls(tmp_path) == 0


@pytest.mark.parametrize(("argv", "expected"), [
    (["--run_only", "[^b$]"], {"run_only": ["^b$"]}),
    (["--run_only", "[tokenize, train/.*]"], {"run_only": ["tokenize", "train/.*"]}),
    (["--run_only", '["^a$", "b"]'], {"run_only": ["^a$", "b"]}),
    (["--force_run_failed", "False"], {"force_run_failed": False}),
    (["--force_run_failed", "true", "--dry_run", "True"], {"force_run_failed": True, "dry_run": True}),
    (["--prefix", "/tmp/p", "--max_concurrent", "3"], {"prefix": "/tmp/p", "max_concurrent": 3}),
])
def test_executor_flags_are_parsed_as_marin_parses_them(argv: list[str], expected: dict) -> None:
    from marin.execution.executor import ExecutorMainConfig, parse_executor_args

    assert parse_executor_args(argv) == ExecutorMainConfig(**expected)


@pytest.mark.parametrize(("argv", "named"), [
    (["--run_only", "numbers$"], "run_only"),  # a scalar where Marin's config holds a list
    (["--max_concurrent", "many"], "max_concurrent"),
    (["--bogus", "1"], "--bogus"),
])
def test_a_bad_executor_flag_is_one_line_naming_it(argv: list[str], named: str, capsys) -> None:
    from marin.execution.executor import parse_executor_args

    with pytest.raises(SystemExit) as e:
        parse_executor_args(argv)
    assert e.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(lines) == 1 and named in lines[0]


def test_a_failed_step_is_named_and_not_retried_without_force_run_failed(tmp_path: Path) -> None:
    experiment = write(tmp_path)
    prefix = tmp_path / "store"
    argv = [sys.executable, str(experiment), "--prefix", str(prefix)]
    first = run(argv, cwd=tmp_path, env=env_for(tmp_path, FAIL_ADD="1"), check=False)
    assert first.returncode != 0
    assert "demo/total failed: RuntimeError: add_up was told to fail" in first.stderr
    assert calls(tmp_path) == 1
    second = run(argv, cwd=tmp_path, env=env_for(tmp_path), check=False)
    assert second.returncode != 0 and calls(tmp_path) == 1
    assert "demo/total failed in an earlier run and was not retried (pass --force_run_failed true)" in second.stderr
    run([*argv, "--force_run_failed", "true"], cwd=tmp_path, env=env_for(tmp_path))
    assert calls(tmp_path) == 2
    assert json.loads((entry(prefix, "demo/total") / "total.json").read_text())["sum"] == 45


def test_marin_run_retries_a_failed_step(tmp_path: Path) -> None:
    experiment = write(tmp_path)
    prefix = tmp_path / "store"
    failed = marin("run", str(experiment), "--prefix", str(prefix), cwd=tmp_path,
                   env=env_for(tmp_path, FAIL_ADD="1"), check=False)
    assert failed.returncode == 1 and calls(tmp_path) == 1
    marin("run", str(experiment), "--prefix", str(prefix), cwd=tmp_path, env=env_for(tmp_path))
    assert calls(tmp_path) == 2


def test_unknown_marin_variables_warn_and_do_not_fail(tmp_path: Path) -> None:
    experiment = write(tmp_path)
    ran = marin("plan", str(experiment), "--prefix", str(tmp_path / "store"), cwd=tmp_path,
                env=env_for(tmp_path, MARIN_ROOT="/somewhere", MARIN_CI_S3_PREFIX="s3://bucket/ci"))
    assert "environment variable MARIN_ROOT is not a marin-build setting and is ignored" in ran.stderr
    assert "environment variable MARIN_CI_S3_PREFIX is not a marin-build setting" in ran.stderr
    assert "demo/total" in ran.stdout


def test_what_marin_does_and_this_project_does_not_is_refused_by_name() -> None:
    from marin.execution.executor import ExecutorStep, InputName
    from marin.execution.step import InvalidStep

    pseudo = ExecutorStep(name="z", fn=json.dumps, config={"in": InputName.hardcoded("raw/x").nonblocking()})
    with pytest.raises(InvalidStep, match=r"^z.config: InputName.nonblocking\(\) is not supported"):
        pseudo.lower()
    with pytest.raises(InvalidStep, match=r"^step 'z': fn must be a module-level function taking the config"):
        ExecutorStep(name="z", fn=lambda config: None, config={}).lower()
    moved = ExecutorStep(name="z", fn=json.dumps, config={}).with_output_path("/elsewhere")
    with pytest.raises(InvalidStep, match=r"^step 'z': override_output_path='/elsewhere' is not supported"):
        moved.lower()


SEEN: list = []


def _record(config) -> None:
    import os

    SEEN.append((config, os.environ.get("STEP_COLOUR")))


def test_own_paths_prefix_paths_and_env_vars_are_filled_in_when_the_step_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from marin.execution.executor import ExecutorStep, InputName, run_executor_step, this_output_path
    from marin.execution.run.worker import RunningStep, running

    monkeypatch.delenv("STEP_COLOUR", raising=False)
    step = ExecutorStep(name="a/b", fn=_record, env_vars={"STEP_COLOUR": "blue"},
                        config={"out": this_output_path(), "log": this_output_path("logs/x.txt"),
                                "raw": InputName.hardcoded("raw/data"), "keep": [1, (2, "3")]})
    lowered = step.lower()
    SEEN.clear()
    # The runner hands a running step its prefix; nothing parses it out of the output path.
    with running(RunningStep("a/b", "v1", "/p/q/a/b-0123456789abcdef", prefix="/p/q")):
        run_executor_step(lowered.config, "/p/q/a/b-0123456789abcdef")
    assert SEEN == [({"out": "/p/q/a/b-0123456789abcdef", "log": "/p/q/a/b-0123456789abcdef/logs/x.txt",
                      "raw": "/p/q/raw/data", "keep": [1, (2, "3")]}, "blue")]
    assert "STEP_COLOUR" not in os.environ
    with pytest.raises(RuntimeError, match="a/b: an ExecutorStep's function runs inside a runner"):
        run_executor_step(lowered.config, "/p/q/a/b-0123456789abcdef")


ARTIFACT_STEPS = '''\
"""Two artifact steps, in the form of Marin's newest hello world."""

import json
import os
from dataclasses import dataclass

from iris.marin_fs import open_url
from marin.execution.artifact import Artifact
from marin.execution.lazy import ArtifactStep, lower
from marin.execution.step_runner import StepRunner


@dataclass(frozen=True)
class Count:
    n: int
    output_path: str


@dataclass(frozen=True)
class Add:
    numbers: str
    output_path: str


def count(config: Count) -> None:
    with open_url(os.path.join(config.output_path, "numbers.json"), "w") as f:
        json.dump(list(range(config.n)), f)


def add(config: Add) -> None:
    with open_url(config.numbers) as f:
        numbers = json.load(f)
    with open_url(os.path.join(config.output_path, "total.json"), "w") as f:
        json.dump({"sum": sum(numbers)}, f)


numbers = ArtifactStep(name="art/numbers", version="v1", artifact_type=Artifact, run=count,
                       build_config=lambda ctx: Count(n=N, output_path=ctx.output_path))
total = ArtifactStep(name="art/total", version="v1", artifact_type=Artifact, run=add, deps=(numbers,),
                     build_config=lambda ctx: Add(numbers=os.path.join(ctx.artifact_path(numbers), "numbers.json"),
                                                  output_path=ctx.output_path))


def build() -> ArtifactStep[Artifact]:
    return total


if __name__ == "__main__":
    StepRunner().run([lower(build())])
'''


def test_marin_artifact_steps_run_and_their_configs_are_hashed(tmp_path: Path) -> None:
    experiment = tmp_path / "artifacts.py"
    experiment.write_text(ARTIFACT_STEPS.replace("n=N", "n=10"))
    store = tmp_path / "store"
    run([sys.executable, str(experiment)], cwd=tmp_path, env=clean_env(MARIN_PREFIX=str(store)))
    first = entry(store, "art/total")
    assert json.loads((first / "total.json").read_text()) == {"sum": 45}
    experiment.write_text(ARTIFACT_STEPS.replace("n=N", "n=5"))
    marin("run", str(experiment), "--prefix", str(store), cwd=tmp_path, env=clean_env())
    totals = sorted((store / "art").glob("total-*"))
    assert len(totals) == 2
    assert {json.loads((t / "total.json").read_text())["sum"] for t in totals} == {45, 10}
