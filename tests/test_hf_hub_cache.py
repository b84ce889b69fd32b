"""Hugging Face dataset ids resolve through the hub cache offline (HF_HOME, HF_HUB_OFFLINE=1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from marin.experiment.data.hub import choose_split_files
from marin.experiment.data.sources import DataSourceError, resolve_source, resolve_tokenizer
from testsupport.hub_cache import jsonl_bytes, stories, tinystories_like, write_hub_dataset


def test_a_cached_dataset_resolves_to_its_train_parquet_files(hf_home: Path) -> None:
    snapshot = tinystories_like(hf_home)
    files = resolve_source("roneneldan/TinyStories")
    assert files == [str(snapshot / "data/train-00000-of-00002.parquet"),
                     str(snapshot / "data/train-00001-of-00002.parquet")]


def test_offline_without_a_cache_names_the_id_the_folder_and_what_to_do(hf_home: Path) -> None:
    with pytest.raises(DataSourceError) as info:
        resolve_source("someone/absent-dataset")
    message = str(info.value)
    assert "'someone/absent-dataset'" in message
    assert str(hf_home / "hub" / "datasets--someone--absent-dataset") in message
    assert "hf download someone/absent-dataset --repo-type dataset" in message
    assert "point source= at a local folder" in message and "\n" not in message


def test_a_snapshot_without_readable_files_is_named(hf_home: Path) -> None:
    write_hub_dataset(hf_home, "org/images", {"images.tar.gz": b"\0" * 10, "README.md": b"# x"})
    with pytest.raises(DataSourceError, match=r"'org/images': its snapshot .* holds no Parquet, JSON-lines or text"):
        resolve_source("org/images")


def test_jsonl_in_split_folders_and_files_without_split_names(hf_home: Path) -> None:
    snap = write_hub_dataset(hf_home, "org/folders", {
        "train/part-0.jsonl": jsonl_bytes(stories(3, 0)),
        "validation/part-0.jsonl": jsonl_bytes(stories(3, 1)),
    })
    assert resolve_source("org/folders") == [str(snap / "train/part-0.jsonl")]
    plain = write_hub_dataset(hf_home, "org/plain", {"a.txt": b"one\n", "b.txt": b"two\n"})
    assert resolve_source("org/plain") == [str(plain / "a.txt"), str(plain / "b.txt")]


@pytest.mark.parametrize(
    ("paths", "train", "validation"),
    [
        (["data/train-0.parquet", "data/validation-0.parquet", "x-train.txt"], ["data/train-0.parquet"],
         ["data/validation-0.parquet"]),
        (["TinyStories-train.txt", "TinyStories-valid.txt"], ["TinyStories-train.txt"], ["TinyStories-valid.txt"]),
        (["train.jsonl.gz", "dev.jsonl.gz", "test.jsonl.gz"], ["train.jsonl.gz"], ["dev.jsonl.gz"]),
        (["constraint.parquet", "retrain/x.txt"], ["constraint.parquet"], []),
    ],
)
def test_split_files_are_chosen_by_hub_naming(paths: list[str], train: list[str], validation: list[str]) -> None:
    chosen = choose_split_files(paths)
    assert chosen is not None
    assert list(chosen.train) == train and list(chosen.validation) == validation


def test_a_tokenizer_id_resolves_from_the_hub_cache_offline(hf_home: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models

    tokenizer = Tokenizer(models.WordLevel({"<unk>": 0, "<|endoftext|>": 1, "story": 2}, unk_token="<unk>"))
    snapshot = write_hub_dataset(hf_home, "org/tiny-tok", {"tokenizer.json": tokenizer.to_str().encode()},
                                 kind="models")
    path = resolve_tokenizer("org/tiny-tok", str(tmp_path))
    assert Path(path) == snapshot / "tokenizer.json"
    assert Tokenizer.from_file(path).token_to_id("story") == 2
    with pytest.raises(DataSourceError) as info:
        resolve_tokenizer("org/absent-tok", str(tmp_path))
    message = str(info.value)
    assert "tokenizer 'org/absent-tok' is a Hugging Face id" in message
    assert str(hf_home / "hub" / "models--org--absent-tok") in message and "\n" not in message


def test_a_dataset_with_a_validation_split_keeps_it_as_the_validation_split(hf_home: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    from marin.experiment.data.sources import resolve_corpus
    from marin.experiment.data.tokenize import tokenize_to_shards
    from testsupport.hub_cache import WORDS

    vocab = {"<unk>": 0, "<|endoftext|>": 1, **{w: i + 2 for i, w in enumerate(sorted({*WORDS, "Once", "upon", "a", "time"}))}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    tinystories_like(hf_home, n_train=300, n_validation=40)
    train, validation = resolve_corpus("roneneldan/TinyStories")
    assert len(train) == 2 and [Path(v).name for v in validation] == ["validation-00000-of-00001.parquet"]
    summary = tokenize_to_shards(train, str(tmp_path / "tokenizer.json"), str(tmp_path / "out"),
                                 validation_source=validation)
    # Every train document is train and every validation document validation, whatever their hashes.
    assert (summary["train_records"], summary["validation_records"]) == (300, 40)
    plain = tokenize_to_shards(train, str(tmp_path / "tokenizer.json"), str(tmp_path / "plain"),
                               validation_fraction=0.2)
    assert plain["validation_records"] > 0 and plain["train_records"] + plain["validation_records"] == 300
