"""The ``marin`` CLI, through Click's test runner and as a real subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import steps_for_tests as t
from click.testing import CliRunner

from marin.cli.main import cli

MARIN = os.path.join(t.WORKSPACE, ".venv", "bin", "marin")

DIAMOND = """
import os
import steps_for_tests as t

g = t.diamond(os.environ.get("EXP_COUNTER", ""), **{overrides})
steps = [g["d"], g["e"]]
"""


def _exp(tmp_path, name: str, body: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def _diamond(tmp_path, name: str = "exp_diamond", overrides: str = "{}") -> str:
    return _exp(tmp_path, name, DIAMOND.replace("{overrides}", overrides))


def _invoke(args: list[str], counter: str = ""):
    runner = CliRunner()
    return runner.invoke(cli, args, env={"EXP_COUNTER": counter}, catch_exceptions=False)


def test_run_then_rerun_through_clirunner(tmp_path, counter):
    exp = _diamond(tmp_path)
    prefix = str(tmp_path / "store")
    first = _invoke(["run", exp, "--prefix", prefix, "-j", "2"], counter)
    assert first.exit_code == 0, first.output
    assert "5 ran" in first.stdout and f"prefix: {prefix}" in first.stdout
    second = _invoke(["run", exp, "--prefix", prefix], counter)
    assert second.exit_code == 0, second.output
    assert "5 cached" in second.stdout
    assert t.calls(counter) == {"g.a": 1, "g.b": 1, "g.c": 1, "g.d": 1, "g.e": 1}


def test_run_with_a_failing_step_exits_nonzero_naming_it_and_its_log(tmp_path, counter):
    exp = _diamond(tmp_path, "exp_failing", '{"c": {"fail": True}}')
    result = _invoke(["run", exp, "--prefix", str(tmp_path / "store")], counter)
    assert result.exit_code == 1
    assert "failed: g/c: RuntimeError: step g.c failed on purpose" in result.stderr
    log = re.search(r"log: (\S+)", result.stderr).group(1)
    assert "failed on purpose" in open(log).read()
    assert "error: 1 step(s) failed: g/c" in result.stderr
    assert "Traceback" not in result.stderr
    assert t.calls(counter) == {"g.a": 1, "g.b": 1, "g.c": 1, "g.e": 1}  # g/d never ran


BAD_INPUTS = {
    "unserializable": ("""
        import steps_for_tests as t
        steps = [t.node("bad/obj", extra={"weights": object()})]
        """, [], "extra['weights']"),
    "dotdot": ("""
        from marin.execution.step import Step
        import steps_for_tests as t
        steps = [Step("data/../escape", t.record, None)]
        """, [], "data/../escape"),
    "leading_slash": ("""
        from marin.execution.step import Step
        import steps_for_tests as t
        steps = [Step("/abs/x", t.record, None)]
        """, [], "/abs/x"),
    "no_steps": ("""
        X = 1
        """, [], "defines no steps"),
    "unknown_only": ("""
        import steps_for_tests as t
        steps = [t.node("only/a")]
        """, ["--only", "only/zzz"], "only/zzz"),
}


def _check_user_error(output: str, needle: str) -> None:
    lines = [line for line in output.strip().splitlines() if not line.startswith("hint:")]
    assert len(lines) == 1, output
    assert lines[0].startswith("error: "), output
    assert needle in lines[0], output
    assert "Traceback" not in output


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_a_one_line_error_with_exit_code_2(tmp_path, case):
    body, extra, needle = BAD_INPUTS[case]
    exp = _exp(tmp_path, f"bad_{case}", body)
    result = _invoke(["run", exp, "--prefix", str(tmp_path / "store"), *extra])
    assert result.exit_code == 2, result.output
    _check_user_error(result.stderr, needle)
    assert not os.path.exists(tmp_path / "store")  # nothing ran, nothing was written


def test_missing_target_file(tmp_path):
    missing = str(tmp_path / "nowhere" / "exp.py")
    for verb in ("run", "plan", "status", "graph", "gc"):
        result = _invoke([verb, missing, "--prefix", str(tmp_path / "store")])
        assert result.exit_code == 2, (verb, result.output)
        _check_user_error(result.stderr, missing)


def test_verbose_shows_the_traceback(tmp_path):
    exp = _exp(tmp_path, "bad_verbose", BAD_INPUTS["dotdot"][0])
    result = _invoke(["--verbose", "run", exp, "--prefix", str(tmp_path / "store")])
    assert result.exit_code == 2
    assert "Traceback" in result.stderr and "data/../escape" in result.stderr


def test_bad_inputs_as_a_real_subprocess(tmp_path, subprocess_env):
    exp = _exp(tmp_path, "bad_sub", BAD_INPUTS["unserializable"][0])
    for args, needle in (([exp], "extra['weights']"), ([str(tmp_path / "missing.py")], "missing.py"),
                         ([exp, "--only", "nope/*"], "nope/*")):
        proc = subprocess.run([MARIN, "run", *args, "--prefix", str(tmp_path / "store")], env=subprocess_env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        _check_user_error(proc.stderr, needle)


def test_run_as_a_subprocess_with_functions_defined_in_the_experiment_file(tmp_path, subprocess_env):
    exp = _exp(tmp_path, "own_fns", """
        from dataclasses import dataclass
        from marin.execution.step import Step, output_path_of
        from rigging import filesystem as fs

        @dataclass(frozen=True)
        class Cfg:
            n: int
            src: object = None

        def make(config, output_path):
            fs.atomic_write(fs.join(output_path, "n.txt"), str(config.n))

        def double(config, output_path):
            n = int(fs.read_text(config.src))
            fs.atomic_write(fs.join(output_path, "n.txt"), str(2 * n))

        first = Step("own/make", make, Cfg(21))
        steps = [Step("own/double", double, Cfg(0, output_path_of(first, "n.txt")))]
        """)
    prefix = tmp_path / "store"
    proc = subprocess.run([MARIN, "run", exp, "--prefix", str(prefix)], env=subprocess_env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 ran" in proc.stdout
    (out,) = prefix.glob("own/double-*/n.txt")
    assert out.read_text() == "42"
    prov = json.loads(next(prefix.glob("own/double-*/.marin/provenance.json")).read_text())
    assert prov["fn"] == "own_fns:double"  # the file name, never an absolute path


def test_hello_world_cli_and_python_m_give_the_same_hashes(tmp_path, subprocess_env):
    env = {**subprocess_env, "MARIN_PREFIX": str(tmp_path / "by_module")}
    env.pop("HELLO_N", None)
    cli_run = subprocess.run([MARIN, "run", "experiments/tutorials/hello_world.py", "--prefix",
                              str(tmp_path / "by_cli")], env=env, capture_output=True, text=True, timeout=120,
                             cwd=t.WORKSPACE)
    assert cli_run.returncode == 0, cli_run.stderr
    module_run = subprocess.run([sys.executable, "-m", "experiments.tutorials.hello_world"], env=env,
                                capture_output=True, text=True, timeout=120, cwd=t.WORKSPACE)
    assert module_run.returncode == 0, module_run.stderr
    by_cli = sorted(p.relative_to(tmp_path / "by_cli").as_posix()
                    for p in (tmp_path / "by_cli").glob("hello/*/.marin/success.json"))
    by_module = sorted(p.relative_to(tmp_path / "by_module").as_posix()
                       for p in (tmp_path / "by_module").glob("hello/*/.marin/success.json"))
    assert len(by_cli) == 2 and by_cli == by_module
    stats = json.loads(next((tmp_path / "by_cli").glob("hello/stats-*/stats.json")).read_text())
    assert stats == {"count": 100, "sum": 4950, "min": 0, "max": 99}


def test_plan_json(tmp_path, counter):
    exp = _diamond(tmp_path, "exp_plan")
    prefix = str(tmp_path / "store")
    assert _invoke(["run", exp, "--prefix", prefix, "--only", "g/a"], counter).exit_code == 0
    result = _invoke(["plan", exp, "--prefix", prefix, "--json"], counter)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = {s["name"]: s for s in data["steps"]}
    assert rows["g/a"]["action"] == "cached"
    assert rows["g/b"]["action"] == "run"
    # g/a is cached, so g/b is new; g/d waits on two new steps but was never built itself: new too.
    assert rows["g/b"]["reasons"] == [{"kind": "new", "detail": "no earlier build of this name"}]
    assert rows["g/d"]["reasons"] == [{"kind": "new", "detail": "no earlier build of this name"}]
    assert rows["g/e"]["reasons"][0]["kind"] == "new"
    assert all(len(s["hash"]) == 64 for s in data["steps"])
    text = _invoke(["plan", exp, "--prefix", prefix], counter)
    assert text.exit_code == 0 and "cached" in text.stdout and "new" in text.stdout
    assert "4 to run" in text.stdout


def test_plan_force_and_only_patterns(tmp_path):
    exp = _diamond(tmp_path, "exp_force")
    result = _invoke(["plan", exp, "--prefix", str(tmp_path / "s"), "--json", "--force", "g/*", "--only", "g/c"])
    assert result.exit_code == 0, result.output
    rows = {s["name"]: s for s in json.loads(result.stdout)["steps"]}
    assert set(rows) == {"g/a", "g/c"}
    assert {r["reasons"][0]["kind"] for r in rows.values()} == {"forced"}
    bad = _invoke(["plan", exp, "--prefix", str(tmp_path / "s"), "--force", "zz*"])
    assert bad.exit_code == 2
    _check_user_error(bad.stderr, "zz*")


def test_status_of_a_big_graph_is_one_line_per_group(tmp_path, counter):
    exp = _exp(tmp_path, "exp_wide", """
        import os
        import steps_for_tests as t

        steps = [t.node(f"wide/n{i:02d}", os.environ.get("EXP_COUNTER", "")) for i in range(45)]
        steps.append(t.node("other/x", os.environ.get("EXP_COUNTER", "")))
    """)
    prefix = str(tmp_path / "store")
    assert _invoke(["run", exp, "--prefix", prefix, "--only", "wide/n0*", "-j", "2"], counter).exit_code == 0

    summary = _invoke(["status", exp, "--prefix", prefix])
    assert summary.exit_code == 0, summary.output
    lines = summary.stdout.splitlines()
    assert lines[0].split() == ["group", "steps", "done", "missing"]
    assert {line.split()[0]: line.split()[1:] for line in lines[1:-1]} == {"wide": ["45", "10", "35"],
                                                                           "other": ["1", "0", "1"]}
    assert "46 steps in 2 groups" in lines[-1] and "--all" in lines[-1]

    every = _invoke(["status", exp, "--prefix", prefix, "--all"])
    rows = every.stdout.splitlines()
    assert rows[0].split() == ["step", "state", "path", "age", "duration"] and len(rows) == 47
    assert sum(1 for r in rows[1:] if r.split()[1] == "done") == 10


def test_status_show_graph_and_config(tmp_path, counter):
    exp = _diamond(tmp_path, "exp_status", '{"b": {"fail": True}}')
    prefix = str(tmp_path / "store")
    assert _invoke(["run", exp, "--prefix", prefix], counter).exit_code == 1

    status = _invoke(["status", exp, "--prefix", prefix])
    assert status.exit_code == 0, status.output
    states = {line.split()[0]: line.split()[1] for line in status.stdout.splitlines()[1:]}
    assert states == {"g/a": "done", "g/b": "failed", "g/c": "done", "g/d": "missing", "g/e": "done"}
    assert status.stdout.splitlines()[0].split() == ["step", "state", "path", "age", "duration"]

    by_name = _invoke(["show", "g/a", "--prefix", prefix, "--json"])
    assert by_name.exit_code == 0, by_name.output
    prov = json.loads(by_name.stdout)
    assert prov["name"] == "g/a" and prov["state"] == "done" and prov["fn"] == "steps_for_tests:record"
    by_path = _invoke(["show", prov["output_path"], "--json"])
    assert by_path.exit_code == 0 and json.loads(by_path.stdout)["hash"] == prov["hash"]
    failed_path = next(line.split()[2] for line in status.stdout.splitlines() if line.startswith("g/b"))
    failed = json.loads(_invoke(["show", failed_path, "--json"]).stdout)
    assert failed["state"] == "failed" and "failed on purpose" in failed["last_attempt"]["error"]
    summary = _invoke(["show", failed_path, "--prefix", prefix]).stdout  # for people: the error and its log
    assert re.search(r"^g/b-[0-9a-f]{16}\n  state    failed\n", summary) and re.search(
        r"^  error    RuntimeError: step g\.b failed on purpose\n  log      \S+/\.marin/log\.txt$", summary, re.M), summary
    unknown = _invoke(["show", "no/such", "--prefix", prefix])
    assert unknown.exit_code == 2
    _check_user_error(unknown.stderr, "no/such")

    mermaid = _invoke(["graph", exp, "--prefix", prefix])
    assert mermaid.exit_code == 0
    lines = mermaid.stdout.splitlines()
    assert lines[0] == "graph TD"
    assert sum("-->" in line for line in lines) == 4  # a->b, a->c, b->d, c->d
    assert any("g/d" in line for line in lines)
    dot = _invoke(["graph", exp, "--prefix", prefix, "--format", "dot"])
    assert dot.exit_code == 0
    assert dot.stdout.startswith("digraph") and dot.stdout.rstrip().endswith("}")
    assert dot.stdout.count("->") == 4

    config = _invoke(["config", "--prefix", prefix])
    assert config.exit_code == 0, config.output
    prefix_rows = [line for line in config.stdout.splitlines() if line.startswith("prefix ")]
    assert prefix_rows and prefix in prefix_rows[0]
    assert "(resolved prefix)" in config.stdout


def test_module_path_and_file_attr_targets(tmp_path, counter):
    exp = _exp(tmp_path, "exp_attr", """
        import steps_for_tests as t

        def small():
            return [t.node("attr/a")]

        steps = [t.node("attr/b")]
        """)
    result = _invoke(["plan", f"{exp}:small", "--prefix", str(tmp_path / "s"), "--json"])
    assert result.exit_code == 0, result.output
    assert [s["name"] for s in json.loads(result.stdout)["steps"]] == ["attr/a"]
    module = _invoke(["plan", "experiments.tutorials.hello_world", "--prefix", str(tmp_path / "s"), "--json"])
    assert module.exit_code == 0, module.output
    assert [s["name"] for s in json.loads(module.stdout)["steps"]] == ["hello/numbers", "hello/stats"]
    missing_attr = _invoke(["plan", f"{exp}:nothing", "--prefix", str(tmp_path / "s")])
    assert missing_attr.exit_code == 2
    _check_user_error(missing_attr.stderr, "nothing")


def test_folder_target_collects_every_experiment_module(tmp_path):
    folder = tmp_path / "exps"
    folder.mkdir()
    (folder / "one.py").write_text("import steps_for_tests as t\nsteps = [t.node('folder/one')]\n")
    (folder / "two.py").write_text("import steps_for_tests as t\nsteps = [t.node('folder/two')]\n")
    (folder / "helpers.py").write_text("X = 1\n")  # no steps: not an experiment module
    result = _invoke(["plan", str(folder), "--prefix", str(tmp_path / "s"), "--json"])
    assert result.exit_code == 0, result.output
    assert sorted(s["name"] for s in json.loads(result.stdout)["steps"]) == ["folder/one", "folder/two"]
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = _invoke(["plan", str(empty), "--prefix", str(tmp_path / "s")])
    assert bad.exit_code == 2
    _check_user_error(bad.stderr, str(empty))


def test_errors_of_the_users_to_fix_are_one_line_without_traceback(tmp_path):
    body = ("from rigging.secrets import Secret\n"
            "TOKEN = Secret('TEST_CLI_SECRET_NEVER_SET').get()\n"
            "steps = []\n")
    exp = _exp(tmp_path, "secret_missing", body)
    result = _invoke(["plan", exp, "--prefix", str(tmp_path / "store")])
    assert result.exit_code == 2, result.output
    _check_user_error(result.stderr, "secret 'TEST_CLI_SECRET_NEVER_SET' is not set")
    assert "internal error" not in result.stderr


def test_a_handle_refusing_a_value_while_the_file_is_imported_is_a_user_error_naming_the_line(tmp_path):
    exp = _exp(tmp_path, "bad_checkpoint", """
        import steps_for_tests as t
        from marin.experiment.training.train import checkpoint
        ref = checkpoint(t.node("m/x"), step=0)
        steps = [t.node("m/x")]
        """)
    for verb in ("plan", "run"):
        result = _invoke([verb, exp, "--prefix", str(tmp_path / "store")])
        assert result.exit_code == 2, result.output
        _check_user_error(result.stderr, f"{exp}:4: checkpoint(...): model must be a train_lm(...) handle")
        assert "internal error" not in result.stderr and "hint: fix the experiment file" in result.stderr
    assert not os.path.exists(tmp_path / "store")


def test_run_budget_refuses_an_estimate_over_it(tmp_path, counter):
    body = """
        import steps_for_tests as t

        steps = [t.timed_step("slow/train", version="VERSION", num_train_steps=STEPS, seconds_per_step=0.05)]
    """
    first = _exp(tmp_path, "exp_timed_v1", body.replace("VERSION", "v1").replace("STEPS", "10"))
    prefix = str(tmp_path / "store")
    assert _invoke(["run", first, "--prefix", prefix], counter).exit_code == 0
    # A version bump and 100 times the work: about 50 s, estimated from the 0.5 s build.
    bigger = _exp(tmp_path, "exp_timed_v2", body.replace("VERSION", "v2").replace("STEPS", "1000"))
    refused = _invoke(["run", bigger, "--prefix", prefix, "--budget", "5s"], counter)
    assert refused.exit_code == 1, refused.output
    assert re.search(r"exceeds the budget of 5\.0s; most of it: slow/train \(", refused.output), refused.output
    plan = _invoke(["plan", bigger, "--prefix", prefix], counter)
    duration = r"(\d+m \d\ds|[1-5]\d\.\ds)"  # tens of seconds or minutes, as the table writes them
    assert re.search(rf"^run\s+slow/train\s+[0-9a-f]{{16}}\s+{duration}\s+\d+ bytes\s+version bumped", plan.output, re.M), plan.output
    assert re.search(rf"^estimate: {duration} with -j \d+ .*critical path slow/train", plan.output, re.M), plan.output
    machine = json.loads(_invoke(["plan", bigger, "--prefix", prefix, "--json"], counter).output)["estimate"]
    assert machine["critical_path"] == ["slow/train"] and machine["no_estimate"] == []
    assert machine["steps"][0]["seconds"] > 5 and "scaled by num_train_steps" in machine["steps"][0]["basis"]
    bad = _invoke(["run", bigger, "--prefix", prefix, "--budget", "soon"], counter)
    assert bad.exit_code == 2 and "--budget: duration must look like 2h" in bad.output, bad.output


def test_one_command_looks_for_the_workspace_root_once_per_folder(tmp_path, monkeypatch):
    # Its configuration, its target's module name and its import each ask from the experiment's
    # folder: one walk up per folder within a command, another in the next command.
    import collections

    from rigging.config import workspace

    walked: collections.Counter[str] = collections.Counter()
    walk = workspace._walk_up

    def counted(start: str):
        walked[start] += 1
        return walk(start)

    monkeypatch.setattr(workspace, "_walk_up", counted)
    monkeypatch.chdir(tmp_path)
    exp = _diamond(tmp_path, "exp_walk")
    for command in (1, 2):
        result = _invoke(["plan", exp, "--prefix", str(tmp_path / "store")])
        assert result.exit_code == 0, result.output
        assert walked[str(tmp_path)] == command and max(walked.values()) == command, walked
