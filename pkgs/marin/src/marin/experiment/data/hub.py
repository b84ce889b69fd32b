"""Hugging Face dataset ids through the hub cache (``huggingface_hub``), as researchers run offline.

``HF_HOME`` / ``HF_HUB_CACHE`` say where the cache is; with ``HF_HUB_OFFLINE=1`` (or when the Hub
cannot be reached) only the cache is read, in the hub's own layout
(``datasets--<org>--<name>/refs/main`` naming ``snapshots/<revision>/...``). Online, the same
call downloads the chosen files into that cache first.

From a dataset's files, the train split's Parquet, JSON-lines or text files are chosen (Parquet
first, then JSON lines, then text), and the validation split's files of the same format where
there are any, by the split names in the file paths, as the Hub names splits
(``data/train-00000-of-00004.parquet``, ``TinyStories-valid.txt``, ``train/part-0.jsonl``).
A dataset whose file names name no split is all train.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from marin.execution.core.identity import keep_identities
from rigging.hf_hub import hub_cache_dir, hub_offline

__all__ = [
    "HfDatasetFiles", "HfDatasetUnavailable", "Split", "resolve_hf_tokenizer", "choose_split_files", "hub_cache_dir", "hub_offline", "resolve_hf_dataset",
]


class Split(enum.Enum):
    TRAIN = "train"
    VALIDATION = "validation"
    TEST = "test"


# Split keywords as the Hub's data-file conventions spell them, delimited by separators or digits.
_SPLIT_WORDS = {
    Split.TRAIN: ("train", "training"),
    Split.VALIDATION: ("validation", "valid", "val", "dev"),
    Split.TEST: ("test", "testing", "eval", "evaluation"),
}
_SPLIT_PATTERNS = {
    split: re.compile(rf"(?:^|[/_.\- ])(?:{'|'.join(words)})(?=$|[/_.\- 0-9])", re.IGNORECASE)
    for split, words in _SPLIT_WORDS.items()
}


class _Format(enum.IntEnum):
    """Readable data formats, best first."""

    PARQUET = 0
    JSONL = 1
    TEXT = 2


_COMPRESSION = (".gz", ".zst", ".zstd")


def _format_of(path: str) -> _Format | None:
    name = path.lower()
    for suffix in _COMPRESSION:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if name.endswith(".parquet"):
        return _Format.PARQUET
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return _Format.JSONL
    if name.endswith(".txt"):
        return _Format.TEXT
    return None


def _split_of(path: str) -> Split | None:
    # The file name decides first (data/train-0.parquet), then its folders (train/part-0.jsonl).
    parts = path.split("/")
    for piece in (parts[-1], *reversed(parts[:-1])):
        for split, pattern in _SPLIT_PATTERNS.items():
            if pattern.search("/" + piece):
                return split
    return None


@dataclass(frozen=True)
class HfDatasetFiles:
    """The files chosen from a dataset (paths inside its snapshot, relative or absolute)."""

    train: tuple[str, ...]
    validation: tuple[str, ...] = ()


def choose_split_files(paths: Iterable[str]) -> HfDatasetFiles | None:
    """The train (and validation) files of the best format among ``paths``; None if there are none."""
    candidates = [(p, f) for p in sorted(paths) if (f := _format_of(p)) is not None and not p.startswith(".")]
    if not candidates:
        return None
    named = {p: _split_of(p) for p, _ in candidates}
    any_split = any(s is not None for s in named.values())
    train = [(p, f) for p, f in candidates if named[p] is Split.TRAIN or (not any_split)]
    if not train:
        return None
    best = min(f for _, f in train)
    return HfDatasetFiles(
        train=tuple(p for p, f in train if f is best),
        validation=tuple(p for p, f in candidates if f is best and named[p] is Split.VALIDATION),
    )


class HfDatasetUnavailable(ValueError):
    """A dataset id that is neither in the hub cache nor downloadable; the message says what to do."""


def resolve_hf_dataset(repo_id: str, *, online: bool, revision: str | None = None) -> HfDatasetFiles:
    """Local paths of the dataset's train (and validation) files, in the hub cache.

    Args:
        repo_id: ``org/name``.
        online: download what the cache lacks (False: read only the cache).
        revision: a branch, tag or commit (default ``main``).

    Raises:
        HfDatasetUnavailable: not cached (offline), not downloadable, or no readable train files;
            the message names the id, the cache folder looked in and what to do.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = hub_cache_dir()
    folder = os.path.join(cache, "datasets--" + repo_id.replace("/", "--"))
    allow: Sequence[str] | None = None
    if online:
        try:
            from huggingface_hub import HfApi

            files = HfApi().list_repo_files(repo_id, repo_type="dataset", revision=revision)
        except Exception as e:  # noqa: BLE001 - any failure of the Hub (httpx, HTTP, OS) is reported by name
            raise HfDatasetUnavailable(
                f"source {repo_id!r}: the Hugging Face Hub did not list the dataset ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}); check the id, or set HF_HUB_OFFLINE=1 to read "
                f"the hub cache {folder}") from None
        chosen = choose_split_files(files)
        if chosen is None:
            raise HfDatasetUnavailable(
                f"source {repo_id!r}: the dataset has no Parquet, JSON-lines or text files of a train split")
        allow = [*chosen.train, *chosen.validation]
    try:
        snapshot = snapshot_download(repo_id, repo_type="dataset", revision=revision, cache_dir=cache,
                                     local_files_only=not online, allow_patterns=allow)
    except LocalEntryNotFoundError:
        raise HfDatasetUnavailable(
            f"source {repo_id!r} is a Hugging Face dataset id that is not in the hub cache ({folder} has no "
            f"snapshot) and the Hub is not used (offline or HF_HUB_OFFLINE=1); download it where there is "
            f"network (`hf download {repo_id} --repo-type dataset` with the same HF_HOME) or point "
            "source= at a local folder of .parquet/.jsonl/.txt files") from None
    except Exception as e:  # noqa: BLE001 - a download that failed midway: name it, keep the cache as it is
        if not online:
            raise
        raise HfDatasetUnavailable(
            f"source {repo_id!r}: downloading into the hub cache {folder} failed ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}); try again, or set HF_HUB_OFFLINE=1 to use what is "
            "cached") from None
    relative = []
    for dirpath, _dirs, names in os.walk(snapshot, followlinks=True):
        for name in names:
            relative.append(os.path.relpath(os.path.join(dirpath, name), snapshot).replace(os.sep, "/"))
    chosen = choose_split_files(relative)
    if chosen is None:
        raise HfDatasetUnavailable(
            f"source {repo_id!r}: its snapshot {snapshot} holds no Parquet, JSON-lines or text files of a train split")
    missing = [p for p in (*chosen.train, *chosen.validation) if not os.path.exists(os.path.join(snapshot, p))]
    if missing:
        raise HfDatasetUnavailable(
            f"source {repo_id!r}: {missing[0]} in the hub cache snapshot {snapshot} points at a missing blob; "
            "download the dataset again")
    return HfDatasetFiles(train=tuple(os.path.join(snapshot, p) for p in chosen.train),
                          validation=tuple(os.path.join(snapshot, p) for p in chosen.validation))


def resolve_hf_tokenizer(repo_id: str, *, online: bool) -> str:
    """The local path of model ``repo_id``'s ``tokenizer.json`` in the hub cache (downloaded first when online).

    Raises:
        HfDatasetUnavailable: not cached (offline) or not downloadable; the message names the cache folder.
    """
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = hub_cache_dir()
    folder = os.path.join(cache, "models--" + repo_id.replace("/", "--"))
    try:
        return hf_hub_download(repo_id, "tokenizer.json", cache_dir=cache, local_files_only=not online)
    except LocalEntryNotFoundError:
        raise HfDatasetUnavailable(
            f"its tokenizer.json is not in the hub cache ({folder}) and the Hub is not used (offline or "
            f"HF_HUB_OFFLINE=1); download it where there is network (`hf download {repo_id} tokenizer.json` "
            "with the same HF_HOME)") from None
    except Exception as e:  # noqa: BLE001 - any failure of the Hub (httpx, HTTP, OS) is reported by name
        raise HfDatasetUnavailable(
            f"fetching its tokenizer.json into the hub cache {folder} failed ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''})") from None


# Moved from hf_hub.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.hf_hub")
