import os

import pytest

from rigging.environ import updated_environ


def test_variables_are_set_inside_and_put_back_after(monkeypatch):
    monkeypatch.setenv("RIGGING_ENV_OLD", "before")
    monkeypatch.delenv("RIGGING_ENV_NEW", raising=False)
    with updated_environ({"RIGGING_ENV_OLD": "during", "RIGGING_ENV_NEW": "added"}):
        assert os.environ["RIGGING_ENV_OLD"] == "during"
        assert os.environ["RIGGING_ENV_NEW"] == "added"
    assert os.environ["RIGGING_ENV_OLD"] == "before"
    assert "RIGGING_ENV_NEW" not in os.environ


def test_variables_are_put_back_when_the_block_raises(monkeypatch):
    monkeypatch.setenv("RIGGING_ENV_OLD", "before")
    with pytest.raises(RuntimeError), updated_environ({"RIGGING_ENV_OLD": "during"}):
        raise RuntimeError("boom")
    assert os.environ["RIGGING_ENV_OLD"] == "before"


def test_other_variables_are_left_alone(monkeypatch):
    monkeypatch.delenv("RIGGING_ENV_OTHER", raising=False)
    with updated_environ(None):
        os.environ["RIGGING_ENV_OTHER"] = "set by the block"
    assert os.environ.pop("RIGGING_ENV_OTHER") == "set by the block"
