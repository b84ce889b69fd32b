"""Reference log-probs: every preference pair scored once by a frozen model, for any number of DPO runs.

Output layout (what :func:`score_pairs` writes and :func:`read_reference` reads)::

    <out>/reference.json       {"format": "levanter.reference_logprobs/v1", "model", "data",
                                "data_index_sha256", "splits": {split: {"pairs", "file"}}}
    <out>/<split>.parquet      one row per pair, in the split's record order: chosen_logp,
                                rejected_logp (summed log-probs of the completions' tokens),
                                chosen_tokens, rejected_tokens

The data's ``index.json`` digest ties the log-probs to the exact tokenized pairs they score; a DPO
run refuses log-probs of other data.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from typing import Any

import numpy as np

from rigging import filesystem as fs

__all__ = ["REFERENCE_FILE", "REFERENCE_FORMAT", "read_reference", "score_pairs"]

REFERENCE_FORMAT = "levanter.reference_logprobs/v1"
REFERENCE_FILE = "reference.json"
_COLUMNS = ("chosen_logp", "rejected_logp", "chosen_tokens", "rejected_tokens")


def _data_digest(data_path: str) -> str:
    return hashlib.sha256(fs.read_bytes(fs.join(data_path, "index.json"))).hexdigest()


def _preference_index(data_path: str) -> dict[str, Any]:
    from levanter.data.chat import PREFERENCE_FORMAT
    from levanter.data.tokenized import read_index

    index = read_index(data_path)
    if index["format"] != PREFERENCE_FORMAT:
        raise ValueError(f"{data_path} holds {index['format']} data, not preference pairs ({PREFERENCE_FORMAT})")
    return index


def score_pairs(model_path: str, data_path: str, output_path: str, *, batch_size: int = 8, ema: bool = False,
                compute_dtype: Any = None) -> dict[str, int]:
    """Score every pair of every split of the preference data at ``data_path`` with the final model of
    the training output ``model_path`` (its average with ``ema``); write the layout above.

    A model whose vocabulary is smaller than the data's (a pretrained model, chat tokens added) is
    grown as a fine-tune of it starts (``levanter.models.vocab``). Returns pairs scored per split.
    """
    import jax
    import jax.numpy as jnp

    from levanter.data.chat import loss_weights
    from levanter.data.preference import iter_pair_batches
    from levanter.generate import load_model
    from levanter.models.vocab import extend_vocab
    from levanter.training.loss import sequence_logprobs

    index = _preference_index(data_path)
    config, params = load_model(model_path, ema=ema)
    vocab, seq_len = int(index["vocab_size"]), int(index["max_seq_len"])
    if vocab > config.vocab_size:
        config, params = dataclasses.replace(config, vocab_size=vocab), extend_vocab(params, vocab)
    if seq_len > config.max_seq_len:
        config = dataclasses.replace(config, max_seq_len=seq_len)
    dtype = jnp.float32 if compute_dtype is None else compute_dtype
    model = config.build(dtype)
    window = seq_len + 1

    def score(p: Any, pairs: Any) -> tuple[Any, Any]:
        flat = pairs.reshape(-1, 3, window)
        return sequence_logprobs(model, p, flat, dtype), jnp.sum(loss_weights(flat).astype(jnp.float32), axis=-1)

    scorer = jax.jit(score)
    splits: dict[str, dict[str, Any]] = {}
    for split in sorted(index["splits"]):
        rows: list[np.ndarray] = []
        for batch, real in iter_pair_batches(data_path, split, window=window, batch_size=batch_size):
            sums, counts = jax.device_get(scorer(params, jnp.asarray(batch["pairs"])))
            rows.append(np.concatenate([sums.reshape(-1, 2), counts.reshape(-1, 2)], axis=1)[:real])
        table = np.concatenate(rows) if rows else np.zeros((0, 4), np.float32)
        name = f"{split}.parquet"
        fs.atomic_write(fs.join(output_path, name), _parquet(table))
        splits[split] = {"pairs": len(table), "file": name}
    record = {"format": REFERENCE_FORMAT, "model": model_path, "ema": ema, "data": data_path,
              "data_index_sha256": _data_digest(data_path), "splits": splits}
    fs.atomic_write(fs.join(output_path, REFERENCE_FILE), json.dumps(record, indent=2) + "\n")
    return {split: meta["pairs"] for split, meta in splits.items()}


def _parquet(table: np.ndarray) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {name: pa.array(table[:, i].astype(np.float32 if i < 2 else np.int32)) for i, name in enumerate(_COLUMNS)}
    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer)
    return buffer.getvalue()


def read_reference(folder: str, data_path: str) -> dict[str, np.ndarray]:
    """``{split: [pairs, 2] float32}`` (chosen, rejected) of the reference log-probs in ``folder``.

    Raises:
        ValueError: ``folder`` holds no reference log-probs, or they score other data than ``data_path``'s.
    """
    import pyarrow.parquet as pq

    path = fs.join(folder, REFERENCE_FILE)
    if not fs.exists(path):
        raise ValueError(f"{folder} holds no reference log-probs ({REFERENCE_FILE} missing): is it a "
                         "reference_logprobs(...) output?")
    record = json.loads(fs.read_text(path))
    if record.get("format") != REFERENCE_FORMAT:
        raise ValueError(f"{path}: not a {REFERENCE_FORMAT} record (format {record.get('format')!r})")
    if record["data_index_sha256"] != _data_digest(data_path):
        raise ValueError(f"the reference log-probs in {folder} score other preference data ({record['data']}) "
                         f"than this run reads ({data_path}); score this data with reference_logprobs(...)")
    out = {}
    for split, meta in record["splits"].items():
        table = pq.read_table(io.BytesIO(fs.read_bytes(fs.join(folder, meta["file"]))))
        out[split] = np.stack([table.column(c).to_numpy() for c in _COLUMNS[:2]], axis=1).astype(np.float32)
    return out
