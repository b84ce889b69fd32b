"""Build a Hugging Face hub cache folder in the hub's own layout, from generated files (no network).

    <HF_HOME>/hub/datasets--<org>--<name>/          (models--<org>--<name>/ for a model)
        blobs/<sha256 of the content>
        refs/main                      (the revision, a 40-hex commit id)
        snapshots/<revision>/<path>    (relative symlinks into blobs/)
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
from pathlib import Path

WORDS = ("the cat dog sun tree girl boy ran saw big small happy sad red blue ball park home "
         "friend played found went said little day night moon star").split()


def stories(n: int, seed: int) -> list[str]:
    """``n`` short generated stories (deterministic for a seed)."""
    rng = random.Random(seed)
    return ["Once upon a time " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60))) + "."
            for _ in range(n)]


def parquet_bytes(texts: list[str]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"text": texts}), buf)
    return buf.getvalue()


def jsonl_bytes(texts: list[str]) -> bytes:
    return "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()


def write_hub_dataset(hf_home: Path, repo_id: str, files: dict[str, bytes], revision: str | None = None,
                      kind: str = "datasets") -> Path:
    """Write ``files`` (relative path -> content) as the cached snapshot of dataset ``repo_id``
    (``kind="models"``: of model ``repo_id``).

    Returns the snapshot folder.
    """
    repo = Path(hf_home) / "hub" / (f"{kind}--" + repo_id.replace("/", "--"))
    revision = revision or hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        blob = repo / "blobs" / hashlib.sha256(content).hexdigest()
        blob.write_bytes(content)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snapshot


def tinystories_like(hf_home: Path, repo_id: str = "roneneldan/TinyStories", n_train: int = 600,
                     n_validation: int = 60) -> Path:
    """A small dataset shaped as the Hub serves TinyStories: Parquet train/validation shards, plus text files."""
    train = stories(n_train, seed=1)
    validation = stories(n_validation, seed=2)
    half = n_train // 2
    return write_hub_dataset(hf_home, repo_id, {
        "data/train-00000-of-00002.parquet": parquet_bytes(train[:half]),
        "data/train-00001-of-00002.parquet": parquet_bytes(train[half:]),
        "data/validation-00000-of-00001.parquet": parquet_bytes(validation),
        "TinyStories-train.txt": "\n".join(train).encode(),
        "README.md": b"---\nlicense: cdla-sharing-1.0\n---\n# generated for tests\n",
    })
