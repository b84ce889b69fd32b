"""StepRunner takes one RunSettings, made once from the configuration and keyword arguments that
override single settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import steps_for_tests as t

from marin.execution.core.step import Step
from marin.execution.run.runner import RunSettings, StepRunner
from rigging.config.discovery import Backend, MarinConfig, discover_config


def test_the_runner_reads_everything_from_the_one_config(tmp_path):
    config = MarinConfig(prefix=str(tmp_path / "p"), backend=Backend.RAY, max_parallel=3, ray_address="auto",
                         caches=(str(tmp_path / "c"),), strict_env=True)
    runner = StepRunner(config)
    s = runner.settings
    assert (s.prefix, s.max_parallel, s.backend, s.ray_address, s.caches,
            s.strict_env) == (str(tmp_path / "p"), 3, Backend.RAY, "auto", (str(tmp_path / "c"),), True)
    assert runner.store.prefix == str(tmp_path / "p")
    assert runner.settings == RunSettings.of(config)


def test_keywords_override_fields_and_are_recorded_as_overrides(tmp_path):
    config = MarinConfig(prefix=str(tmp_path / "p"), max_parallel=3)
    runner = StepRunner(config, prefix=str(tmp_path / "q"), max_parallel=1, backend="local")
    s = runner.settings
    assert (s.prefix, s.max_parallel, s.backend) == (str(tmp_path / "q"), 1, Backend.LOCAL)
    assert s.sources["prefix"] == "override" and config.prefix == str(tmp_path / "p")


def test_no_arguments_discovers_the_configuration(monkeypatch, tmp_path):
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "from-env"))
    monkeypatch.setenv("MARIN_MAX_PARALLEL", "2")
    runner = StepRunner()
    assert runner.settings == RunSettings.of(discover_config())
    assert (runner.settings.prefix, runner.settings.max_parallel) == (str(tmp_path / "from-env"), 2)


def test_bad_arguments_name_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="max_parallel must be >= 1, got 0"):
        StepRunner(prefix=str(tmp_path), max_parallel=0)
    with pytest.raises(ValueError, match="lease_ttl must be a positive number of seconds, got 0"):
        StepRunner(prefix=str(tmp_path), lease_ttl=0)
    with pytest.raises(TypeError, match="config must be a rigging MarinConfig, got str"):
        StepRunner(str(tmp_path))
    with pytest.raises(TypeError, match="unknown run settings: max_paralel"):
        StepRunner(prefix=str(tmp_path), max_paralel=2)
    with pytest.raises(ValueError, match="poll_interval must be a positive number of seconds, got 0"):
        StepRunner(prefix=str(tmp_path), poll_interval=0)
    with pytest.raises(TypeError, match="takes no settings keywords"):
        StepRunner(RunSettings(prefix=str(tmp_path)), dry_run=True)


def test_settings_are_handed_down_as_one_object(tmp_path):
    settings = RunSettings.of(MarinConfig(prefix=str(tmp_path / "p")), force=["a*"], dry_run=True, budget_s=5)
    assert (settings.force, settings.dry_run, settings.budget_s) == (("a*",), True, 5)
    runner = StepRunner(settings)
    assert runner.settings is settings and runner.backends.settings is settings
    assert runner._scheduling().settings is settings


@pytest.mark.parametrize("how", ["config", "keyword"])
def test_steps_run_under_a_lease_of_the_configured_length(tmp_path, how):
    step = Step("lease/left", t.lease_left, t.NodeConfig(label="lease.left"))
    config = MarinConfig(prefix=str(tmp_path / "p"), lease_ttl=7.0 if how == "config" else 60.0)
    # The step runs in this process: the lease is the runner's (a worker pool would cost more than the test).
    runner = StepRunner(config, lease_ttl=None if how == "config" else 7.0, max_parallel=1, client=t.InProcessClient())
    result = runner.run([step])
    assert result.ok, [s.error for s in result.steps]
    left = float((Path(result.steps[0].output_path) / "lease.txt").read_text())
    assert 0 < left <= 7.0  # the default (60 s) would leave more than 50
