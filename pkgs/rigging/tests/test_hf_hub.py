"""Where the Hugging Face hub cache is and which Hub to ask, read from the hub's variables when asked;
what a Hub id looks like."""

from __future__ import annotations

import os

import pytest

from rigging.hf_hub import hub_cache_dir, hub_endpoint, hub_offline, is_hf_id


def test_hub_cache_prefers_hf_hub_cache_then_hf_home_then_xdg_then_home(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path) -> None:
    for name in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert hub_cache_dir() == os.path.join(str(tmp_path / "home"), ".cache", "huggingface", "hub")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache_dir() == os.path.join(str(tmp_path / "xdg"), "huggingface", "hub")
    monkeypatch.setenv("HF_HOME", "~/hf")  # read when called, with ~ expanded
    assert hub_cache_dir() == os.path.join(str(tmp_path / "home"), "hf", "hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert hub_cache_dir() == str(tmp_path / "cache")


@pytest.mark.parametrize(("value", "offline"), [("1", True), (" TRUE ", True), ("on", True), ("0", False), ("", False)])
def test_hub_offline_reads_hf_hub_offline(monkeypatch: pytest.MonkeyPatch, value: str, offline: bool) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert hub_offline() is offline


def test_hub_endpoint_reads_hf_endpoint_when_called(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert hub_endpoint() is None
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert hub_endpoint() == "http://127.0.0.1:9"


def test_an_hf_id_is_owner_slash_name_and_not_an_existing_path(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert is_hf_id("roneneldan/TinyStories") and is_hf_id("org/name.v2")
    assert not is_hf_id("name") and not is_hf_id("a/b/c") and not is_hf_id("/abs/path") and not is_hf_id("-x/y")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("{}\n")
    assert not is_hf_id("data/train.jsonl")
