"""A tokenize step made file by file: one shard per input file, reused from an earlier build when
the file's content is unchanged.

With one shard per input file (``num_shards=None``) every shard is a function of one file's
content and the recipe (tokenizer, seed, validation fraction, sample count), never of the other
files. So a build over a changed file set need not tokenize an unchanged file again: its shard is
copied from an earlier build of the same recipe (the plan names it:
:class:`marin.processing.incremental.IncrementalStart`) and committed under the position the file
has now (:meth:`zephyr.file_sink.FileSink.adopt_shard`), and zephyr's resume skips it as committed.
The shards, their commit records and the index come out byte-identical to a build from scratch.

Which shard each file became, and the file's fingerprint, are kept in the output's parts index
(:data:`marin.processing.per_file.PARTS_FILE`, one part per file, its ``shard`` in its stats), as
for every step made file by file. Shards cut by byte ranges (``num_shards``), a corpus with its own
validation files and a Hugging Face dataset (whose files have no fingerprint) are always tokenized
whole: no index is written, so no later build reuses them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from marin.execution.run.worker import current_step
from marin.experiment.data.sources import is_hf_id
from marin.processing.attributes import source_entries
from marin.processing.per_file import InputFile, Part, PartOutput, input_files, read_parts, write_parts
from zephyr import Dataset, FileShard
from zephyr.file_sink import FileSink

__all__ = ["ShardParts", "shard_parts"]


def shard_parts(source: str | Sequence[str], num_shards: int | None, validation_source: Sequence[str]) -> ShardParts | None:
    """The per-file bookkeeping of a tokenize build, or None where its shards are not one per file."""
    entries = [source] if isinstance(source, str) else list(source)
    if num_shards is not None or validation_source or any(is_hf_id(e) for e in source_entries(entries)):
        return None
    running = current_step()
    start = running.start if running is not None else None
    return ShardParts(input_files(entries, ("",)), start.reuse_parts if start is not None else None)


def _single_file(shard: Any) -> str | None:
    """The file a shard reads whole, or None (a byte range, several files, no file)."""
    if not isinstance(shard, FileShard) or len(shard.pieces) != 1:
        return None
    piece = shard.pieces[0][1]
    return piece.path if piece.start == 0 and piece.end is None else None


@dataclass
class ShardParts:
    """The input files of a tokenize build, and the earlier build whose shards it may reuse."""

    files: list[InputFile]
    earlier: str | None
    """The files folder of an earlier build of the same recipe (the plan's ``reuse_parts``)."""

    def _by_path(self) -> dict[str, InputFile]:
        return {f.path: f for f in self.files}

    def adopt(self, dataset: Dataset, sink: FileSink) -> int:
        """Commit every shard whose file is unchanged since :attr:`earlier` as a copy of that
        build's shard; returns how many it adopted."""
        old = {p.name: p for p in (read_parts(self.earlier) or ())} if self.earlier else {}
        if not old:
            return 0
        by_path, total, adopted = self._by_path(), dataset.num_shards, 0
        for i, shard in enumerate(dataset.shards):
            f = by_path.get(_single_file(shard) or "")
            part = old.get(f.name) if f is not None and f.fingerprint is not None else None
            if part is None or f is None or part.fingerprint != f.fingerprint or "shard" not in part.stats:
                continue
            inputs = shard.describe()
            if sink.committed(i, total, inputs) is None:
                adopted += sink.adopt_shard(self.earlier or "", int(part.stats["shard"]), i, total, inputs)
            else:
                adopted += 1  # committed by an earlier attempt of this build (adopted or written)
        return adopted

    def finish(self, dataset: Dataset, sink: FileSink, output_path: str, adopted: int) -> None:
        """Write the parts index (file, fingerprint, shard) and report what was reused."""
        by_path = self._by_path()
        parts = []
        for i, shard in enumerate(dataset.shards):
            f = by_path.get(_single_file(shard) or "")
            if f is None:
                return  # a shard that is not one whole file: nothing here is reusable later
            files = tuple(sink.shard_path(split, i) for split in sink.splits)
            parts.append(Part(f.name, f.fingerprint, PartOutput(files, {"shard": i})))
        write_parts(output_path, parts)
        running = current_step()
        if self.earlier and running is not None:
            running.report_incremental(adopted, len(parts) - adopted)
