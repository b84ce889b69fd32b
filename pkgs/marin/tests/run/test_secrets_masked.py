"""The values of the Secrets a step resolves never reach its log or the runner's output."""

from __future__ import annotations

import pytest
import steps_for_tests as t

from marin.execution.core.step import Step
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import StepRecord
from rigging import filesystem as fs
from rigging.secrets import Secret

VALUE = "tok-5ecr3t-value-9f1c"


@pytest.fixture(params=["local", "memory"])
def prefix_and_client(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "store"), None
    return request.getfixturevalue("memory_prefix"), t.InProcessClient()


@pytest.mark.parametrize("fail", [False, True])
def test_a_printed_secret_is_masked_in_the_log_and_the_outcome(prefix_and_client, monkeypatch, fail):
    monkeypatch.setenv("TEST_MASKED_TOKEN", VALUE)
    prefix, client = prefix_and_client
    config = t.NodeConfig(label="leak", token=Secret("TEST_MASKED_TOKEN"), fail=fail)
    step = Step(name="secret/leak", fn=t.leak_token, config=config)
    result = StepRunner(prefix=prefix, max_parallel=1, client=client, poll_interval=0.01).run([step])
    outcome = result.by_name("secret/leak")
    assert result.ok is not fail, outcome.error
    log = fs.read_text(StepRecord(outcome.output_path).log)
    assert "using token ***" in log, log
    assert VALUE not in log
    if fail:
        assert outcome.error == "RuntimeError: the server refused token ***", outcome.error
        assert VALUE not in (outcome.traceback or "") and "refused token ***" in (outcome.traceback or "")
        status = StepRecord(outcome.output_path).read_status()
        assert VALUE not in str(status.record)
