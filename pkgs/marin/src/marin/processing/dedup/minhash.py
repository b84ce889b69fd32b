"""MinHash signatures and LSH banding for near-duplicate detection.

Shingles are runs of ``ngram`` consecutive words (:func:`marin.processing.text.words`), each hashed
to 64 bits with xxh3 (:func:`marin.processing.text.ngram_hashes`); a document's shingle set is the
sorted array of its distinct hashes. A text shorter than ``ngram`` words has one shingle (all its
words); a text without words has none and takes no part in near-duplicate detection.

Permutations: ``num_perm`` maps ``x -> (a * (x mod p) + b) mod p`` over the Mersenne prime
``p = 2**31 - 1``, with ``a`` in ``[1, p)`` and ``b`` in ``[0, p)`` drawn from
``numpy.random.default_rng(seed)``; each is a permutation of ``Z_p`` and the products fit in 64
bits, so a signature is exact integer arithmetic, vectorised over the shingles.

Banding: a signature is cut into ``bands`` bands of ``rows`` values; a band's key is the xxh3-64
of its band index and its values. Two documents whose Jaccard similarity is ``s`` share at least
one key with probability ``1 - (1 - s**rows)**bands``; :func:`optimal_bands` picks ``(bands,
rows)`` with ``bands * rows <= num_perm`` minimising the weighted area of false positives (the
curve below the threshold) plus false negatives (above it).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import xxhash

from marin.processing.text import ngram_hashes, words

__all__ = ["MERSENNE_PRIME", "MinHasher", "detection_probability", "jaccard", "optimal_bands", "shingle_set"]

MERSENNE_PRIME = (1 << 31) - 1
_INTEGRATION_POINTS = 1001


def shingle_set(text: str, ngram: int) -> np.ndarray:
    """Sorted distinct 64-bit hashes of the ``ngram``-word shingles of ``text`` (uint64)."""
    hashes = ngram_hashes(words(text), ngram)
    return np.unique(np.fromiter(hashes, dtype=np.uint64, count=len(hashes)))


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two sorted distinct shingle arrays (1.0 for two empty sets)."""
    if a.size == 0 and b.size == 0:
        return 1.0
    common = np.intersect1d(a, b, assume_unique=True).size
    return common / (a.size + b.size - common)


def detection_probability(similarity: float, bands: int, rows: int) -> float:
    """Probability that two documents of Jaccard ``similarity`` share a band key."""
    return 1.0 - (1.0 - similarity ** rows) ** bands


@functools.cache
def optimal_bands(threshold: float, num_perm: int, false_negative_weight: float = 0.5) -> tuple[int, int]:
    """``(bands, rows)`` minimising the weighted false-positive plus false-negative area.

    The false-positive area is the integral of the detection probability over similarities in
    ``[0, threshold]``, the false-negative area that of its complement over ``[threshold, 1]``;
    they are weighted ``1 - false_negative_weight`` and ``false_negative_weight``. Ties go to
    fewer bands (fewer keys to group).

    Raises:
        ValueError: ``threshold`` not in (0, 1), ``num_perm`` < 1, or the weight not in [0, 1].
    """
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    if num_perm < 1:
        raise ValueError(f"num_perm must be >= 1, got {num_perm}")
    if not 0 <= false_negative_weight <= 1:
        raise ValueError(f"false_negative_weight must be in [0, 1], got {false_negative_weight}")
    s = np.linspace(0.0, 1.0, _INTEGRATION_POINTS)
    below, above = s <= threshold, s >= threshold
    best: tuple[float, int, int] | None = None
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            p = 1.0 - (1.0 - s ** rows) ** bands
            false_pos = float(np.trapezoid(np.where(below, p, 0.0), s))
            false_neg = float(np.trapezoid(np.where(above, 1.0 - p, 0.0), s))
            error = (1 - false_negative_weight) * false_pos + false_negative_weight * false_neg
            if best is None or error < best[0] - 1e-15:
                best = (error, bands, rows)
    assert best is not None
    return best[1], best[2]


@dataclass(frozen=True)
class MinHasher:
    """Signatures of ``num_perm`` seeded permutations and their LSH band keys.

    Attributes:
        num_perm: number of permutations (signature length).
        bands: number of bands (``bands * rows <= num_perm``; the rest of the signature is unused).
        rows: signature values per band.
        seed: seed of the permutations.
    """

    num_perm: int
    bands: int
    rows: int
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_perm < 1:
            raise ValueError(f"num_perm must be >= 1, got {self.num_perm}")
        if self.bands < 1 or self.rows < 1:
            raise ValueError(f"bands and rows must be >= 1, got {self.bands} and {self.rows}")
        if self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands * rows must be <= num_perm ({self.num_perm}), got {self.bands} * {self.rows}")

    @functools.cached_property
    def _coefficients(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        a = rng.integers(1, MERSENNE_PRIME, size=self.num_perm, dtype=np.uint64)
        b = rng.integers(0, MERSENNE_PRIME, size=self.num_perm, dtype=np.uint64)
        return a[:, None], b[:, None]

    def signature(self, shingles: np.ndarray) -> np.ndarray:
        """The ``num_perm`` minimum permuted values of a non-empty shingle set (uint32).

        Raises:
            ValueError: ``shingles`` is empty (such a document has no signature).
        """
        if shingles.size == 0:
            raise ValueError("an empty shingle set has no MinHash signature")
        a, b = self._coefficients
        x = shingles % np.uint64(MERSENNE_PRIME)
        permuted = (a * x[None, :] + b) % np.uint64(MERSENNE_PRIME)
        return permuted.min(axis=1).astype(np.uint32)

    def band_keys(self, signature: np.ndarray) -> list[int]:
        """One 64-bit key per band: xxh3-64 of the band index and its ``rows`` values."""
        keys = []
        digest = xxhash.xxh3_64_intdigest
        for band in range(self.bands):
            values = signature[band * self.rows:(band + 1) * self.rows].astype("<u4").tobytes()
            keys.append(digest(values, seed=band))
        return keys
