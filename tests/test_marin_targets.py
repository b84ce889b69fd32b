"""The CLI finds steps in real files: module-level ``steps``, steps built at module level, or steps
handed to ``executor_main``/``StepRunner().run`` under ``__main__`` (captured, not run); ``dev``
versions rebuild on every run."""

from __future__ import annotations

import sys
from pathlib import Path

from testsupport.e2e import clean_env, marin, plan_json, run

STEP_FNS = '''\
import os
from dataclasses import dataclass

from rigging import filesystem as fs


@dataclass(frozen=True)
class Note:
    text: str


def write_note(config: Note, output_path: str) -> None:
    with open(os.environ["CALLS_LOG"], "a") as log:
        log.write(config.text + "\\n")
    fs.atomic_write(fs.join(output_path, "note.txt"), config.text)
'''

MAIN_ONLY = STEP_FNS + '''
import argparse

from marin.execution.lazy import lower
from marin.execution.step import Step
from marin.execution.step_runner import StepRunner


def build(word: str, version: str = "dev") -> Step:
    return Step(name=f"notes/{word}", fn=write_note, config=Note(word), version=version)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--word", default="hello")
    args = parser.parse_args()
    StepRunner().run([lower(build(args.word))])
'''

MODULE_LEVEL = STEP_FNS + '''
from marin.execution.step import Step

first = Step(name="notes/first", fn=write_note, config=Note("first"))
second = Step(name="notes/second", fn=write_note, config=Note("second"))


def with_arguments(word):
    return [Step(name="notes/x", fn=write_note, config=Note(word))]
'''


def env_for(tmp_path: Path) -> dict[str, str]:
    return clean_env(CALLS_LOG=str(tmp_path / "calls.log"))


def test_steps_run_only_under_main_are_captured_not_run(tmp_path: Path) -> None:
    experiment = tmp_path / "main_only.py"
    experiment.write_text(MAIN_ONLY)
    plan = plan_json(str(experiment), "--prefix", str(tmp_path / "store"), cwd=tmp_path, env=env_for(tmp_path))
    assert [s["name"] for s in plan["steps"]] == ["notes/hello"]
    assert not (tmp_path / "calls.log").exists()  # planning ran nothing


def test_steps_run_by_a_function_the_main_block_calls_are_captured(tmp_path: Path) -> None:
    experiment = tmp_path / "via_function.py"
    experiment.write_text(MAIN_ONLY.replace(
        "    StepRunner().run([lower(build(args.word))])",
        "    go(args.word)\n\n\ndef go(word):\n    runner = StepRunner()\n    runner.run([lower(build(word, 'v1'))])"))
    plan = plan_json(str(experiment), "--prefix", str(tmp_path / "store"), cwd=tmp_path, env=env_for(tmp_path))
    assert [(s["name"], s["action"]) for s in plan["steps"]] == [("notes/hello", "run")]
    assert not (tmp_path / "calls.log").exists()


def test_dev_version_rebuilds_on_every_run_and_the_plan_says_so(tmp_path: Path) -> None:
    experiment = tmp_path / "main_only.py"
    experiment.write_text(MAIN_ONLY)
    store = str(tmp_path / "store")
    marin("run", str(experiment), "--prefix", store, cwd=tmp_path, env=env_for(tmp_path))
    plan = plan_json(str(experiment), "--prefix", store, cwd=tmp_path, env=env_for(tmp_path))
    (step,) = plan["steps"]
    assert step["action"] == "run"
    assert step["reasons"] == [{"kind": "forced", "detail": 'version "dev" rebuilds on every run'}]
    text = marin("plan", str(experiment), "--prefix", store, cwd=tmp_path, env=env_for(tmp_path)).stdout
    assert 'forced: version "dev" rebuilds on every run' in text
    run([sys.executable, str(experiment), "--word", "hello"], cwd=tmp_path,
        env={**env_for(tmp_path), "MARIN_PREFIX": store})
    assert (tmp_path / "calls.log").read_text().split() == ["hello", "hello"]


def test_module_level_steps_are_collected_and_a_function_needing_arguments_is_a_user_error(tmp_path: Path) -> None:
    experiment = tmp_path / "module_level.py"
    experiment.write_text(MODULE_LEVEL)
    plan = plan_json(str(experiment), "--prefix", str(tmp_path / "store"), cwd=tmp_path, env=env_for(tmp_path))
    assert [s["name"] for s in plan["steps"]] == ["notes/first", "notes/second"]
    bad = marin("plan", f"{experiment}:with_arguments", cwd=tmp_path, env=env_for(tmp_path), check=False)
    assert bad.returncode == 2
    assert f"{experiment}:with_arguments needs arguments (word)" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_folders_hold_experiments_by_what_the_files_define_not_their_text(tmp_path: Path) -> None:
    folder = tmp_path / "exps"
    folder.mkdir()
    (folder / "main_only.py").write_text(MAIN_ONLY)
    # Mentions `steps` only in text: not an experiment.
    (folder / "helper.py").write_text('"""Helpers.\nsteps are elsewhere"""\nsteps_taken = 3\n')
    plan = plan_json(str(folder), "--prefix", str(tmp_path / "store"), cwd=tmp_path, env=env_for(tmp_path))
    assert [s["name"] for s in plan["steps"]] == ["notes/hello"]
