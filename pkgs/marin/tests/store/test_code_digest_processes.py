"""One code digest per step function in every process: a build and a later plan agree whatever else
each imported (the modules at Marin's old paths, which put a moved module in ``sys.modules`` under
a second name, above all), so a plan right after a build says no code changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from marin.execution.core.identity import workspace_root

_SRC = Path(__file__).resolve().parents[2] / "src"


def _old_names() -> list[str]:
    """Every module at one of Marin's old paths: those that put the moved module in their place."""
    found = [path for path in (_SRC / "marin").rglob("*.py") if "sys.modules[__name__] =" in path.read_text()]
    return sorted(".".join(path.relative_to(_SRC).with_suffix("").parts) for path in found)


_STEP = '''
from marin.experiment.chat.template import ChatTemplate, TemplateError
from rigging import filesystem as fs


def build(config, output_path):
    """A step whose code names a moved class with methods and one without."""
    if not isinstance(ChatTemplate, type) or not issubclass(TemplateError, ValueError):
        raise TemplateError("no template")
    fs.atomic_write(fs.join(output_path, "out.txt"), "built")
'''

_SCRIPT = '''
import importlib, json, sys
old_names, prefix, action = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
for name in old_names:
    importlib.import_module(name)
import fpstep
from fray.inprocess import InProcessClient
from marin.execution.core.step import Step
from marin.execution.run.runner import StepRunner
from marin.execution.store.code_digest import code_digest
from marin.experiment.posttrain.data import preference_chat_step

runner = StepRunner(prefix=prefix, max_parallel=1, client=InProcessClient())
step = Step("fingerprint/s", fpstep.build, {"n": 1})
if action == "build":
    assert runner.run([step]).ok
[planned] = runner.plan([step], note_env=True).steps
print(json.dumps({"action": planned.action.name, "code_changed": list(planned.code_changed),
                  "notes": planned.notes(), "library": code_digest(preference_chat_step).digest}))
'''


def _run(tmp_path: Path, old_names: list[str], action: str) -> dict:
    (tmp_path / "fpstep.py").write_text(textwrap.dedent(_STEP))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_SCRIPT), json.dumps(old_names),
                           str(tmp_path / "store"), action],
                          capture_output=True, text=True, cwd=workspace_root(), timeout=300,
                          env={**_env(), "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_a_plan_after_a_build_sees_no_code_change_whatever_either_imported(tmp_path: Path) -> None:
    old_names = _old_names()
    assert "marin.experiment.chat_template" in old_names and len(old_names) >= 10
    built = _run(tmp_path, old_names, "build")  # the build's process imported every old name
    assert built["code_changed"] == []
    bare = _run(tmp_path, [], "plan")  # the plan's, none
    assert (bare["action"], bare["code_changed"]) == ("CACHED", []), bare["notes"]
    again = _run(tmp_path, old_names, "plan")
    assert (again["action"], again["code_changed"]) == ("CACHED", []), again["notes"]
    # A library step's digest is one value in every fresh interpreter, whatever it imported first.
    assert built["library"] == bare["library"] == again["library"]
