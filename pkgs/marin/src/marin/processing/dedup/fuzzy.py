"""Near-duplicate documents: MinHash LSH candidates, each verified by its real Jaccard similarity.

Stages (each grouping goes through one :data:`~marin.processing.dedup.grouping.GroupBy`):

1. map: every document's shingle set (:func:`~marin.processing.dedup.minhash.shingle_set`).
   Documents with identical shingle sets (keyed by the xxh3-128 of the set) are grouped first
   (Jaccard 1 by definition) and only the first of each enters LSH, so thousands of copies never
   make thousands squared pairs.
2. band keys: the signature of each remaining document, cut into bands, one key per band.
3. group by band key: every pair of documents sharing a key is a candidate; pairs found in
   several bands are grouped again so each is counted and verified once.
4. verify: a candidate pair becomes an edge only when the Jaccard similarity of the two shingle
   sets is ``>= threshold``; rejected pairs (templated pages sharing boilerplate, unlucky band
   collisions) never join a cluster.
5. union-find over the edges; a cluster's representative is the document its ``keep`` rule
   chooses (:mod:`marin.processing.dedup.keep`; by default the first in the corpus's total order:
   shard, line). It terminates by construction and gives one answer whatever the order of edges.

Sidecar attributes: ``{"duplicate": bool, "cluster": <hex>|None, "representative": <id>,
"jaccard": <real Jaccard to the representative>|None}``. ``cluster`` is the xxh3-64 of the
representative's shingle set (the same for every member, stable under resharding); a document
without words has ``cluster`` None and is never a duplicate. ``jaccard`` is computed against the
representative directly, so it can fall below the threshold for a document that joined through a
chain of verified pairs (counted as ``below_threshold_to_representative``).
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

from marin.execution.core.traits import StepTraits, step_function
from marin.processing.attributes import DOCUMENT_SUFFIXES, Shard, iter_corpus, write_sidecar, write_summary
from marin.processing.dedup.grouping import GroupBy, Grouping, default_group_by, step_group_by
from marin.processing.dedup.keep import Keep, KeepRule, check_keep, choose, keep_value
from marin.processing.dedup.minhash import MinHasher, jaccard, optimal_bands, shingle_set
from marin.processing.dedup.unionfind import UnionFind
from marin.processing.incremental import IncrementalStart
from marin.processing.per_file import InputFile, Part, PartOutput, input_files, map_files
from rigging import filesystem as fs
from rigging.fields import added_field, unhashed_field

__all__ = ["FuzzyDedupConfig", "FuzzyResult", "fuzzy_dedup", "fuzzy_dedup_step", "ShardSets", "signature_part"]

_MAX_EXAMPLES = 5
_SIGNATURES = "_minhash"
"""The folder of the per-file band keys (the leading ``_`` keeps folder readers off it)."""


@dataclass(frozen=True)
class FuzzyDedupConfig:
    """Near-duplicate documents by MinHash LSH with verified Jaccard similarity."""

    input: Any
    """Documents: a folder, glob or list of JSON-lines shards, or a step/handle output."""
    threshold: float = 0.8
    """Documents are near-duplicates when the Jaccard similarity of their shingle sets is >= this."""
    ngram: int = 5
    """Words per shingle."""
    num_perm: int = 128
    """MinHash permutations (signature length)."""
    seed: int = 0
    """Seed of the permutations."""
    false_negative_weight: float = 0.9
    """Weight of missed pairs against candidate pairs below the threshold when choosing bands x
    rows (every candidate is verified, so a false positive costs one Jaccard computation while a
    false negative loses a duplicate: recall is weighted up)."""
    bands: int | None = None
    """Override the derived number of bands (with ``rows``)."""
    rows: int | None = None
    """Override the derived rows per band (with ``bands``)."""
    grouping: Grouping = unhashed_field(default=Grouping.IN_PROCESS)
    """Where records are grouped by key (the same attributes either way)."""
    keep: KeepRule = added_field(default=Keep.FIRST)
    """Which document of a cluster is its representative, the one not marked duplicate
    (:mod:`marin.processing.dedup.keep`): the first in the corpus's order by default."""

    def __post_init__(self) -> None:
        check_keep(self.keep)
        if not 0 < self.threshold < 1:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
        if self.ngram < 1:
            raise ValueError(f"ngram must be >= 1, got {self.ngram}")
        if self.num_perm < 1:
            raise ValueError(f"num_perm must be >= 1, got {self.num_perm}")
        if not 0 <= self.false_negative_weight <= 1:
            raise ValueError(f"false_negative_weight must be in [0, 1], got {self.false_negative_weight}")
        if (self.bands is None) != (self.rows is None):
            raise ValueError(f"bands and rows go together, got bands={self.bands}, rows={self.rows}")
        if self.bands is not None and self.rows is not None:
            if self.bands < 1 or self.rows < 1 or self.bands * self.rows > self.num_perm:
                raise ValueError(f"bands * rows must be <= num_perm ({self.num_perm}) and both >= 1, "
                                 f"got {self.bands} * {self.rows}")

    def hasher(self) -> MinHasher:
        """The MinHasher these settings describe (bands x rows derived from the threshold)."""
        if self.bands is not None and self.rows is not None:
            bands, rows = self.bands, self.rows
        else:
            bands, rows = optimal_bands(self.threshold, self.num_perm, self.false_negative_weight)
        return MinHasher(num_perm=self.num_perm, bands=bands, rows=rows, seed=self.seed)


@dataclass
class FuzzyResult:
    """Per-shard ids and attributes, and the counts of every stage."""

    ids: list[list[Any]]
    attributes: list[list[dict[str, Any]]]
    stats: dict[str, Any]


def _first(record: tuple[Any, int]) -> Any:
    return record[0]


def _identical_reducer(_key: str, members: Iterable[tuple[str, int]]) -> Iterator[tuple[int, int]]:
    """(first member, member) for every member of a set of identical shingle sets."""
    order = sorted(m[1] for m in members)
    yield from ((order[0], other) for other in order)


def _bucket_reducer(_key: int, members: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Every pair of documents sharing one band key."""
    order = sorted({m[1] for m in members})
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            yield a, b


def _pair_key(pair: tuple[int, int]) -> tuple[int, int]:
    return pair


def _one_pair(pair: tuple[int, int], _members: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    yield pair


@dataclass
class ShardSets:
    """The ids and shingle sets of one shard's documents, in order, and what the ``keep`` rule
    they were read for says of each (None for :attr:`Keep.FIRST`)."""

    ids: list[Any]
    sets: list[np.ndarray]
    keep_values: list[Any] | None = None

    @classmethod
    def read(cls, shard: Shard, ngram: int, keep: KeepRule = Keep.FIRST) -> ShardSets:
        docs = [doc for _index, doc in iter_corpus([shard])]
        return cls([doc["id"] for doc in docs], [shingle_set(doc["text"], ngram) for doc in docs],
                   None if keep is Keep.FIRST else [keep_value(keep, doc) for doc in docs])


def _read_all(shards: list[Shard], config: FuzzyDedupConfig, known: Mapping[int, ShardSets]
              ) -> tuple[list[list[Any]], list[tuple[int, int]], list[np.ndarray], list[Any] | None]:
    """Every shard's ids, where each document is (shard, line), and every document's shingle set
    and ``keep`` value (None for :attr:`Keep.FIRST`); the shards of ``known`` are not read again."""
    ids: list[list[Any]] = []
    where: list[tuple[int, int]] = []
    sets: list[np.ndarray] = []
    values: list[Any] | None = None if config.keep is Keep.FIRST else []
    for index, shard in enumerate(shards):
        read = known.get(index) or ShardSets.read(shard, config.ngram, config.keep)
        ids.append(read.ids)
        where.extend((index, line) for line in range(len(read.ids)))
        sets.extend(read.sets)
        if values is not None:
            assert read.keep_values is not None, f"shard {index} was read for keep={Keep.FIRST.value!r}"
            values.extend(read.keep_values)
    return ids, where, sets, values


def fuzzy_dedup(shards: list[Shard], config: FuzzyDedupConfig, group_by: GroupBy = default_group_by,
                band_keys: Sequence[np.ndarray] | None = None,
                known: Mapping[int, ShardSets] | None = None) -> FuzzyResult:
    """Near-duplicate attributes of every document of ``shards`` (see the module docstring).

    ``band_keys``: each shard's band keys, made beforehand by :func:`signature_part` (then no
    signature is computed here); None computes them. ``known``: the shards (by index) whose
    documents were read and shingled already (for ``config.keep``).
    """
    started = time.perf_counter()
    ids, where, sets, values = _read_all(shards, config, known or {})
    n = len(sets)
    timings = {"shingles_s": time.perf_counter() - started}

    # 1. identical shingle sets collapse before LSH.
    keyed = [(xxhash.xxh3_128_hexdigest(sets[g].tobytes()), g) for g in range(n) if sets[g].size]
    first_of: dict[int, int] = {}
    for head, member in group_by(keyed, _first, _identical_reducer):
        first_of[member] = head
    uf = UnionFind(n)
    identical = sum(uf.union(head, member) for member, head in first_of.items() if head != member)

    # 2-3. band keys of the heads, grouped into candidate pairs.
    t = time.perf_counter()
    hasher = config.hasher()
    if band_keys is None:
        band_records = [(key, g) for g, head in sorted(first_of.items()) if g == head
                        for key in hasher.band_keys(hasher.signature(sets[g]))]
    else:
        band_records = [(int(key), g) for g, head in sorted(first_of.items()) if g == head
                        for key in band_keys[where[g][0]][where[g][1]]]
    timings["signatures_s"] = time.perf_counter() - t
    t = time.perf_counter()
    bucket_pairs = group_by(band_records, _first, _bucket_reducer)
    candidates = list(group_by(bucket_pairs, _pair_key, _one_pair))
    largest_bucket = max(_bucket_sizes(band_records), default=0)
    timings["candidates_s"] = time.perf_counter() - t

    # 4. verification by real Jaccard similarity.
    t = time.perf_counter()
    edges = [(a, b) for a, b in candidates if jaccard(sets[a], sets[b]) >= config.threshold]
    timings["verify_s"] = time.perf_counter() - t

    # 5. clusters.
    uf.union_all(edges)
    roots = uf.roots()
    kept = _representatives(roots, values)
    attributes: list[list[dict[str, Any]]] = [[{}] * len(shard_ids) for shard_ids in ids]
    below = 0
    for g, root in enumerate(roots):
        index, line = where[g]
        attributes[index][line] = attrs = _attributes_of(g, kept[root], ids, where, sets)
        below += attrs["jaccard"] is not None and attrs["jaccard"] < config.threshold
    members: dict[int, int] = {}
    for root in roots:
        members[root] = members.get(root, 0) + 1
    stats = {
        "documents": n, "duplicates": sum(1 for g, r in enumerate(roots) if kept[r] != g),
        "clusters": sum(1 for count in members.values() if count > 1),
        "largest_cluster": max(members.values(), default=0),
        "no_shingles": sum(1 for s in sets if s.size == 0), "identical_shingle_sets": identical,
        "candidate_pairs": len(candidates), "verified_pairs": len(edges),
        "rejected_pairs": len(candidates) - len(edges), "largest_bucket": largest_bucket,
        "below_threshold_to_representative": below,
        "bands": hasher.bands, "rows": hasher.rows, "num_perm": hasher.num_perm,
        "threshold": config.threshold, "ngram": config.ngram,
        "seconds": {k: round(v, 3) for k, v in timings.items()},
    }
    return FuzzyResult(ids, attributes, stats)


def _attributes_of(g: int, rep: int, ids: list[list[Any]], where: list[tuple[int, int]],
                   sets: list[np.ndarray]) -> dict[str, Any]:
    """The sidecar attributes of document ``g``, whose cluster's representative is ``rep``."""
    representative = ids[where[rep][0]][where[rep][1]]
    if sets[g].size == 0:
        return {"duplicate": False, "cluster": None, "representative": representative, "jaccard": None}
    similarity = None if rep == g else round(jaccard(sets[g], sets[rep]), 6)
    return {"duplicate": rep != g, "cluster": xxhash.xxh3_64_hexdigest(sets[rep].tobytes()),
            "representative": representative, "jaccard": similarity}


def _representatives(roots: list[int], values: list[Any] | None) -> dict[int, int]:
    """The representative of every cluster (by its union-find root, its first document): the
    member the ``keep`` rule's ``values`` choose (:func:`~marin.processing.dedup.keep.choose`)."""
    if values is None:
        return {root: root for root in roots}
    clusters: dict[int, list[int]] = {}
    for g, root in enumerate(roots):
        clusters.setdefault(root, []).append(g)
    return {root: choose(members, values) for root, members in clusters.items()}


def _bucket_sizes(band_records: list[tuple[int, int]]) -> Iterator[int]:
    sizes: dict[int, int] = {}
    for key, _g in band_records:
        sizes[key] = sizes.get(key, 0) + 1
    return iter(sizes.values())


def signature_part(read: ShardSets, name: str, hasher: MinHasher, output_path: str) -> PartOutput:
    """The signature phase for one input file (``read``: its documents' shingle sets), as a part of
    the step's output: the band keys of each of its documents (a row of zeros for a document
    without shingles) in ``_minhash/<name>.npy``."""
    rows, seen = [], {}
    for shingles in read.sets:
        key = shingles.tobytes()
        if key not in seen:  # a document repeated within the file is signed once
            seen[key] = hasher.band_keys(hasher.signature(shingles)) if shingles.size else [0] * hasher.bands
        rows.append(seen[key])
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(rows, dtype=np.uint64).reshape(len(rows), hasher.bands), allow_pickle=False)
    name = f"{_SIGNATURES}/{name}.npy"
    fs.atomic_write(fs.join(output_path, name), buffer.getvalue())
    return PartOutput((name,), {"documents": len(rows)})


def _read_band_keys(output_path: str, part: Part) -> np.ndarray:
    return np.load(io.BytesIO(fs.read_bytes(fs.join(output_path, part.output.files[0]))), allow_pickle=False)


@step_function(StepTraits(plan_start=IncrementalStart(("input",))))
def fuzzy_dedup_step(config: FuzzyDedupConfig, output_path: str) -> None:
    """Step function: near-duplicate sidecars and ``_summary.json``.

    Summary: ``documents``, ``duplicates`` (removed if consolidation drops duplicates),
    ``clusters``, ``candidate_pairs``, ``verified_pairs``, ``rejected_pairs`` and the other counts
    of :func:`fuzzy_dedup`, with a few examples (id, representative, Jaccard).

    The signature phase runs file by file (:func:`signature_part`, :mod:`marin.processing.per_file`):
    over a changed file set, the band keys of unchanged files are copied from an earlier build, and
    only the clustering runs again over every document.
    """
    files = input_files(config.input, DOCUMENT_SUFFIXES)
    shards = [Shard(f.path, f.name) for f in files]
    hasher = config.hasher()
    read: dict[str, ShardSets] = {}  # the files signed here: the clustering need not read them again

    def sign(f: InputFile) -> PartOutput:
        read[f.name] = ShardSets.read(Shard(f.path, f.name), config.ngram, config.keep)
        return signature_part(read[f.name], f.name, hasher, output_path)

    parts = map_files(files, output_path, sign)
    band_keys = [_read_band_keys(output_path, p) for p in parts]
    known = {i: read[f.name] for i, f in enumerate(files) if f.name in read}
    with step_group_by(config.grouping, output_path) as group_by:
        result = fuzzy_dedup(shards, config, group_by, band_keys, known)
    for shard, shard_ids, attrs in zip(shards, result.ids, result.attributes, strict=True):
        write_sidecar(output_path, shard, shard_ids, attrs)
    examples = [{"id": doc_id, "representative": a["representative"], "jaccard": a["jaccard"]}
                for shard_ids, attrs in zip(result.ids, result.attributes, strict=True)
                for doc_id, a in zip(shard_ids, attrs, strict=True) if a["duplicate"]][:_MAX_EXAMPLES]
    summary = {"step": "dedup_fuzzy", "shards": len(shards), **result.stats, "examples": examples}
    summary.pop("seconds")  # timings differ between runs; the summary must not
    write_summary(output_path, summary)
