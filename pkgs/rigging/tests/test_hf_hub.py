"""Where the Hugging Face hub cache is, read from the hub's variables when asked."""

from __future__ import annotations

import os

import pytest

from rigging.hf_hub import hub_cache_dir, hub_offline


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
