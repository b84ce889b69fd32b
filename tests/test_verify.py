"""``marin verify``: finished outputs that changed or vanished after they were built are reported."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from marin.cli.main import cli
from marin.execution.store.verify import Verdict, verify_output

EXPERIMENT = """
from marin.experiment.data import bundled_corpus

corpus = bundled_corpus(name="verify/raw", num_stories=6, seed=1, num_shards=2)
steps = [corpus]
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """An experiment with one real step, built once; tests copy its output folder before damaging it."""
    root = tmp_path_factory.mktemp("verify")
    experiment = root / "exp_verify.py"
    experiment.write_text(EXPERIMENT)
    prefix = root / "prefix"
    result = CliRunner().invoke(cli, ["run", str(experiment), "--prefix", str(prefix)])
    assert result.exit_code == 0, result.output
    (output,) = [p for p in (prefix / "verify").iterdir()]
    return experiment, prefix, output


def _verify(experiment: Path, prefix: Path):
    return CliRunner().invoke(cli, ["verify", str(experiment), "--prefix", str(prefix)])


def _fresh(built, tmp_path: Path) -> tuple[Path, Path, Path]:
    import shutil

    experiment, prefix, output = built
    copy = tmp_path / "prefix"
    shutil.copytree(prefix, copy, symlinks=True)
    return experiment, copy, copy / output.relative_to(prefix)


def test_untouched_outputs_verify_ok_with_exit_0(built, tmp_path):
    experiment, prefix, output = _fresh(built, tmp_path)
    result = _verify(experiment, prefix)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].startswith("ok ")
    assert "files match the manifest" in result.output


@pytest.mark.parametrize("damage, expected", [
    ("edit", "checksum changed"),
    ("truncate", "size"),
    ("delete", "missing"),
    ("add", "added after it was built"),
    ("manifest", "manifest.json: changed after the success record was written"),
])
def test_each_kind_of_change_is_reported_with_exit_1(built, tmp_path, damage, expected):
    experiment, prefix, output = _fresh(built, tmp_path)
    data = sorted(output.glob("*.jsonl"))[0]
    if damage == "edit":
        content = bytearray(data.read_bytes())
        content[5] ^= 1
        data.write_bytes(bytes(content))
    elif damage == "truncate":
        data.write_bytes(data.read_bytes()[:-3])
    elif damage == "delete":
        data.unlink()
    elif damage == "add":
        (output / "stray.jsonl").write_text("{}\n")
    else:
        manifest = json.loads((output / ".marin" / "manifest.json").read_text())
        manifest["files"] = manifest["files"][:-1]  # hides the last file from the check
        (output / ".marin" / "manifest.json").write_text(json.dumps(manifest))
    result = _verify(experiment, prefix)
    assert result.exit_code == 1, result.output
    line = result.output.splitlines()[0]
    assert line.startswith("changed ") and expected in line, result.output
    assert "no longer match their manifests: verify/raw" in result.output


@pytest.mark.parametrize("record, body", [("manifest.json", b"{not json"), ("manifest.json", b'{"files": 3}'),
                                          ("success.json", b"\x00\xff")])
def test_unreadable_records_of_a_finished_step_are_broken(built, tmp_path, record, body):
    experiment, prefix, output = _fresh(built, tmp_path)
    (output / ".marin" / record).write_bytes(body)
    check = verify_output("verify/raw", str(output))
    assert check.verdict is Verdict.BROKEN and check.problems
    result = _verify(experiment, prefix)
    assert result.exit_code == 1 and result.output.startswith("broken"), result.output


def test_a_vanished_output_or_unbuilt_step_is_not_a_problem_but_is_shown(built, tmp_path):
    import shutil

    experiment, prefix, output = _fresh(built, tmp_path)
    shutil.rmtree(output)
    result = _verify(experiment, prefix)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("not built") and "nothing to check" in result.output


def test_a_file_replaced_by_a_dangling_symlink_is_reported(built, tmp_path):
    experiment, prefix, output = _fresh(built, tmp_path)
    data = sorted(output.glob("*.jsonl"))[0]
    data.unlink()
    os.symlink(tmp_path / "nowhere", data)
    check = verify_output("verify/raw", str(output))
    assert check.verdict is Verdict.CHANGED, check
    assert any(data.name in p for p in check.problems)


def test_verify_needs_a_target():
    result = CliRunner().invoke(cli, ["verify"])
    assert result.exit_code == 2 and "Traceback" not in result.output
