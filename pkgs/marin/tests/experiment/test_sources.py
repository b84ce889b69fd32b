"""Where corpora and tokenizers come from, and the one-line errors when they cannot be used."""

from __future__ import annotations

from pathlib import Path

import pytest

from marin.experiment.data.sources import DataSourceError, is_hf_id, resolve_source, resolve_tokenizer
from rigging import filesystem as fs


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_a_hugging_face_dataset_id_offline_names_the_id_and_the_local_alternative(
        offline: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    with pytest.raises(DataSourceError) as info:
        resolve_source("roneneldan/TinyStories")
    message = str(info.value)
    assert "'roneneldan/TinyStories' is a Hugging Face dataset id that is not in the hub cache" in message
    assert str(tmp_path / "hf" / "hub" / "datasets--roneneldan--TinyStories") in message
    assert "point source= at a local folder" in message and "bundled_corpus()" in message
    assert "\n" not in message


def test_a_hugging_face_tokenizer_id_offline_names_the_id_and_the_alternatives(offline: None, tmp_path: Path) -> None:
    for spec in ("gpt2", "meta-llama/Llama-3.1-8B"):
        with pytest.raises(DataSourceError) as info:
            resolve_tokenizer(spec, str(tmp_path))
        message = str(info.value)
        assert f"tokenizer {spec!r} is a Hugging Face id" in message
        assert "a path to a tokenizer.json" in message and "trained_tokenizer(" in message
        assert "\n" not in message


def test_local_and_url_sources_resolve_and_missing_ones_are_named(tmp_path: Path, memory_prefix: str) -> None:
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    assert resolve_source(str(tmp_path)) == str(tmp_path)
    assert resolve_source(str(tmp_path / "*.jsonl")) == str(tmp_path / "*.jsonl")
    assert resolve_source(fs.join(memory_prefix, "corpus")) == fs.join(memory_prefix, "corpus")
    with pytest.raises(DataSourceError, match=r"source '.*/missing' does not exist"):
        resolve_source(str(tmp_path / "missing"))
    with pytest.raises(DataSourceError, match=r"source 'not a path' is neither an existing path, a URL, nor"):
        resolve_source("not a path")
    assert is_hf_id("roneneldan/TinyStories") and not is_hf_id(str(tmp_path))


def test_tokenizers_resolve_from_files_folders_and_urls(tmp_path: Path, memory_prefix: str) -> None:
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert resolve_tokenizer(str(folder), str(scratch)) == str(folder / "tokenizer.json")
    assert resolve_tokenizer(str(folder / "tokenizer.json"), str(scratch)) == str(folder / "tokenizer.json")
    fs.atomic_write(fs.join(memory_prefix, "tok/tokenizer.json"), b'{"remote": 1}')
    local = resolve_tokenizer(fs.join(memory_prefix, "tok"), str(scratch))
    assert Path(local).read_bytes() == b'{"remote": 1}' and local.startswith(str(scratch))
    with pytest.raises(DataSourceError, match=r"tokenizer 'memory://.*/nope': .*/nope/tokenizer.json does not exist"):
        resolve_tokenizer(fs.join(memory_prefix, "nope"), str(scratch))
    with pytest.raises(DataSourceError, match=r"tokenizer '.*/absent.json' does not exist \(expected a tokenizer.json"):
        resolve_tokenizer(str(tmp_path / "absent.json"), str(scratch))
