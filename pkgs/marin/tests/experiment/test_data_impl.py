"""The data functions behind ``tokenized()`` and ``trained_tokenizer()``: corpus, BPE, shards."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import grain.python as grain
import numpy as np
import pytest
from tokenizers import Tokenizer

from marin.experiment.data.corpus import DEFAULT_NUM_STORIES, CorpusConfig, generate_corpus, generate_story
from marin.experiment.data.tokenize import (
    IN_PROCESS_BELOW_BYTES,
    assign_split,
    tokenize_to_shards,
    write_shards,
)
from marin.experiment.data.tokenizer import train_bpe_tokenizer
from rigging import filesystem as fs
from zephyr import DataError, ShardFailed, TokenShardReader, read_documents, verify_shard_index

NUM_FILES = 6
SHARD_OPTIONS = {"validation_fraction": 0.1, "seed": 3}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("corpus"))
    generate_corpus(out, num_stories=900, seed=1, num_shards=NUM_FILES)
    return out


@pytest.fixture(scope="module")
def tokenizer_path(corpus: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    return train_bpe_tokenizer(corpus, str(tmp_path_factory.mktemp("tok")), vocab_size=600)


@pytest.fixture(scope="module")
def reference(corpus: str, tokenizer_path: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    """An uninterrupted local run: the result every other run must equal byte for byte."""
    out = str(tmp_path_factory.mktemp("reference") / "tokens")
    return out, tokenize_to_shards(corpus, tokenizer_path, out, **SHARD_OPTIONS)


def _payload(folder: str) -> dict[str, bytes]:
    """Every file of a tokenized output that the contract covers, by relative path."""
    return {rel: fs.read_bytes(fs.join(folder, rel)) for rel, _size in fs.walk_files(folder)
            if not rel.startswith((".commits/", ".marin/"))}


def _read_split(folder: str, index: dict, split: str) -> list[list[int]]:
    out: list[list[int]] = []
    for shard in index["splits"][split]["shards"]:
        with TokenShardReader(fs.join(folder, shard["path"])) as reader:
            out.extend(r.tolist() for r in reader)
    return out


# -- corpus ---------------------------------------------------------------------------------------

def test_corpus_is_deterministic_varied_and_large_enough(tmp_path: Path) -> None:
    start = time.monotonic()
    summary = generate_corpus(str(tmp_path / "a"), seed=7)
    elapsed = time.monotonic() - start
    assert summary["bytes"] >= 5_000_000 and summary["num_stories"] == DEFAULT_NUM_STORIES
    assert elapsed < 10
    generate_corpus(str(tmp_path / "b"), seed=7)
    assert _payload(str(tmp_path / "a")) == _payload(str(tmp_path / "b"))
    generate_corpus(str(tmp_path / "c"), seed=8)
    assert _payload(str(tmp_path / "a")) != _payload(str(tmp_path / "c"))
    stories = list(read_documents(str(tmp_path / "a")))
    assert len(stories) == DEFAULT_NUM_STORIES
    assert len(set(stories)) > 0.99 * len(stories)
    words = {w.strip('.,!?"\'').lower() for s in stories for w in s.split()}
    assert len(words) > 400
    assert sum('"' in s for s in stories) > 0.5 * len(stories)  # dialogue
    # A story does not depend on sharding.
    assert stories[123] == generate_story(7, 123)


def test_corpus_config_is_validated() -> None:
    with pytest.raises(ValueError, match="num_shards must be > 0, got 0"):
        CorpusConfig(num_stories=10, num_shards=0)
    with pytest.raises(ValueError, match="num_shards must be <= num_stories"):
        CorpusConfig(num_stories=2, num_shards=3)


# -- tokenizer training ---------------------------------------------------------------------------

def test_bpe_training_is_deterministic_and_round_trips(corpus: str, tokenizer_path: str, tmp_path: Path) -> None:
    again = train_bpe_tokenizer(corpus, str(tmp_path), vocab_size=600)
    assert Path(again).read_bytes() == Path(tokenizer_path).read_bytes()
    tok = Tokenizer.from_file(tokenizer_path)
    assert tok.token_to_id("<|endoftext|>") == 0
    assert 300 < tok.get_vocab_size() <= 600
    text = 'Once upon a time, Zoë met a "purple" 🦊!'
    assert tok.decode(tok.encode(text).ids) == text


def test_bpe_training_rejects_bad_settings_and_empty_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="special_tokens must include '<|endoftext|>'"):
        train_bpe_tokenizer(str(tmp_path), str(tmp_path), special_tokens=("<pad>",))
    with pytest.raises(ValueError, match="vocab_size must be >= 257"):
        train_bpe_tokenizer(str(tmp_path), str(tmp_path), vocab_size=100)
    (tmp_path / "blank.txt").write_text("\n\n\n")
    with pytest.raises(DataError, match="empty corpus"):
        train_bpe_tokenizer(str(tmp_path / "blank.txt"), str(tmp_path / "out"), vocab_size=300)


# -- tokenize -------------------------------------------------------------------------------------

def test_round_trip_through_grain_decodes_to_the_source(corpus: str, tokenizer_path: str,
                                                         reference: tuple[str, dict]) -> None:
    out, summary = reference
    index = json.loads(Path(out, "index.json").read_text())
    assert index == summary["index"] == verify_shard_index(out)
    assert index["format"] == "marin.tokenized/v1" and index["eos_id"] == 0
    assert Path(out, "tokenizer.json").read_bytes() == Path(tokenizer_path).read_bytes()
    tok = Tokenizer.from_file(tokenizer_path)
    assert index["vocab_size"] == tok.get_vocab_size()
    stories = list(read_documents(corpus))
    expected = {s: [d for d in stories if assign_split(d, 3, 0.1) == s] for s in ("train", "validation")}
    assert 30 < len(expected["validation"]) < 150
    for split, docs in expected.items():
        shards = index["splits"][split]["shards"]
        assert len(shards) == NUM_FILES
        source = grain.ArrayRecordDataSource([os.path.join(out, s["path"]) for s in shards])
        assert len(source) == len(docs) == index["splits"][split]["records"]
        decoded = [tok.decode(np.frombuffer(source[i], "<u4").tolist()) for i in range(len(source))]
        assert decoded == docs
        assert index["splits"][split]["tokens"] == sum(len(tok.encode(d).ids) for d in docs)
    assert summary["shards_written"] == list(range(NUM_FILES)) and summary["shards_reused"] == []


def test_same_inputs_give_byte_identical_shards_and_index(corpus: str, tokenizer_path: str,
                                                          reference: tuple[str, dict], tmp_path: Path) -> None:
    out = str(tmp_path / "again")
    tokenize_to_shards(corpus, tokenizer_path, out, **SHARD_OPTIONS)
    assert _payload(out) == _payload(reference[0])


def test_tokenize_reports_shards_done_beside_its_output(reference: tuple[str, dict]) -> None:
    from rigging.progress import read_progress

    progress = read_progress(reference[0])
    assert (progress.unit, progress.done, progress.total) == ("shard", NUM_FILES, NUM_FILES)


def test_sample_count_caps_each_shard(corpus: str, tokenizer_path: str, memory_prefix: str) -> None:
    out = fs.join(memory_prefix, "capped")
    summary = tokenize_to_shards(corpus, tokenizer_path, out, sample_count=25, num_shards=4, **SHARD_OPTIONS)
    index = summary["index"]
    per_shard = [sum(index["splits"][s]["shards"][i]["records"] for s in ("train", "validation"))
                 for i in range(4)]
    assert per_shard == [25, 25, 25, 25]
    stories = list(read_documents(corpus))
    tok = Tokenizer.from_file(tokenizer_path)
    train = [tok.decode(ids) for ids in _read_split(out, index, "train")]
    assert set(train) <= set(stories) and len(train) == summary["train_records"]


def _stamp(path: str) -> object:
    """What changes when a file is written again: inode and mtime locally, the object's generation on GCS."""
    if fs.is_local(path):
        st = os.stat(path)
        return st.st_ino, st.st_mtime_ns
    return fs.filesystem(path).info(path)["generation"]


@pytest.mark.parametrize("store", ["local", "gcs"])
def test_killed_run_resumes_with_only_the_missing_shards(store: str, corpus: str, tokenizer_path: str,
                                                         reference: tuple[str, dict], tmp_path: Path,
                                                         request: pytest.FixtureRequest) -> None:
    if store == "local":
        root, source, tokenizer = str(tmp_path), corpus, tokenizer_path
    else:  # everything on the emulator: input, tokenizer and output
        root = request.getfixturevalue("gcs_bucket")
        for rel, _size in fs.walk_files(corpus):
            fs.atomic_write(fs.join(root, "corpus", rel), fs.read_bytes(fs.join(corpus, rel)))
        fs.atomic_write(fs.join(root, "tok/tokenizer.json"), fs.read_bytes(tokenizer_path))
        source, tokenizer = fs.join(root, "corpus"), fs.join(root, "tok/tokenizer.json")
    out = fs.join(root, "killed")
    script = (
        "import sys; from marin.experiment.data.tokenize import tokenize_to_shards; "
        "tokenize_to_shards(sys.argv[1], sys.argv[2], sys.argv[3], validation_fraction=0.1, seed=3, "
        "max_parallel=1)"
    )
    # The child inherits STORAGE_EMULATOR_HOST from the emulator fixture.
    proc = subprocess.Popen([sys.executable, "-c", script, source, tokenizer, out], start_new_session=True)
    commits = fs.join(out, ".commits")
    deadline = time.monotonic() + 120
    while len(fs.glob(fs.join(commits, "part-*.json"))) < 2:
        assert proc.poll() is None, "the run finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(1.5)  # an orphaned worker notices its parent is gone within 0.5 s and exits
    assert not fs.exists(fs.join(out, "index.json"))
    committed = sorted(int(name.split("-")[1].split(".")[0]) for name in fs.listdir(commits)
                       if name.startswith("part-"))
    assert 2 <= len(committed) < NUM_FILES
    stamps = {path: _stamp(path) for split in ("train", "validation")
              for path in (fs.join(out, split, f"part-{i:05d}.array_record") for i in committed)}

    summary = tokenize_to_shards(source, tokenizer, out, **SHARD_OPTIONS)
    assert summary["shards_reused"] == committed
    assert summary["shards_written"] == [i for i in range(NUM_FILES) if i not in committed]
    for path, stamp in stamps.items():
        assert _stamp(path) == stamp, f"{path} was rewritten"
    assert not [rel for rel, _size in fs.walk_files(out) if rel.rsplit("/", 1)[-1].startswith(".tmp-")]
    assert _payload(out) == _payload(reference[0])


def test_failed_shard_is_the_only_one_redone(corpus: str, tokenizer_path: str, reference: tuple[str, dict],
                                             tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(corpus, src)
    victim = src / "stories-00003.jsonl"
    good = victim.read_bytes()
    victim.write_bytes(good + b'{"no_text": true}\n')
    out = str(tmp_path / "out")
    with pytest.raises(ShardFailed, match=r"shard 3 of 6 failed: DataError: .*stories-00003\.jsonl: line \d+: no 'text'"):
        tokenize_to_shards(str(src), tokenizer_path, out, max_parallel=1, **SHARD_OPTIONS)
    victim.write_bytes(good)
    summary = tokenize_to_shards(str(src), tokenizer_path, out, max_parallel=1, **SHARD_OPTIONS)
    assert summary["shards_reused"] == [0, 1, 2]
    assert summary["shards_written"] == [3, 4, 5]
    assert _payload(out) == _payload(reference[0])


def test_tokenize_on_memory_and_gcs_matches_local(corpus: str, tokenizer_path: str, reference: tuple[str, dict],
                                                  memory_prefix: str, gcs_bucket: str) -> None:
    local_index = reference[1]["index"]
    tok = Tokenizer.from_file(tokenizer_path)
    expected = [tok.decode(ids) for ids in _read_split(reference[0], local_index, "validation")]
    for root in (memory_prefix, gcs_bucket):
        for rel, _size in fs.walk_files(corpus):
            fs.atomic_write(fs.join(root, "corpus", rel), fs.read_bytes(fs.join(corpus, rel)))
        fs.atomic_write(fs.join(root, "tok/tokenizer.json"), fs.read_bytes(tokenizer_path))
        out = fs.join(root, "tokens")
        summary = tokenize_to_shards(fs.join(root, "corpus"), fs.join(root, "tok/tokenizer.json"), out,
                                     max_parallel=2, **SHARD_OPTIONS)
        assert summary["index"] == local_index, root
        assert json.loads(fs.read_text(fs.join(out, "index.json"))) == local_index
        assert [tok.decode(ids) for ids in _read_split(out, summary["index"], "validation")] == expected
        assert tokenize_to_shards(fs.join(root, "corpus"), fs.join(root, "tok/tokenizer.json"), out,
                                  **SHARD_OPTIONS)["shards_reused"] == list(range(NUM_FILES))


# -- bad input ------------------------------------------------------------------------------------

def test_bad_inputs_fail_with_file_and_line(tokenizer_path: str, memory_prefix: str, tmp_path: Path) -> None:
    out = fs.join(memory_prefix, "out")
    with pytest.raises(DataError, match=r"missing\.jsonl: file not found"):
        tokenize_to_shards(str(tmp_path / "missing.jsonl"), tokenizer_path, out)
    with pytest.raises(DataError, match=r"nope\.json: tokenizer file not found"):
        tokenize_to_shards(str(tmp_path), str(tmp_path / "nope.json"), out)
    (tmp_path / "blank.txt").write_text("\n  \n\n")
    with pytest.raises(DataError, match="empty corpus: no documents to tokenize"):
        tokenize_to_shards(str(tmp_path / "blank.txt"), tokenizer_path, out)
    assert not fs.exists(fs.join(out, "index.json"))
    (tmp_path / "bytes.txt").write_bytes(b"good line\nbad \xc3\x28 line\n")
    with pytest.raises(ShardFailed, match=r"bytes\.txt: line 2: not valid UTF-8"):
        tokenize_to_shards(str(tmp_path / "bytes.txt"), tokenizer_path, str(tmp_path / "out"))
    (tmp_path / "cut.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(ShardFailed, match=r"cut\.jsonl\.gz: line 1: corrupt gzip stream"):
        tokenize_to_shards(str(tmp_path / "cut.jsonl.gz"), tokenizer_path, out)
    with pytest.raises(ValueError, match="validation_fraction must be in \\[0, 1\\), got 1.5"):
        tokenize_to_shards(str(tmp_path), tokenizer_path, out, validation_fraction=1.5)
    with pytest.raises(ValueError, match="num_shards must be > 0, got 0"):
        tokenize_to_shards(str(tmp_path), tokenizer_path, out, num_shards=0)


def test_skip_mode_counts_bad_records_in_summary_and_index(tokenizer_path: str, memory_prefix: str) -> None:
    src = fs.join(memory_prefix, "src.jsonl")
    fs.atomic_write(src, b'{"text": "one story"}\n{"title": "x"}\nnot json\n{"text": "two \xff"}\n'
                         b'{"text": "three"}\n')
    out = fs.join(memory_prefix, "out")
    summary = tokenize_to_shards(src, tokenizer_path, out, on_error="skip", validation_fraction=0.0)
    assert summary["counters"] == {"skipped_records": 3}
    assert summary["train_records"] == 2
    assert json.loads(fs.read_text(fs.join(out, "index.json")))["counters"] == {"skipped_records": 3}


def test_truncated_output_shard_names_the_file(reference: tuple[str, dict], tmp_path: Path) -> None:
    shard = Path(reference[0], "train/part-00002.array_record")
    cut = tmp_path / "part-00002.array_record"
    cut.write_bytes(shard.read_bytes()[: shard.stat().st_size - 1000])
    with pytest.raises(DataError, match=r"part-00002\.array_record: truncated or corrupt ArrayRecord shard"):
        TokenShardReader(str(cut))


def test_shards_run_in_process_only_for_small_input_and_no_client(tmp_path: Path) -> None:
    class _Recorder:
        """Stands in for a Dataset: records how it was asked to write."""

        def __init__(self) -> None:
            self.calls: list[dict] = []

        def write(self, sink, **kwargs):
            self.calls.append(kwargs)

    small, big = tmp_path / "small.txt", tmp_path / "big.txt"
    small.write_text("a story\n")
    with open(big, "wb") as f:
        f.truncate(IN_PROCESS_BELOW_BYTES)
    client, env = object(), {"RAYON_NUM_THREADS": "1"}
    runs = []
    for inputs, given in ((str(small), None), (str(big), None), ([str(small)], client)):
        dataset = _Recorder()
        write_shards(dataset, None, inputs, given, max_parallel=3, env=env)  # type: ignore[arg-type]
        runs.append(dataset.calls)
    assert runs[0] == [{"in_process": True, "progress": None}]
    assert runs[1] == [{"client": None, "max_parallel": 3, "env": env, "progress": None}]
    assert runs[2] == [{"client": client, "max_parallel": 3, "env": env, "progress": None}]
