"""Tokenize a text corpus into train/validation ArrayRecord shards (the ``tokenized()`` step's work).

Output layout (the contract the training loader reads; see ``zephyr.shards`` for the index and
``zephyr.writers`` for the commit protocol)::

    <out>/train/part-00000.array_record …        one per shard, every shard index present
    <out>/validation/part-00000.array_record …
    <out>/tokenizer.json                         a copy of the tokenizer used
    <out>/index.json                             written last:
        {"format": "marin.tokenized/v1", "vocab_size": V, "eos_id": E, "counters": {...},
         "splits": {"train": {"records", "tokens", "shards": [{"path", "records", "tokens",
                                                               "bytes", "sha256"}]},
                    "validation": {...}}}

Each record is one document's token ids as little-endian uint32, with nothing appended (the
loader adds the end-of-sequence token ``eos_id``). A document goes to validation when a hash of
``(seed, its text)`` falls below ``validation_fraction``: the split does not depend on sharding,
and duplicate documents never straddle the two splits.

Shards run in parallel on a fray client; a rerun after a crash redoes only uncommitted shards,
and the same inputs give byte-identical shards and index.
"""

from __future__ import annotations

import array
import functools
import hashlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from marin.execution.core.identity import keep_identities
from rigging import filesystem as fs
from rigging.progress import ProgressWriter
from zephyr import (
    TOKENIZED_FORMAT,
    ArrayRecordSink,
    Counters,
    DataError,
    Dataset,
    FileSlice,
    OnError,
    Reader,
    RunResult,
    current_context,
    expand_paths,
    plan_file_shards,
    reader_for_path,
)

if TYPE_CHECKING:
    from fray import DistributedClient
    from marin.experiment.data.tokenize_parts import ShardParts

__all__ = ["TOKENIZED_FORMAT", "TokenizeConfig", "TokenizedSink", "assign_split", "split_totals", "tokenize_to_shards",
           "write_shards"]

# Below this much input, shards run in the calling process (about two seconds of tokenizing).
IN_PROCESS_BELOW_BYTES = 16 << 20
SPLITS = ("train", "validation")
_HASH_SCALE = float(1 << 64)
_BIG_ENDIAN = sys.byteorder == "big"


@dataclass(frozen=True)
class TokenizeConfig:
    """How a corpus is tokenized into shards.

    Attributes:
        validation_fraction: share of documents (by hash) that go to ``validation``, in [0, 1).
        sample_count: at most this many documents from each shard (None: all of them).
        num_shards: number of output shards per split (None: one per input file). More shards
            than files splits uncompressed line-based files by byte ranges.
        seed: seed of the train/validation assignment.
        batch_size: documents handed to the tokenizer at once.
        text_field: field or column holding the text in JSON-lines and Parquet input.
        on_error: ``raise`` on bad input, or ``skip`` it (counted in the index's counters).
        eos_token: the tokenizer's end-of-document token; its id is recorded as ``eos_id``.
        max_parallel: most shards tokenized at once (None: the machine's CPU count).
    """

    validation_fraction: float = 0.02
    sample_count: int | None = None
    num_shards: int | None = None
    seed: int = 0
    batch_size: int = 512
    text_field: str = "text"
    on_error: str = "raise"
    eos_token: str = "<|endoftext|>"
    max_parallel: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must be in [0, 1), got {self.validation_fraction}")
        if self.sample_count is not None and self.sample_count <= 0:
            raise ValueError(f"sample_count must be > 0 or None, got {self.sample_count}")
        if self.num_shards is not None and self.num_shards <= 0:
            raise ValueError(f"num_shards must be > 0, got {self.num_shards}")
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {self.batch_size}")
        if self.max_parallel is not None and self.max_parallel <= 0:
            raise ValueError(f"max_parallel must be > 0, got {self.max_parallel}")
        OnError.coerce(self.on_error)


def assign_split(text: str, seed: int, validation_fraction: float) -> str:
    """``"validation"`` or ``"train"`` for a document, from a hash of ``(seed, text)``."""
    if validation_fraction <= 0.0:
        return "train"
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=str(seed).encode()).digest()
    return "validation" if int.from_bytes(digest, "little") / _HASH_SCALE < validation_fraction else "train"


@dataclass(frozen=True)
class _EncodeBatch:
    """Worker-side: a batch of documents to ``(texts, encodings)``."""

    tokenizer_path: str

    @functools.cached_property
    def _tokenizer(self) -> Any:
        # Loaded once per worker process, on first use (never on the driver).
        from tokenizers import Tokenizer

        return Tokenizer.from_str(fs.read_text(self.tokenizer_path))

    def __call__(self, texts: list[str]) -> tuple[list[str], list[Any]]:
        # The same ids as encode_batch, without the character offsets that nothing here uses
        # (a quarter of encode_batch's time on the bundled corpus; see benchmarks/bench_tokenize).
        return texts, self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)


class _HeldOut(str):
    """A document of the corpus's own validation files: it goes to ``validation``, whatever its hash."""

    __slots__ = ()


@dataclass(frozen=True)
class _ValidationReader(Reader):
    """Reads a validation file with ``inner``, marking each document as held out."""

    inner: Reader

    @property
    def on_error(self) -> OnError:  # type: ignore[override]
        return self.inner.on_error

    def read(self, piece: FileSlice, counters: Counters | None = None) -> Any:
        for text in self.inner.read(piece, counters):
            yield _HeldOut(text)

    def splittable(self, path: str) -> bool:
        return self.inner.splittable(path)


@dataclass(frozen=True)
class _ToRecords:
    """Worker-side: encoded documents to ``(split, record bytes)`` pairs (format in zephyr.writers)."""

    seed: int
    validation_fraction: float
    own_validation: bool = False
    """The corpus brings its own validation files: their documents are validation, all others train."""

    def __call__(self, encoded: tuple[list[str], list[Any]]) -> list[tuple[str, bytes]]:
        texts, encodings = encoded
        out = []
        empty = 0
        own_validation = self.own_validation
        for text, encoding in zip(texts, encodings, strict=True):
            ids = array.array("I", encoding.ids)
            if not ids:
                empty += 1
                continue
            if _BIG_ENDIAN:
                ids.byteswap()
            if own_validation:
                split = "validation" if isinstance(text, _HeldOut) else "train"
            else:
                split = assign_split(text, self.seed, self.validation_fraction)
            out.append((split, ids.tobytes()))
        if empty:
            # A document with no tokens carries nothing to train on; it is counted, not hidden.
            current_context().increment("empty_documents", empty)
        return out


@dataclass(frozen=True)
class TokenizedSink(ArrayRecordSink):
    """The ArrayRecord sink that refuses to publish an index for an empty corpus."""

    source_description: str = ""

    def finalize(self, shard_records: list[dict[str, Any]], counters: Counters) -> dict[str, Any]:
        total = sum(info["records"] for r in shard_records for info in r["files"].values())
        if total == 0:
            skipped = counters.get("skipped_records", 0) + counters.get("skipped_files", 0)
            lossless = counters.get("conversations_without_loss", 0)
            extra = f" ({skipped} bad records or files were skipped)" if skipped else ""
            if lossless:
                extra += (f" ({lossless} conversations were dropped: no assistant token within max_seq_len; "
                          "raise max_seq_len)")
            too_long = counters.get("pairs_too_long", 0)
            if too_long:
                extra += f" ({too_long} preference pairs were dropped: a side longer than max_seq_len; raise max_seq_len)"
            raise DataError(self.source_description, "", f"empty corpus: no documents to tokenize{extra}")
        return super().finalize(shard_records, counters)


def _input_bytes(source: str | Sequence[str]) -> int:
    """Total size of the input files (expanded like the readers do); unknown sizes count as large."""
    from zephyr.readers import expand_paths

    try:
        return sum(fs.size(p) for p in expand_paths(source))
    except (OSError, ValueError, DataError):
        return IN_PROCESS_BELOW_BYTES


def write_shards(dataset: Dataset, sink: TokenizedSink, inputs: str | Sequence[str],
                 client: DistributedClient | None, *, max_parallel: int, env: dict[str, str] | None = None,
                 progress: Callable[[int, int], None] | None = None) -> RunResult:
    """Run ``dataset`` into ``sink``: in this process when the input files are small, else on ``client``.

    A small corpus tokenizes faster than worker processes start: then the tokenizer's own threads
    use the cores here. Only when no client was asked for: a given client is always used.

    ``max_parallel``, ``env`` and ``progress`` are as for ``zephyr.Dataset.write`` (``env`` only for
    workers).

    Args:
        inputs: the input files, globs or folders (sized to choose).
    """
    if client is None and _input_bytes(inputs) < IN_PROCESS_BELOW_BYTES:
        return dataset.write(sink, in_process=True, progress=progress)
    return dataset.write(sink, client=client, max_parallel=max_parallel, env=env, progress=progress)


def split_totals(index: dict[str, Any]) -> dict[str, int]:
    """``<split>_records`` and ``<split>_tokens`` of every split, from a tokenized index (0 where absent)."""
    splits = index.get("splits", {})
    return {
        **{f"{name}_records": splits.get(name, {}).get("records", 0) for name in SPLITS},
        **{f"{name}_tokens": splits.get(name, {}).get("tokens", 0) for name in SPLITS},
    }


def tokenize_to_shards(
    source: str | Sequence[str],
    tokenizer_path: str,
    output_path: str,
    *,
    validation_fraction: float = 0.02,
    sample_count: int | None = None,
    num_shards: int | None = None,
    seed: int = 0,
    client: DistributedClient | None = None,
    on_error: str = "raise",
    text_field: str = "text",
    batch_size: int = 512,
    eos_token: str = "<|endoftext|>",
    max_parallel: int | None = None,
    validation_source: Sequence[str] = (),
    parts: ShardParts | None = None,
) -> dict[str, Any]:
    """Tokenize ``source`` with the tokenizer at ``tokenizer_path`` into shards under ``output_path``.

    ``validation_fraction``, ``sample_count``, ``num_shards``, ``seed``, ``on_error``, ``text_field``,
    ``batch_size``, ``eos_token`` and ``max_parallel`` are those of :class:`TokenizeConfig`.

    Args:
        source: files, globs or folders (any fsspec URL) of text, JSON lines or Parquet.
        validation_source: the corpus's own validation files (a Hugging Face dataset's validation
            split): their documents form the validation split, and every document of ``source``
            is train (``validation_fraction`` is then not used).
        tokenizer_path: path or URL of a Hugging Face ``tokenizer.json``.
        output_path: the output folder (layout in the module docstring).
        client: fray client to run shards on (default: local processes).
        parts: the build's input files by fingerprint, when its shards are one per file: shards of
            unchanged files are copied from the earlier build it names, and the parts index is
            written (:mod:`marin.experiment.data.tokenize_parts`).

    Returns:
        A summary: ``index`` (what ``index.json`` holds), ``shards_written`` and
        ``shards_reused`` (indices), ``counters``, and per-split record and token totals.

    Raises:
        zephyr.DataError: missing or bad input (when ``on_error="raise"``), or an empty corpus.
        zephyr.ShardFailed: a shard failed on its worker (the message carries the cause).
    """
    config = TokenizeConfig(validation_fraction=validation_fraction, sample_count=sample_count,
                            num_shards=num_shards, seed=seed, batch_size=batch_size, text_field=text_field,
                            on_error=on_error, eos_token=eos_token, max_parallel=max_parallel)
    tokenizer_json, metadata = _read_tokenizer(tokenizer_path, config.eos_token)
    dataset = _documents(source, validation_source, config)
    dataset = _encoded(dataset, tokenizer_path, config, own_validation=bool(validation_source))
    sink = TokenizedSink(output_path=output_path, splits=SPLITS, format_name=TOKENIZED_FORMAT, metadata=metadata,
                         source_description=_describe(source, validation_source))
    # A copy of the tokenizer travels with the shards, so the output is self-describing.
    fs.atomic_write(fs.join(output_path, "tokenizer.json"), tokenizer_json)
    progress = _shard_progress(output_path, dataset.num_shards)
    parallel, env = _parallelism(config.max_parallel, dataset.num_shards)
    adopted = parts.adopt(dataset, sink) if parts is not None else 0
    result = write_shards(dataset, sink, _inputs(source, validation_source), client, max_parallel=parallel,
                          env=env, progress=progress)
    if parts is not None:
        parts.finish(dataset, sink, output_path, adopted)
    index = result.index or {}
    return {
        "output_path": output_path,
        "index": index,
        "shards_written": list(result.written),
        "shards_reused": list(result.reused),
        "counters": dict(result.counters),
        **split_totals(index),
    }


def _read_tokenizer(tokenizer_path: str, eos_token: str) -> tuple[bytes, dict[str, Any]]:
    """The tokenizer file's bytes, and what the index records of it: ``vocab_size`` and ``eos_id``."""
    from tokenizers import Tokenizer

    try:
        tokenizer_json = fs.read_bytes(tokenizer_path)
    except FileNotFoundError:
        raise DataError(tokenizer_path, "", "tokenizer file not found") from None
    tokenizer = Tokenizer.from_str(tokenizer_json.decode("utf-8"))
    eos_id = tokenizer.token_to_id(eos_token)
    if eos_id is None:
        raise ValueError(f"tokenizer {tokenizer_path} has no end-of-document token {eos_token!r}; "
                         "pass eos_token= the one it uses")
    return tokenizer_json, {"vocab_size": tokenizer.get_vocab_size(), "eos_id": eos_id}


def _inputs(source: str | Sequence[str], validation_source: Sequence[str]) -> list[str]:
    """Every input path, glob or folder: ``source``'s, then the validation files."""
    return [*([source] if isinstance(source, str) else source), *validation_source]


def _describe(source: str | Sequence[str], validation_source: Sequence[str]) -> str:
    """The input as an empty-corpus error names it."""
    return source if isinstance(source, str) else ", ".join([*source, *validation_source])


def _documents(source: str | Sequence[str], validation_source: Sequence[str], config: TokenizeConfig) -> Dataset:
    """The documents to tokenize, in shards; those of ``validation_source`` marked as held out."""
    if validation_source:
        held_out = set(expand_paths(list(validation_source)))
        files = expand_paths(_inputs(source, validation_source))
        readers: list[Reader] = []
        for f in files:
            reader = reader_for_path(f, text_field=config.text_field, on_error=config.on_error)
            readers.append(_ValidationReader(reader) if f in held_out else reader)
        dataset = Dataset(plan_file_shards(files, readers, config.num_shards))
    else:
        dataset = Dataset.from_files(source, num_shards=config.num_shards, text_field=config.text_field,
                                     on_error=config.on_error)
    if config.sample_count is not None:
        dataset = dataset.take_per_shard(config.sample_count)
    return dataset


def _encoded(dataset: Dataset, tokenizer_path: str, config: TokenizeConfig, *, own_validation: bool) -> Dataset:
    """``dataset``'s documents as ``(split, record bytes)`` pairs."""
    # Three stages on three threads, so that encoding (which releases the GIL) runs back to back:
    # reading and parsing the next batches, encoding this one, writing the one before. The stages
    # carry on across shard boundaries (zephyr's Dataset.run_shards), so a worker's next shard is
    # read and encoded while this one is committed.
    return (dataset.batch(config.batch_size)
            .prefetch(2)
            .map(_EncodeBatch(tokenizer_path))
            .prefetch(2)
            .flat_map(_ToRecords(config.seed, config.validation_fraction, own_validation)))


def _shard_progress(output_path: str, num_shards: int) -> Callable[[int, int], None]:
    """Reports shards done of all beside the output, for whoever watches the step (marin's runner display)."""
    reported = ProgressWriter(output_path, total=num_shards, unit="shard")

    def progress(done: int, total: int) -> None:
        reported.update(done)

    return progress


def _parallelism(max_parallel: int | None, num_shards: int) -> tuple[int, dict[str, str]]:
    """How many shards run at once, and the environment of their workers."""
    cpus = os.cpu_count() or 1
    parallel = min(max_parallel or cpus, num_shards)
    # Each worker's tokenizer gets its share of the cores; more threads would only contend.
    return parallel, {"RAYON_NUM_THREADS": str(max(1, cpus // parallel)), "TOKENIZERS_PARALLELISM": "true"}


# Moved from tokenize_impl.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.tokenize_impl")
