"""What the store's builds take on disk, from their manifests (no listing of their files), and
which of them are models.

A build's size is the sum of the sizes its manifest lists (``.marin/manifest.json``, written when
it finished): one small read per build, on ``gs://`` as locally. ``marin du`` sums sizes by name
prefix and by GC root; ``marin roots`` says what each root keeps alive; ``marin gc`` what it frees.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from marin.execution.store.done_index import read_index
from marin.execution.store.listings import in_parallel
from marin.execution.store.roots import GcRoot
from marin.execution.store.step_record import StepRecord
from marin.execution.store.store import StepStore

__all__ = ["CHECKPOINT_MARKER", "FINAL_PARAMS", "MODEL_FILE_NAMES", "BuildSize", "Usage", "build_size", "build_sizes",
           "disk_usage", "marks_a_model", "name_prefix"]

CHECKPOINT_MARKER = "_CHECKPOINT_METADATA"
"""The file Orbax writes into every checkpoint it commits: an output holding one is a trained model
(or a training run's state), which ``marin gc`` removes only when told to."""
FINAL_PARAMS = "final/params.npz"
"""A model's final parameters: an output holding them without checkpoints (a merge of checkpoints,
a folded LoRA run) is a model too."""
MODEL_FILE_NAMES = (CHECKPOINT_MARKER, FINAL_PARAMS.rpartition("/")[2])
"""The names of the files :func:`marks_a_model` may accept (a cheap first test on a listing)."""


def marks_a_model(path: str) -> bool:
    """Whether the file at ``path`` (relative to its output folder) makes the output a model."""
    return path.rpartition("/")[2] == CHECKPOINT_MARKER or path == FINAL_PARAMS


@dataclass(frozen=True)
class BuildSize:
    """The bytes and files of a finished build, and whether it holds a checkpoint (a model)."""

    bytes: int
    files: int
    model: bool


def build_size(record: StepRecord) -> BuildSize | None:
    """The size of the build whose records ``record`` reads, from its manifest; None without one."""
    files = record.read_manifest_files()
    if files is None:
        return None
    model = any(marks_a_model(path) for path, _size in files)
    return BuildSize(sum(size for _path, size in files), len(files), model)


def build_sizes(store: StepStore, outputs: Iterable[str]) -> dict[str, BuildSize]:
    """:func:`build_size` of each of ``outputs`` (output names) that has a manifest, read side by side."""
    names = sorted(set(outputs))
    sizes = in_parallel(lambda name: build_size(store.record(name)), names)
    return {name: size for name, size in zip(names, sizes, strict=True) if size is not None}


def name_prefix(output_name: str) -> str:
    """What ``marin du`` sums an output under: its first folder (``tokenized/``), or its name."""
    head, slash, _rest = output_name.partition("/")
    return head + slash if slash else output_name


@dataclass
class Usage:
    """``marin du``'s sums: bytes and outputs by name prefix and by root, and what no root reaches."""

    sizes: dict[str, BuildSize]
    by_prefix: dict[str, tuple[int, int]] = field(default_factory=dict)
    """``{name prefix: (bytes, outputs)}``."""
    by_root: dict[str, tuple[int, int]] = field(default_factory=dict)
    """``{root id: (bytes it keeps alive, outputs present)}``."""
    unrooted: tuple[int, int] = (0, 0)
    """Bytes and outputs of the counted builds no root reaches."""

    @property
    def total_bytes(self) -> int:
        return sum(s.bytes for s in self.sizes.values())


def _sum(sizes: Mapping[str, BuildSize], names: Iterable[str]) -> tuple[int, int]:
    found = [sizes[n].bytes for n in set(names) if n in sizes]
    return sum(found), len(found)


def disk_usage(store: StepStore, roots: Sequence[GcRoot], outputs: Iterable[str] | None = None) -> Usage:
    """Sizes of ``outputs`` (output names; None: every finished build the done index and the
    roots name) summed by name prefix and by root (each root over the outputs it names)."""
    rooted = {o for r in roots for o in r.outputs}
    wanted = set(read_index(store.prefix)) | rooted if outputs is None else set(outputs)
    every = build_sizes(store, wanted | rooted)
    sizes = {name: size for name, size in every.items() if name in wanted}
    usage = Usage(sizes)
    for name, size in sorted(sizes.items()):
        bytes_, count = usage.by_prefix.get(name_prefix(name), (0, 0))
        usage.by_prefix[name_prefix(name)] = (bytes_ + size.bytes, count + 1)
    for root in roots:
        usage.by_root[root.id] = _sum(every, root.outputs)
    usage.unrooted = _sum(sizes, (n for n in sizes if n not in rooted))
    return usage
