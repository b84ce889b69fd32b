"""Code drift: every build records a digest of the code it ran; the plan names a built step whose
code changed while its version did not (it stays cached), and ``code_changes="rebuild"`` builds it
again. A comment or a docstring is not a change."""

from __future__ import annotations

import importlib
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import steps_for_tests as t

from marin.execution.core.step import Step
from marin.execution.plan.model import Action, ReasonKind
from marin.execution.run.outcome import Outcome
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import StepRecord
from rigging import filesystem as fs


@dataclass(frozen=True)
class Nothing:
    tag: str = "x"


_MODULE = '''
from rigging import filesystem as fs


def helper():
    return {helper_value!r}


def build(config, output_path):
    """Write what the helper says."""{comment}
    fs.atomic_write(fs.join(output_path, "out.txt"), helper() + {suffix!r})
'''


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write (and rewrite) the package ``driftpkg`` under tmp_path; yields a function that writes the
    module with the given parts and returns it freshly imported."""
    root = tmp_path / "code"
    (root / "driftpkg").mkdir(parents=True)
    (root / "driftpkg" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(root))

    def write(helper_value: str = "a", suffix: str = "", comment: str = "") -> Any:
        path = root / "driftpkg" / "steps.py"
        path.write_text(textwrap.dedent(_MODULE).format(helper_value=helper_value, suffix=suffix, comment=comment))
        sys.modules.pop("driftpkg.steps", None)
        importlib.invalidate_caches()
        return importlib.import_module("driftpkg.steps")

    yield write
    sys.modules.pop("driftpkg.steps", None)
    sys.modules.pop("driftpkg", None)


def _runner(prefix: str, **kwargs: Any) -> StepRunner:
    return StepRunner(prefix=prefix, max_parallel=1, client=t.InProcessClient(), poll_interval=0.01, **kwargs)


def _planned(prefix: str, step: Step, **kwargs: Any):
    [p] = _runner(prefix, **kwargs).plan([step], note_env=True).steps
    return p


def test_a_changed_body_is_named_and_stays_cached_a_comment_is_not_a_change(module, tmp_path):
    prefix = str(tmp_path / "store")
    mod = module()
    assert _runner(prefix).run([Step("drift/s", mod.build, Nothing())]).ok

    mod = module(comment="\n    # a comment, and the docstring above, are not code")
    p = _planned(prefix, Step("drift/s", mod.build, Nothing()))
    assert p.action is Action.CACHED and p.code_changed == ()

    mod = module(suffix="!")
    step = Step("drift/s", mod.build, Nothing())
    p = _planned(prefix, step)
    assert p.action is Action.CACHED
    assert p.code_changed == ("driftpkg.steps:build",)
    assert "code changed since build: driftpkg.steps:build" in p.notes()


def test_rebuild_builds_the_changed_step_again_and_then_it_is_current(module, tmp_path):
    prefix = str(tmp_path / "store")
    mod = module()
    step = Step("drift/s", mod.build, Nothing())
    assert _runner(prefix).run([step]).ok
    output = _planned(prefix, step).output_path

    mod = module(suffix="!")
    step = Step("drift/s", mod.build, Nothing())
    planned = _planned(prefix, step, code_changes="rebuild")
    assert planned.action is Action.RUN
    assert [r.kind for r in planned.reasons] == [ReasonKind.CODE_CHANGED]
    result = _runner(prefix, code_changes="rebuild").run([step])
    assert [s.outcome for s in result.steps] == [Outcome.RAN]
    assert "nondeterministic" not in (result.steps[0].note or "")  # a new output is what was asked for
    assert fs.read_text(fs.join(StepRecord(output).files_folder(), "out.txt")) == "a!"
    after = _planned(prefix, step, code_changes="rebuild")
    assert after.action is Action.CACHED and after.code_changed == ()


def test_warn_keeps_the_build_and_a_run_does_not_rebuild(module, tmp_path):
    prefix = str(tmp_path / "store")
    mod = module()
    assert _runner(prefix).run([Step("drift/s", mod.build, Nothing())]).ok
    mod = module(suffix="?")
    result = _runner(prefix).run([Step("drift/s", mod.build, Nothing())])
    assert [s.outcome for s in result.steps] == [Outcome.CACHED]
    out = fs.read_text(fs.join(StepRecord(result.steps[0].output_path).files_folder(), "out.txt"))
    assert out == "a"


def test_a_changed_helper_in_the_workspace_is_named(module, tmp_path, monkeypatch):
    # The package is in the project here: its helper is part of the step's code.
    monkeypatch.setattr("marin.execution.core.identity._ROOT_CACHE", {})
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.uv.workspace]\nmembers = []\n")
    prefix = str(tmp_path / "store")
    mod = module()
    assert _runner(prefix).run([Step("drift/s", mod.build, Nothing())]).ok
    mod = module(helper_value="b")
    p = _planned(prefix, Step("drift/s", mod.build, Nothing()))
    assert p.code_changed == ("driftpkg.steps:helper",)
