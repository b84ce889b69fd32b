"""One graph, one name per step, at the command line: ``marin plan`` reports two steps of one name
(both definitions and what differs), ``marin run`` refuses them with nothing built, a Marin
executor file only gets the warning, and ``marin show NAME`` says which of several builds it shows."""

from __future__ import annotations

import json
import os
import re
import textwrap

import steps_for_tests as t
from click.testing import CliRunner

from marin.cli.main import cli
from marin.execution.plan.explain import display_path

CLASH = """\
import steps_for_tests as t
from marin.execution.core.step import Step

tok_a = Step("tok/x", t.record, t.NodeConfig("x", value=0, counter_dir=COUNTER))
tok_b = Step("tok/x", t.record, t.NodeConfig("x", value=1, counter_dir=COUNTER))
steps = [Step("train/m", t.record, t.NodeConfig("m", inputs=(tok_a, tok_b), counter_dir=COUNTER))]
"""

EXECUTOR = """\
import os
from dataclasses import dataclass

from marin.execution.executor import ExecutorStep, executor_main, this_output_path, versioned


@dataclass(frozen=True)
class Config:
    seed: int
    out: str


def write_seed(config):
    os.makedirs(config.out, exist_ok=True)
    with open(os.path.join(config.out, "seed.txt"), "w") as f:
        f.write(str(config.seed))


first = ExecutorStep(name="tok/x", fn=write_seed, config=Config(seed=versioned(0), out=this_output_path()))
second = ExecutorStep(name="tok/x", fn=write_seed, config=Config(seed=versioned(1), out=this_output_path()))

if __name__ == "__main__":
    executor_main(steps=[first, second])
"""


def _file(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _invoke(args: list[str]):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def _clash_line(exp: str, fields: str) -> re.Pattern[str]:
    where = re.escape(display_path(exp))
    return re.compile(rf"two steps named tok/x with different identities: {where}:(\d+) \(hash ([0-9a-f]{{8}})\) "
                      rf"and {where}:(\d+) \(hash ([0-9a-f]{{8}})\): {re.escape(fields)}$", re.M)


def test_plan_reports_both_definitions_and_run_refuses_with_nothing_built(tmp_path, counter):
    exp = _file(tmp_path, "exp_clash.py", CLASH.replace("COUNTER", repr(counter)))
    prefix = tmp_path / "store"
    plan = _invoke(["plan", exp, "--prefix", str(prefix)])
    assert plan.exit_code == 0, plan.output
    found = _clash_line(exp, "value: 0 → 1").search(plan.stdout)
    assert found and found.group(1, 3) == ("4", "5"), plan.stdout
    assert "marin run refuses: two steps named tok/x" in plan.stdout
    assert json.loads(_invoke(["plan", exp, "--prefix", str(prefix), "--json"]).stdout)["name_clashes"][0]["name"] \
        == "tok/x"

    run = _invoke(["run", exp, "--prefix", str(prefix)])
    assert run.exit_code == 2
    first_line, hint = run.stderr.splitlines()[:2]
    assert first_line.startswith("error: two steps named tok/x") and _clash_line(exp, "value: 0 → 1").search(first_line)
    assert hint.startswith("hint: give each its own name")
    assert not prefix.exists() and t.calls(counter) == {}


def test_executor_file_is_warned_and_built_and_show_says_which_build_it_shows(tmp_path):
    exp = _file(tmp_path, "exp_marin_executor.py", EXECUTOR)
    prefix = str(tmp_path / "store")
    run = _invoke(["run", exp, "--prefix", prefix])
    assert run.exit_code == 0, run.output
    assert "2 ran" in run.stdout
    assert _clash_line(exp, "config.seed: 0 → 1").search(run.stderr), run.stderr
    assert "WARNING" in run.stderr

    show = _invoke(["show", "tok/x", "--prefix", prefix, "--json"])
    assert show.exit_code == 0, show.output
    shown = json.loads(show.stdout)
    note = show.stderr.strip()
    newest = f"tok/x-{shown['hash'][:16]}"
    others = [n for n in os.listdir(os.path.join(prefix, "tok")) if n.startswith("x-") and n != newest[4:]]
    assert re.fullmatch(rf"2 builds of tok/x: showing the newest, {newest} \(\d{{4}}-\d\d-\d\d \d\d:\d\d\); "
                        rf"others: tok/{others[0]} \(\d{{4}}-\d\d-\d\d \d\d:\d\d\); "
                        r"`marin show tok/x-<hash>` shows one of them", note), note
    one = _invoke(["show", f"tok/{others[0]}", "--prefix", prefix, "--json"])
    assert one.exit_code == 0 and one.stderr == "" and json.loads(one.stdout)["hash"] != shown["hash"]
