"""What the CLI says of the host's accelerator (found or stated, and where from), which steps use it,
and that its own process runs with it hidden."""

from __future__ import annotations

import os

import accelerator_steps as chip
import pytest
from click.testing import CliRunner

from iris.accelerator_env import SAVED
from marin.cli.main import cli

EXPERIMENT = """
import accelerator_steps as chip

steps = [chip.tpu("t0", "{records}", "{lock}"), chip.tpu("t1", "{records}", "{lock}"), chip.cpu("c0", "{records}")]
"""


@pytest.fixture
def user_env(monkeypatch):
    """The variables the CLI hides, as a user might have them; put back after the test (the CLI
    hides the accelerator in its own process, here the test's)."""
    monkeypatch.setenv("JAX_PLATFORMS", "")
    monkeypatch.delenv(SAVED, raising=False)
    monkeypatch.delenv("MARIN_ACCELERATOR", raising=False)
    return monkeypatch


def _invoke(args: list[str]):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_config_shows_the_stated_accelerator_and_where_from_and_the_cli_runs_with_it_hidden(tmp_path, user_env):
    user_env.setenv("MARIN_ACCELERATOR", "v5e-1")
    result = _invoke(["config", "--prefix", str(tmp_path)])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith("(host accelerator)"))
    assert "TPU v5e-1 (1 chip)" in row and "stated in environment variable MARIN_ACCELERATOR" in row
    assert any(line.split()[:2] == ["accelerator", "v5e-1"] for line in result.stdout.splitlines())
    assert os.environ["JAX_PLATFORMS"] == "cpu" and os.environ[SAVED]  # this (the CLI's) process: hidden


def test_config_on_a_host_without_an_accelerator_says_where_it_looked(tmp_path, user_env):
    user_env.setenv("MARIN_ACCELERATOR", "none")
    stated = _invoke(["config", "--prefix", str(tmp_path)])
    assert "stated in environment variable MARIN_ACCELERATOR" in stated.stdout
    assert os.environ["JAX_PLATFORMS"] == ""  # nothing to hide
    user_env.delenv("MARIN_ACCELERATOR")
    if not os.path.exists("/dev/accel0") and not any(n.startswith("nvidia") for n in os.listdir("/dev")):
        found = _invoke(["config", "--prefix", str(tmp_path)])
        row = next(line for line in found.stdout.splitlines() if line.startswith("(host accelerator)"))
        assert "none" in row and "found nothing (no /dev/accel*" in row


def test_plan_and_status_say_which_steps_use_the_accelerator(tmp_path, user_env):
    user_env.setenv("MARIN_ACCELERATOR", "v5e-1")
    exp = tmp_path / "exp_chip.py"
    exp.write_text(EXPERIMENT.format(records=tmp_path / "records", lock=tmp_path / "lock"))
    plan = _invoke(["plan", str(exp), "--prefix", str(tmp_path / "store")])
    assert plan.exit_code == 0, plan.output
    rows = {line.split()[1]: line.split()[3] for line in plan.stdout.splitlines() if line.startswith("run ")}
    assert rows == {"chip/t0": "TPU", "chip/t1": "TPU", "data/c0": "cpu"}
    assert ("accelerator: TPU v5e-1 (1 chip) (stated in environment variable MARIN_ACCELERATOR): 2 step(s) to run "
            "use it, one at a time") in plan.stdout
    assert "accelerator steps run one after another in a warm process per accelerator slot that keeps it open " \
           "(accelerator_process: warm, default)" in plan.stdout
    user_env.setenv("MARIN_ACCELERATOR_PROCESS", "fresh")
    fresh = _invoke(["plan", str(exp), "--prefix", str(tmp_path / "store")])
    assert "accelerator steps run each in a fresh process that opens it again (accelerator_process: fresh, " \
           "environment variable MARIN_ACCELERATOR_PROCESS)" in fresh.stdout
    status = _invoke(["status", str(exp), "--prefix", str(tmp_path / "store")])
    assert "accelerator: TPU v5e-1 (1 chip) (stated in environment variable MARIN_ACCELERATOR)" in status.stdout


def test_a_bad_accelerator_setting_is_one_line_naming_where_it_was_set(tmp_path, user_env):
    user_env.setenv("MARIN_ACCELERATOR", "v5e-16")
    result = CliRunner().invoke(cli, ["config", "--prefix", str(tmp_path)])
    assert result.exit_code == 2
    first = result.output.splitlines()[0]
    assert first.startswith("error: environment variable MARIN_ACCELERATOR: bad value for 'MARIN_ACCELERATOR': "
                            "'v5e-16' spans 4 hosts")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "marin.yaml").write_text("accelerator: v5e-4\naccelerator_slots: 3\n")
    user_env.delenv("MARIN_ACCELERATOR")
    user_env.chdir(tmp_path)
    split = CliRunner().invoke(cli, ["config"])
    assert split.exit_code == 2 and "accelerator_slots" in split.output and "marin.yaml" in split.output
    assert "cannot be split into 3 slots" in split.output


ON_THE_CPU = """
import accelerator_steps as chip
from iris.cluster import ResourceConfig
from marin.execution.core.step import Step

steps = [Step("chip/cpu-only", chip.tpu_step, chip.ChipConfig("t0", 0.0, lock="{lock}", record_dir="{records}"),
              resources=ResourceConfig(cpu=1))]
"""


def test_an_accelerator_step_whose_resources_ask_for_none_is_warned_of_by_plan_and_run(tmp_path, user_env):
    user_env.setenv("MARIN_ACCELERATOR", "v5e-1")
    (tmp_path / "records").mkdir()
    exp = tmp_path / "exp_cpu_only.py"
    exp.write_text(ON_THE_CPU.format(records=tmp_path / "records", lock=tmp_path / "lock"))
    said = ("chip/cpu-only: its function computes on the accelerator, but its resources= asks for none: it runs "
            "on the CPU with the accelerator hidden")
    plan = _invoke(["plan", str(exp), "--prefix", str(tmp_path / "store")])
    assert plan.exit_code == 0, plan.output
    assert [line for line in plan.stdout.splitlines() if said in line] == [f"warning: {said}; ask for it in resources= "
                                                                          "(e.g. ResourceConfig.with_tpu(...)) or leave "
                                                                          "resources= out to take one slot of this host's"]
    run = _invoke(["run", str(exp), "--prefix", str(tmp_path / "store"), "--no-fast"])
    assert run.exit_code == 0, run.output
    assert len([line for line in run.output.splitlines() if "but its resources= asks for none" in line]) == 1
    assert chip.read_records(str(tmp_path / "records"))["t0"]["JAX_PLATFORMS"] == "cpu"  # it did run on the CPU


def _run_while_another_holds_the_chip(tmp_path, user_env, *, run_lock: str, wait: str, template: str) -> tuple:
    """``marin run`` of a one-chip experiment (``template``) while another process holds the chip's
    lock (``tmp_path/lock``); the run's own lock file is ``tmp_path/run_lock``. The result and the holder."""
    user_env.setenv("MARIN_ACCELERATOR", "v5e-1")
    user_env.setenv("MARIN_ACCELERATOR_LOCK", str(tmp_path / run_lock))
    user_env.setenv("MARIN_ACCELERATOR_WAIT", wait)
    (tmp_path / "records").mkdir()
    exp = tmp_path / "exp_held.py"
    exp.write_text(template.format(records=tmp_path / "records", lock=tmp_path / "lock"))
    foreign = chip.hold_lock(str(tmp_path / "lock"), seconds=60)
    try:
        result = CliRunner().invoke(cli, ["run", str(exp), "--prefix", str(tmp_path / "store"), "--no-fast"])
    finally:
        foreign.kill()
        foreign.wait()
    return result, foreign


def test_a_chip_held_past_accelerator_wait_fails_in_one_line_and_names_no_log_it_does_not_have(tmp_path, user_env):
    # Held before the step could start: no attempt, so no log; `log: None` is no answer.
    result, foreign = _run_while_another_holds_the_chip(tmp_path, user_env, run_lock="lock", wait="0.3",
                                                        template=EXPERIMENT)
    assert result.exit_code == 1, result.output
    failed = [line for line in result.output.splitlines() if line.startswith("failed: chip/t")]
    assert failed and all("the accelerator stayed held by another process" in line for line in failed)
    assert f"is held by pid {foreign.pid}" in failed[0]
    assert "log: None" not in result.output


def test_a_chip_its_process_found_held_past_accelerator_wait_names_the_attempts_log_once(tmp_path, user_env):
    # The run's lock file is free, so the step starts; its process finds the chip's own lock held.
    result, _ = _run_while_another_holds_the_chip(tmp_path, user_env, run_lock="other_lock", wait="0.5",
                                                  template=ONE_CHIP_STEP)
    assert result.exit_code == 1, result.output
    [log] = [line.split("log: ", 1)[1] for line in result.output.splitlines() if line.startswith("  log: ")]
    assert "multi-process lockfile" in open(log).read()
    assert result.output.count(log) == 1, result.output


ONE_CHIP_STEP = """
import accelerator_steps as chip
steps = [chip.tpu("t0", "{records}", "{lock}")]
"""
