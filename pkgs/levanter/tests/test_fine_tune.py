"""Fine-tuning: a run starts from another run's final parameters, its vocabulary grown to the data's."""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import numpy as np
import pytest

import levanter.training.start
from levanter.data.chat import CHAT_FORMAT, encode_chat_record
from levanter.initialize import TrainedModel
from levanter.trainer import main
from testsupport.levanter_data import pattern_documents, tiny_config, write_tokenized


def _chat_dataset(root: str, vocab_size: int) -> str:
    """Pattern documents as conversations: a new "header" id (mask off), then the document (mask on)."""
    header = vocab_size - 1

    def records(n: int, seed: int) -> list[np.ndarray]:
        out = []
        for doc in pattern_documents(n, 64, seed=seed):
            doc = doc[:30]  # header + 30 tokens fit a window of seq_len + 1 = 33
            ids = [header, *doc]
            out.append(np.frombuffer(encode_chat_record([(ids, [0] + [1] * len(doc))]), "<u4"))
        return out

    write_tokenized(root, {"train": records(200, 1), "validation": records(40, 2)}, vocab_size=vocab_size, eos_id=0)
    index_path = os.path.join(root, "index.json")
    index = json.load(open(index_path))
    index["format"] = CHAT_FORMAT
    json.dump(index, open(index_path, "w"))
    return root


def _first_loss(out: str) -> float:
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    return next(r["loss"] for r in rows if "loss" in r)


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The chat data of both tests (read-only): written once."""
    return _chat_dataset(str(tmp_path_factory.mktemp("chat") / "chat"), vocab_size=68)


@pytest.fixture(scope="module")
def scratch(chat: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh model trained 2 steps on the chat data: the fine-tune's baseline, and the model the
    eval scores (one run for both)."""
    out = str(tmp_path_factory.mktemp("scratch") / "run")
    main(tiny_config(chat, num_train_steps=2, eval_batches=1, log_every=1), out)
    return out


def test_a_fine_tune_starts_from_the_pretrained_weights_with_the_vocabulary_grown(pretrained_tiny, chat: str,
                                                                                    scratch: str, tmp_path,
                                                                                    monkeypatch) -> None:
    # The session's tiny model, trained 20 steps on the pattern documents the chat data holds.
    pretrained = pretrained_tiny[1]

    def no_draw(*args, **kwargs):
        raise AssertionError("a run that starts from trained weights draws no fresh parameters")

    monkeypatch.setattr(levanter.training.start, "fresh_state", no_draw)
    tuned = str(tmp_path / "tuned")
    config = tiny_config(chat, num_train_steps=2, eval_batches=1, initialize_from=TrainedModel(pretrained),
                         log_every=1)
    result = main(config, tuned)
    assert result.model.vocab_size == 68 and result.start_step == 0
    # The pretrained model already knows the documents (its first loss: 3.47 nats); a fresh one is at
    # chance (log 68 = 4.22, give or take a few hundredths at any initialisation).
    assert _first_loss(tuned) < 0.85 * _first_loss(scratch), (_first_loss(tuned), _first_loss(scratch))

    wider = dataclasses.replace(config, model=dataclasses.replace(config.model, hidden_dim=64))
    with pytest.raises(ValueError, match=r"the trained model's shape differs from model= \(hidden_dim: 32 != 64\)"):
        main(wider, str(tmp_path / "wider"))


def test_eval_on_chat_data_scores_the_mask_on_targets_only(chat: str, scratch: str) -> None:
    import jax.numpy as jnp

    from levanter.data import DatasetSpec, eval_batches
    from levanter.eval import evaluate_split
    from levanter.generate import load_final_model
    from levanter.models.llama import transformed_llama
    from levanter.trainer import loss_fn

    config, params = load_final_model(scratch)
    result = evaluate_split(config, params, chat, "validation", seq_len=32, batch_size=8,
                            byte_lengths=np.ones(68, dtype=np.int64))
    # 40 conversations of a mask-off header and its document's tokens (mask on), one per window:
    # every document token is a counted target; the padding after it never is.
    from levanter.data import decode_chat_record, open_split

    split = open_split(chat, "validation")
    lengths = [decode_chat_record(split.source[i]).shape[1] for i in range(len(split.source))]
    assert len(lengths) == 40 and result.tokens == result.bytes == sum(n - 1 for n in lengths) < 40 * 32
    model = transformed_llama(config, jnp.float32)
    batches = eval_batches([DatasetSpec(chat)], seq_len=32, batch_size=8, max_batches=5)
    assert sum(len(b) for b in batches) == 40
    counts = [sum(n - 1 for n in lengths[i:i + 8]) for i in range(0, 40, 8)]
    loss = jax.jit(lambda p, batch: loss_fn(model, p, batch, jnp.float32))  # one program, not one per operation
    means = [float(loss(params, jnp.asarray(b))) for b in batches]
    expected = sum(m * c for m, c in zip(means, counts, strict=True)) / sum(counts)
    assert result.loss == pytest.approx(expected, rel=1e-5)
