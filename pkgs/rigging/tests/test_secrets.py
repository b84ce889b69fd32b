"""``Secret``: never printed, pickled by name only, read from the environment when asked."""

from __future__ import annotations

import dataclasses
import json
import pickle
import subprocess
import sys

import pytest

from rigging.secrets import Secret, SecretNotFound

VALUE = "hunter2-s3cr3t-value"


@pytest.fixture
def api_key(monkeypatch) -> Secret:
    monkeypatch.setenv("RIGGING_TEST_API_KEY", VALUE)
    return Secret("RIGGING_TEST_API_KEY")


@pytest.mark.parametrize("explicit", [False, True], ids=["from-env", "explicit"])
def test_repr_and_str_never_show_the_value(api_key, explicit):
    secret = Secret("RIGGING_TEST_API_KEY", VALUE) if explicit else api_key
    assert secret.get() == VALUE
    for shown in (repr(secret), str(secret), f"{secret}", f"{secret!r}", format(secret, ""), repr([secret])):
        assert VALUE not in shown
        assert "RIGGING_TEST_API_KEY" in shown


def test_dataclass_walkers_see_the_name_only():
    secret = Secret("RIGGING_TEST_API_KEY", VALUE)

    @dataclasses.dataclass(frozen=True)
    class Config:
        token: Secret
        n: int = 1

    as_dict = dataclasses.asdict(Config(secret))
    assert VALUE not in json.dumps(as_dict)
    assert as_dict == {"token": {"name": "RIGGING_TEST_API_KEY"}, "n": 1}
    assert [f.name for f in dataclasses.fields(Secret)] == ["name"]
    assert VALUE not in repr(Config(secret))


def test_pickle_carries_only_the_name(api_key):
    explicit = Secret("RIGGING_TEST_API_KEY", VALUE)
    for secret in (api_key, explicit):
        blob = pickle.dumps(secret)
        assert VALUE.encode() not in blob
        back = pickle.loads(blob)
        assert back == secret and back.name == "RIGGING_TEST_API_KEY"


def test_a_worker_reads_its_own_environment(api_key):
    blob = pickle.dumps(Secret("RIGGING_TEST_API_KEY", "parent-only-value"))
    code = "import pickle, sys; print(pickle.loads(sys.stdin.buffer.read()).get())"
    out = subprocess.run(
        [sys.executable, "-c", code], input=blob, capture_output=True, check=True
    ).stdout.decode()
    assert out.strip() == VALUE  # the child's environment, never the parent's explicit value


def test_get_reads_the_environment_at_call_time(monkeypatch):
    secret = Secret("RIGGING_TEST_LATE")
    monkeypatch.delenv("RIGGING_TEST_LATE", raising=False)
    with pytest.raises(SecretNotFound):
        secret.get()
    monkeypatch.setenv("RIGGING_TEST_LATE", "now set")
    assert secret.get() == "now set"


def test_missing_variable_gives_a_clear_error(monkeypatch):
    monkeypatch.delenv("RIGGING_TEST_MISSING", raising=False)
    with pytest.raises(SecretNotFound) as info:
        Secret("RIGGING_TEST_MISSING").get()
    assert isinstance(info.value, KeyError)
    assert str(info.value) == "secret 'RIGGING_TEST_MISSING' is not set: export RIGGING_TEST_MISSING=..."


def test_identity_is_the_name():
    assert Secret("A", "x") == Secret("A", "y") == Secret("A")
    assert hash(Secret("A", "x")) == hash(Secret("A"))
    assert Secret("A") != Secret("B")
    with pytest.raises(dataclasses.FrozenInstanceError):
        Secret("A").name = "B"  # type: ignore[misc]


@pytest.mark.parametrize("bad", ["", None, 3])
def test_name_must_be_a_non_empty_string(bad):
    with pytest.raises(ValueError, match="non-empty string"):
        Secret(bad)  # type: ignore[arg-type]
