"""Incremental reuse is keyed on the environment (issue 48, item 5): a file-by-file step reuses no
part built by another version of a distribution its code reaches, and ``marin plan`` says why.

The distribution is a real one as far as ``importlib.metadata`` can tell (a package with its
``.dist-info`` on ``PYTHONPATH``); its version changes the way an upgrade changes it, between two
``marin`` processes, so the fingerprint code that reads it is the one a user's run uses.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import steps_for_tests as t

from marin.execution.store.step_record import StepRecord

MARIN = os.path.join(t.WORKSPACE, ".venv", "bin", "marin")

EXPERIMENT = '''
import os
from dataclasses import dataclass
from typing import Any

from marin.execution.core.sources import source
from marin.execution.core.step import Step
from marin.execution.core.traits import StepTraits, step_function
from marin.processing.incremental import IncrementalStart
from marin.processing.per_file import PartOutput, input_files, map_files


@dataclass(frozen=True)
class ShoutConfig:
    input: Any


@step_function(StepTraits(plan_start=IncrementalStart(("input",))))
def shout(config, output_path):
    import loudtext

    def one(f):
        with open(f.path) as src, open(os.path.join(output_path, f.name + ".out"), "w") as out:
            out.write(loudtext.shout(src.read()))
        return PartOutput((f.name + ".out",), {"files": 1})

    map_files(input_files(config.input, (".txt",)), output_path, one)


here = os.path.dirname(os.path.abspath(__file__))
steps = [Step(name="shout", fn=shout, config=ShoutConfig(input=source(os.path.join(here, "docs"))))]
'''


def _install(site: Path, version: str) -> None:
    """``loudtext`` at ``version``, as an installer leaves it: the package and its ``.dist-info``."""
    for old in site.glob("loudtext-*.dist-info"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    (site / "loudtext").mkdir(parents=True, exist_ok=True)
    (site / "loudtext" / "__init__.py").write_text("def shout(text):\n    return text.upper()\n")
    info = site / f"loudtext-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: loudtext\nVersion: {version}\n")
    (info / "top_level.txt").write_text("loudtext\n")


def _marin(args: list[str], env: dict[str, str], cwd: Path) -> str:
    proc = subprocess.run([MARIN, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_a_new_version_of_a_distribution_the_step_imports_rebuilds_every_part(
        tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    site, exp = tmp_path / "site", tmp_path / "exp"
    _install(site, "1.0")
    (exp / "docs").mkdir(parents=True)
    (exp / "exp.py").write_text(textwrap.dedent(EXPERIMENT))
    for name in ("a", "b"):
        (exp / "docs" / f"{name}.txt").write_text(f"text {name}\n")
    env = {**subprocess_env, "PYTHONPATH": os.pathsep.join((str(site), subprocess_env["PYTHONPATH"])),
           "MARIN_NO_FAST_NOOP": "1"}
    args = ["exp/exp.py", "--prefix", "store"]

    assert "1 ran" in _marin(["run", *args], env, tmp_path)
    (exp / "docs" / "c.txt").write_text("text c\n")
    same = _marin(["plan", *args], env, tmp_path)
    assert "start: reuses the per-file outputs of store/shout-" in same, same  # the same environment: parts reused

    _install(site, "1.1")
    upgraded = _marin(["plan", *args], env, tmp_path)
    assert "start: parts rebuilt: environment changed: loudtext 1.0 → 1.1 (since store/shout-" in upgraded, upgraded
    assert "reuses the per-file outputs" not in upgraded
    assert "1 ran" in _marin(["run", *args], env, tmp_path)
    [built] = [p for p in (tmp_path / "store").glob("shout-*")
               if (prov := StepRecord(str(p)).read_provenance()) is not None and prov.built_code() is not None
               and prov.built_code().environment().get("loudtext") == "1.1"]  # type: ignore[union-attr]
    provenance = StepRecord(str(built)).read_provenance()
    assert provenance is not None and provenance.incremental is None, "every part was processed again"
    assert sorted(p.name for p in built.glob("*.out")) == ["a.txt.out", "b.txt.out", "c.txt.out"]
